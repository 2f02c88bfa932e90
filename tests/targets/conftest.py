"""Fixtures of the static target checks: the fixture package (tests/targets/fixture/site) copied into tmp_path
with what cannot be committed (a file with an extension module's suffix, a sourceless .pyc), on sys.path, with
a directory for the markers its modules would leave if anything imported them."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parent / "fixture"
PACKAGES = ("kcfx", "kcfx_ns", "kcfx_lazy")


@dataclass(frozen=True)
class Site:
    """The fixture package's copy: its site directory, the catalog over it and the markers directory."""

    root: Path
    catalog: Path
    markers: Path

    def markers_left(self) -> list[str]:
        """The modules that were imported (each leaves a marker named after itself)."""
        return sorted(path.name for path in self.markers.iterdir())

    def imported(self) -> list[str]:
        """The fixture's modules in sys.modules."""
        return sorted(name for name in sys.modules if name.partition(".")[0] in PACKAGES)

    def expected(self, name: str = "expected.txt") -> list[str]:
        """The committed expected output, with this copy's paths filled in."""
        from kcatalog.pyresolve import locate

        math = locate("math").location
        text = (FIXTURE / "catalog" / name).read_text(encoding="utf-8")
        text = text.replace("{site}", str(self.root)).replace("{ext}", importlib.machinery.EXTENSION_SUFFIXES[0])
        text = text.replace("{python}", ".".join(map(str, sys.version_info[:2])))
        text = text.replace("{math}", (math.origin if math and math.origin else "built-in") if math else "?")
        return text.splitlines()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """The fixture package on sys.path (and PYTHONPATH, for child processes), never imported."""
    root = tmp_path / "site"
    shutil.copytree(FIXTURE / "site", root)
    (root / "kcfx" / f"fast{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"\x7fELF: never loaded")
    (root / "kcfx" / "legacy.pyc").write_bytes(b"never loaded either")
    catalog = tmp_path / "catalog"
    shutil.copytree(FIXTURE / "catalog", catalog, ignore=shutil.ignore_patterns("*.txt"))
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("KCFX_MARKERS", str(markers))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    importlib.invalidate_caches()
    try:
        yield Site(root, catalog, markers)
    finally:
        for name in [name for name in sys.modules if name.partition(".")[0] in PACKAGES]:
            del sys.modules[name]
