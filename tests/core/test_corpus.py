"""The diagnostic corpus: every tests/corpus/<case>/ is a catalog with one mistake and the exact output it gets.

Each case directory holds the catalog files of the case, any throwaway kernel modules (*.py) its
targets name, and expected.txt: the whole output of `kcatalog validate .` run inside it, snapshot
style. Codes that no catalog file can produce (`require=`, `overrides=`) have their cases here, in
API_CASES. Together they must cover every code in kcatalog.codes.CODES.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kcatalog import CatalogError, check_catalog, load_catalog
from kcatalog.codes import CODES
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CASES = sorted(path.name for path in CORPUS.iterdir() if path.is_dir())
MIGRATE_CASES = Path(__file__).resolve().parents[1] / "migrate" / "cases"
CODE = re.compile(r"^(?:\S+:\d+:\d+: )?(KC\d{3}) ")

# Outside any file: (keyword arguments of check_catalog, environment, expected diagnostic lines),
# checked against the clean_minimal case's catalog.
API_CASES: dict[str, tuple[dict[str, object], dict[str, str], list[str]]] = {
    "require_satisfied": ({"require": ["norm.rms_norm"]}, {}, []),
    "require_unknown_op_typo": (
        {"require": ["norm.rms_nrom"]},
        {},
        [
            "KC501 required op 'norm.rms_nrom' is not in the catalog (did you mean 'norm.rms_norm'?); "
            "available: norm.rms_norm",
        ],
    ),
    "require_unknown_op": (
        {"require": ["softmax.softmax"]},
        {},
        [
            "KC501 required op 'softmax.softmax' is not in the catalog; available: norm.rms_norm",
        ],
    ),
    "require_backend_missing": (
        {"require": {"norm.rms_norm": ["torch", "triton"]}},
        {},
        [
            "norm.yaml:4:3: KC502 required backend 'triton' of op 'norm.rms_norm' is not declared; it has torch",
        ],
    ),
    "require_backend_given_as_string": (
        {"require": {"norm.rms_norm": "triton"}},
        {},
        [
            "norm.yaml:4:3: KC502 required backend 'triton' of op 'norm.rms_norm' is not declared; it has torch",
        ],
    ),
    "allowed_modules_of_the_caller": (
        {"allowed_modules": ["kcatalog.kernels.triton"]},
        {},
        [
            "norm.yaml:11:17: KC305 target 'kcatalog.kernels.torch.layernorm:rms_norm' is outside the allowed modules "
            "(allowed_modules: kcatalog.kernels.triton)",
        ],
    ),
    "override_unknown_backend": (
        {"overrides": {"norm.*": "trtion"}},
        {},
        [
            "KC601 overrides=: unknown backend 'trtion' (did you mean 'triton'?); known: torch, triton",
        ],
    ),
    "override_env_unknown_backends": (
        {},
        {"KCATALOG_OVERRIDES": "norm.*=tirton", "KCATALOG_BACKEND": "aot"},
        [
            "KC601 KCATALOG_OVERRIDES: unknown backend 'tirton' (did you mean 'triton'?); known: torch, triton",
            "KC601 KCATALOG_BACKEND: unknown backend 'aot'; known: torch, triton",
        ],
    ),
    "override_matches_no_op": (
        {"overrides": "attention.*=torch"},
        {},
        [
            "KC602 overrides=: 'attention.*' matches no op; available: norm.rms_norm",
        ],
    ),
    "deterministic_malformed": (
        {},
        {"KCATALOG_DETERMINISTIC": "on"},
        [
            "KC604 KCATALOG_DETERMINISTIC='on': expected 1 (deterministic), batch_invariant, or 0 (off); "
            "see docs/selection.md",
        ],
    ),
    "override_malformed": (
        {"overrides": "norm.rms_norm"},
        {},
        [
            "KC603 overrides=: 'norm.rms_norm' is not 'op-or-glob=backend'",
        ],
    ),
}


def validate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """Run `kcatalog validate ARGS`; its exit code and stdout lines."""
    code = main(["validate", *args])
    return code, capsys.readouterr().out.splitlines()


def expected_lines(case: str) -> list[str]:
    """The case's expected output, line by line."""
    return (CORPUS / case / "expected.txt").read_text(encoding="utf-8").splitlines()


