"""The catalog over the fixture package (tests/targets/fixture): exactly its expected diagnostics, and nothing
of the package imported, in this process and in a fresh one, whatever import hooks are installed."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import subprocess
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import Site

import kcatalog
from kcatalog.tools.cli import main


def validate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    code = main(["validate", *args])
    return code, capsys.readouterr().out.splitlines()


def load_lazily(site: Site, name: str) -> types.ModuleType:
    """The LazyLoader recipe of the importlib docs: the module runs on its first attribute access."""
    spec = importlib.util.spec_from_file_location(name, site.root / f"{name}.py")
    assert spec is not None and spec.loader is not None
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def test_the_fixture_catalog_gets_exactly_its_diagnostics(
    site: Site, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lazy = load_lazily(site, "kcfx_lazy")
    monkeypatch.chdir(site.catalog)
    code, out = validate(capsys, ".")
    assert out == site.expected()
    assert code == 1
    assert site.markers_left() == []
    assert site.imported() == ["kcfx_lazy"]  # registered by the test, still not run:
    assert type(lazy).__name__ == "_LazyModule"


def test_check_catalog_imports_nothing_of_the_fixture(site: Site) -> None:
    catalog, diagnostics = kcatalog.check_catalog([site.catalog])
    assert catalog is None
    assert [str(d).partition(": ")[2] for d in diagnostics] == [
        line.partition(": ")[2] for line in site.expected()[:-1]
    ]
    assert site.markers_left() == []
    assert site.imported() == []


def test_a_fresh_process_gets_the_same_and_imports_nothing(site: Site) -> None:
    script = (
        "import sys\n"
        "from kcatalog.tools.cli import main\n"
        "code = main(['validate', '.'])\n"
        "print('imported:', sorted(m for m in sys.modules if m.partition('.')[0] in ('kcfx', 'kcfx_ns', 'kcfx_lazy')))\n"
        "raise SystemExit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=site.catalog, capture_output=True, text=True)
    assert done.stdout.splitlines() == [*site.expected(), "imported: []"], done.stderr
    assert done.returncode == 1
    assert site.markers_left() == []


class MarkerFinder(importlib.abc.MetaPathFinder):
    """A third-party import hook that records every call, and provides a module no file holds."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        self.marker.write_text(f"find_spec({fullname!r}) was called\n")
        if fullname == "kcfx_hooked":
            return importlib.machinery.ModuleSpec(fullname, None)
        return None


@pytest.mark.parametrize("where", ["ahead of the standard finders", "after them"])
def test_import_hooks_are_never_called(
    where: str, site: Site, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = site.markers / "MarkerFinder"
    finder = MarkerFinder(marker)
    hooks = [finder, *sys.meta_path] if where.startswith("ahead") else [*sys.meta_path, finder]
    monkeypatch.setattr(sys, "meta_path", hooks)
    hooked = site.catalog / "hooked.yaml"
    hooked.write_text(
        "kcatalog: 1\ngroup: hooked\nops:\n  only_a_hook_has_it:\n    description: a module only the hook provides\n"
        '    signature: "(x: Tensor) -> Tensor"\n    reference: torch\n    dtypes: [float32]\n'
        "    backends:\n      torch: {target: kcfx_hooked:kernel}\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(site.catalog)
    code, out = validate(capsys, ".")
    name = f"{MarkerFinder.__module__}.MarkerFinder"
    might = f"is not found by the standard import machinery; the third-party import hook {name} might provide it"
    expected = [  # where the hook might provide the module a star import reads, that too is unverifiable
        line.replace("not found: package 'kcfx' has no module '_mac_only'", f"{might} (never called here)")
        for line in site.expected()[:-1]
    ]
    assert out == [
        *expected,
        f"hooked.yaml:10:23: KC304 warning: target 'kcfx_hooked:kernel': module 'kcfx_hooked' {might} "
        "(never called here); not verifiable statically",
        "Found 12 errors and 7 warnings in 2 files.",
    ]
    assert code == 1
    assert not marker.exists()
    assert site.markers_left() == []
    assert site.imported() == []
