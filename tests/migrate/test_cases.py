"""What a registry holds that the catalog format cannot express: every tests/migrate/cases/<case>/ is a registry
dump (registry.json, as `kcatalog dump-registry` writes) beside the whole output of
`kcatalog import-registry --from-json registry.json --out out` run in a copy of it, and its exit status.
Whatever is written still validates: nothing is half-written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kcatalog import check_catalog
from kcatalog.tools.cli import main

CASES_DIR = Path(__file__).resolve().parent / "cases"
CASES = sorted(path.name for path in CASES_DIR.iterdir() if path.is_dir())


def expected_lines(case: str) -> list[str]:
    """The committed output of one case, its last line the exit status."""
    return (CASES_DIR / case / "expected.txt").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("case", CASES)
def test_case(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(CASES_DIR / case / "registry.json", tmp_path)
    monkeypatch.chdir(tmp_path)
    code = main(["import-registry", "--from-json", "registry.json", "--out", "out"])
    assert [*capsys.readouterr().out.splitlines(), f"exit {code}"] == expected_lines(case)
    if not (tmp_path / "out").exists():  # nothing could be written, and nothing was
        assert "Wrote" not in (CASES_DIR / case / "expected.txt").read_text(encoding="utf-8")
        return
    catalog, diagnostics = check_catalog("out", check_targets=False)  # engine.* is not installed here
    assert catalog is not None, [str(d) for d in diagnostics]
