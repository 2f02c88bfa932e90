"""The pre-commit hook (.pre-commit-hooks.yaml): its entry, run as pre-commit runs it on changed files."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml
from catalog_builder import MINIMAL, child_env

HOOKS = Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml"


def hook() -> dict[str, object]:
    [found] = [h for h in yaml.safe_load(HOOKS.read_text(encoding="utf-8")) if h["id"] == "kcatalog-validate"]
    return dict(found)


def run_hook(files: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The hook's entry with the changed files appended, as pre-commit calls it (`kcatalog` as `python -m`)."""
    entry = shlex.split(str(hook()["entry"]))
    assert entry[0] == "kcatalog"
    argv = [sys.executable, "-m", "kcatalog", *entry[1:], *map(str, hook().get("args", [])), *files]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=child_env(), timeout=120)


def test_the_hook_declares_what_pre_commit_needs() -> None:
    found = hook()
    assert found["language"] == "python" and found["types"] == ["yaml"]
    pattern = re.compile(str(found["files"]))
    assert pattern.search("catalog/layernorm.yaml") and pattern.search("src/pkg/catalog/kcatalog.yml")
    assert not pattern.search(".github/workflows/ci.yaml")


def test_the_hook_fails_a_changed_file_with_a_mistake_and_passes_it_fixed(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "kcatalog.yaml").write_bytes((MINIMAL / "kcatalog.yaml").read_bytes())
    good = (MINIMAL / "norm.yaml").read_text(encoding="utf-8")
    (catalog / "norm.yaml").write_text(good.replace("rms_norm\n", "rms_nrom\n"), encoding="utf-8")
    failed = run_hook(["catalog/norm.yaml"], tmp_path)  # only the changed manifest: its settings come along
    assert failed.returncode == 1
    assert failed.stdout.splitlines() == [
        "catalog/norm.yaml:11:17: KC302 target 'kcatalog.kernels.torch.layernorm:rms_nrom': module "
        "'kcatalog.kernels.torch.layernorm' defines no 'rms_nrom' (did you mean 'rms_norm'?)",
        "Found 1 error in 1 file.",
    ]
    (catalog / "norm.yaml").write_text(good, encoding="utf-8")
    passed = run_hook(["catalog/norm.yaml", "catalog/kcatalog.yaml"], tmp_path)
    assert (passed.returncode, passed.stdout) == (0, "All checks passed!\n")
