"""kcatalog's version: `kcatalog --version` and `kcatalog.__version__`, both from the installed distribution's
metadata, read only when asked (`import kcatalog` stays lean)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from catalog_builder import child_env

import kcatalog
from kcatalog import _version
from kcatalog.tools.cli import main


@pytest.fixture
def installed() -> str:
    try:
        return importlib.metadata.version("kcatalog")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("kcatalog is not installed here (a bare source tree)")


def test_version_flag_prints_the_installed_version(installed: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr() == (f"kcatalog {installed}\n", "")


def test_dunder_version_is_the_installed_version(installed: str) -> None:
    assert kcatalog.__version__ == installed


def test_a_source_tree_never_installed_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    _version.version.cache_clear()
    try:
        assert kcatalog.__version__ == _version.UNKNOWN == "0+unknown"
    finally:
        _version.version.cache_clear()


def test_import_reads_no_metadata() -> None:
    """importlib.metadata costs tens of ms to import: `import kcatalog` leaves it to the first `__version__`."""
    script = (
        "import sys, kcatalog\n"
        "before = 'importlib.metadata' in sys.modules\n"
        "kcatalog.__version__\n"
        "print(before, 'importlib.metadata' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=child_env())
    assert (done.returncode, done.stdout, done.stderr) == (0, "False True\n", "")
