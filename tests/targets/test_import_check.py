"""`validate --import` imports every target the static check did not find wrong, also those it could only warn
about, and a target whose top-level package is missing stays the warning its static twin is."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import kcatalog

SETTINGS = "kcatalog: 1\nbackends:\n  torch: {description: reference}\npriority: [torch]\n"
MANIFEST = """\
kcatalog: 1
group: imp
ops:
  op:
    description: one op
    signature: "(x: Tensor, weight: Tensor) -> Tensor"
    reference: torch
    dtypes: [float32]
    backends:
      torch: {target: TARGET}
"""


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "kci_star.py").write_text("from math import *\n")
    (modules / "kci_getattr.py").write_text("def __getattr__(name):\n    return lambda x, weight: x\n")
    (modules / "kci_needs_absent.py").write_text("import kci_absent_dependency\n\ndef k(x, weight):\n    return x\n")
    monkeypatch.syspath_prepend(str(modules))
    directory = tmp_path / "catalog"
    directory.mkdir()
    (directory / "kcatalog.yaml").write_text(SETTINGS)
    yield directory
    for name in ("kci_star", "kci_getattr", "kci_needs_absent"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("target", "static", "imported"),
    [
        ("math:sqrt", "KC304", "KC309 target 'math:sqrt' takes (x); op 'imp.op' declares (x, weight)"),
        (
            "math:nonexistent",
            "KC304",
            "KC307 importing target 'math:nonexistent' failed: AttributeError: module 'math' has no attribute "
            "'nonexistent'",
        ),
        ("kci_star:pi", "KC304", "KC308 target 'kci_star:pi' is a float, not callable"),
        ("kci_getattr:anything", "KC304", None),  # __getattr__ provides it: imported, it holds
        (
            "kci_not_installed.norm:k",
            "KC303",
            "KC303 warning: module 'kci_not_installed.norm' unavailable here: top-level package 'kci_not_installed' "
            "is not installed (importing target 'kci_not_installed.norm:k' raised ModuleNotFoundError)",
        ),
        (
            "kci_needs_absent:k",
            None,
            "KC307 importing target 'kci_needs_absent:k' failed: ModuleNotFoundError: No module named "
            "'kci_absent_dependency'",
        ),
    ],
)
def test_import_checks_what_the_static_check_could_only_warn_about(
    target: str, static: str | None, imported: str | None, catalog: Path
) -> None:
    (catalog / "imp.yaml").write_text(MANIFEST.replace("TARGET", target))
    _, diagnostics = kcatalog.check_catalog([catalog])
    assert [d.code for d in diagnostics] == ([static] if static else [])
    _, diagnostics = kcatalog.check_catalog([catalog], import_targets=True)
    located = [str(d) for d in diagnostics]
    assert [line.partition(": ")[2] for line in located] == ([imported] if imported else [])
    if imported and imported.startswith("KC303"):
        assert not diagnostics[0].is_error  # as its static twin: the package may be installed where it runs
