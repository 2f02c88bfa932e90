"""Fixtures for the catalog core tests: a clean override environment and throwaway kernel modules."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kcatalog.check.overrides import ENV_BACKEND, ENV_OVERRIDES


@pytest.fixture(autouse=True)
def _no_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's KCATALOG_OVERRIDES or KCATALOG_BACKEND must not change what these tests see."""
    monkeypatch.delenv(ENV_OVERRIDES, raising=False)
    monkeypatch.delenv(ENV_BACKEND, raising=False)


@pytest.fixture
def kernel_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], str]]:
    """`write(name, source)` puts a throwaway module on sys.path for this test and forgets it afterwards."""
    root = tmp_path / "kernel_modules"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    written: list[str] = []

    def write(name: str, source: str) -> str:
        (root / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        importlib.invalidate_caches()
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)
