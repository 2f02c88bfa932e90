"""Fixtures for the conformance tests: a clean override environment and a throwaway workspace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conformance_support import Workspace, one_torch_thread, workspace_at

from kcatalog.check.overrides import ENV_BACKEND, ENV_OVERRIDES


@pytest.fixture(autouse=True, scope="session")
def _no_override_env() -> Iterator[None]:
    """A developer's KCATALOG_OVERRIDES or KCATALOG_BACKEND must not change what these tests see.

    Session-scoped, unlike the other suites' fixture, because modules here share one run of a command.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(ENV_OVERRIDES, raising=False)
        mp.delenv(ENV_BACKEND, raising=False)
        yield


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    """A throwaway catalog directory and kernel-module directory (on sys.path) under tmp_path."""
    with workspace_at(tmp_path) as written:
        yield written


@pytest.fixture
def single_threaded() -> Iterator[None]:
    """Torch on one CPU thread for the test (see one_torch_thread)."""
    with one_torch_thread():
        yield