def enter(case: str, workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """Write the case's kernel modules and make its directory the working one; its layers and extra options."""
    directory = CORPUS / case
    for module in directory.glob("*.py"):
        workspace.module(module.stem, module.read_text(encoding="utf-8"))
    monkeypatch.chdir(directory)
    if (directory / "site").is_dir():  # installed distributions (dist-info and packages): their plugins
        monkeypatch.syspath_prepend(str(directory / "site"))
    extra = directory / "args.txt"  # e.g. --import: options a case needs beyond a plain validate
    layers = directory / "layers.txt"  # the layers of a case made of several, in order (default: '.')
    paths = layers.read_text(encoding="utf-8").split() if layers.exists() else ["."]
    return paths, extra.read_text(encoding="utf-8").split() if extra.exists() else []


@pytest.mark.parametrize("case", CASES)
def test_case(
    case: str,
    workspace: Workspace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths, extra = enter(case, workspace, monkeypatch)
    code, out = validate(capsys, *paths, *extra)
    expected = expected_lines(case)
    assert out == expected
    assert code == (1 if expected[-1].startswith("Found ") else 0)


@pytest.mark.parametrize("case", CASES)
def test_load_catalog_agrees_with_validate(
    case: str, workspace: Workspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What `validate` accepts, load_catalog accepts, with the same warnings; what it rejects, load_catalog rejects
    # with the same diagnostics, also through its cache (on by default, off for a check) on a second load.
    paths, extra = enter(case, workspace, monkeypatch)
    options: dict[str, object] = {"import_targets": "--import" in extra}
    if "--plan" in extra:
        options["plan"] = extra[extra.index("--plan") + 1]
    checked, diagnostics = check_catalog(paths, **options)  # type: ignore[arg-type]
    for _ in range(2):
        try:
            loaded = load_catalog(paths, cache=tmp_path / "cache", **options)  # type: ignore[arg-type]
        except CatalogError as exc:
            assert checked is None
            assert list(exc.diagnostics) == diagnostics
        else:
            assert checked is not None
            assert list(loaded.warnings) == diagnostics


@pytest.mark.parametrize("case", sorted(API_CASES))
def test_api_case(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kwargs, environ, expected = API_CASES[case]
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(CORPUS / "clean_minimal")
    catalog, diagnostics = check_catalog(["."], **kwargs)
    assert [str(d) for d in diagnostics] == expected
    assert (catalog is None) == bool(expected)


def test_corpus_covers_every_code() -> None:
    lines = [line for case in CASES for line in expected_lines(case)]
    lines += [line for _, _, expected in API_CASES.values() for line in expected]
    # KC7xx come from `kcatalog import-registry`, whose cases are registry dumps (tests/migrate/cases).
    lines += [line for path in sorted(MIGRATE_CASES.glob("*/expected.txt")) for line in path.read_text().splitlines()]
    found = {match[1] for match in map(CODE.match, lines) if match}
    assert sorted(found) == sorted(CODES)


# Cases that cannot live as a directory in the corpus: a missing path, a symlink. (A file over the size limit:
# tests/hardening/test_hostile_files.py, through check_catalog and `kcatalog validate`.)


def test_path_that_does_not_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert validate(capsys, "no_such_dir") == (
        1,
        [
            "KC006 path 'no_such_dir' does not exist",
            "KC206 no catalog settings file (kcatalog.yaml) among the paths; it declares the known backends, "
            "their priority and the policy",
            "Found 2 errors.",
        ],
    )


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks on this platform")
def test_symlink_out_of_the_catalog_directory(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = workspace.minimal()
    outside = tmp_path / "secret.yaml"
    outside.write_text("kcatalog: 1\n", encoding="utf-8")
    (catalog / "link.yaml").symlink_to(outside)
    monkeypatch.chdir(catalog)
    assert validate(capsys, ".") == (
        1,
        [
            f"link.yaml:1:1: KC005 symlink leaves the catalog directory (points to '{outside.resolve()}'); refused",
            "Found 1 error in 1 file.",
        ],
    )
