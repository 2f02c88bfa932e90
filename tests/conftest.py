"""Suite-wide setup: Triton kernels run under the interpreter unless a GPU run asks otherwise; one test
environment (no backend overrides, a private load cache); throwaway workspaces."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from catalog_builder import CACHE_VARIABLE, SHELL_VARIABLES, Workspace, workspace_at

# Must be set before any Triton kernel is decorated: triton.jit reads it at definition time.
if os.environ.get("KCATALOG_TEST_DEVICE", "cpu") == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="session")
def _test_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What every test, fixture and child process sees: no KCATALOG_OVERRIDES, KCATALOG_BACKEND or KCATALOG_NO_CACHE
    of the developer's shell, and a load cache of this session's own, never the user's ~/.cache (children inherit
    it).

    Session-scoped, so that module- and session-scoped fixtures (which run a command once for many tests) see it
    too; a test that sets one of these variables does so through `monkeypatch`, which puts it back.
    """
    with pytest.MonkeyPatch.context() as mp:
        for name in SHELL_VARIABLES:
            mp.delenv(name, raising=False)
        mp.setenv(CACHE_VARIABLE, str(tmp_path_factory.mktemp("kcatalog-cache")))
        yield


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    """Throwaway catalogs and kernel modules under tmp_path (see catalog_builder)."""
    with workspace_at(tmp_path) as written:
        yield written
