"""Fixtures for the CLI tests: a clean override environment."""

from __future__ import annotations

import pytest

from kcatalog.check.overrides import ENV_BACKEND, ENV_OVERRIDES


@pytest.fixture(autouse=True)
def _no_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's KCATALOG_OVERRIDES or KCATALOG_BACKEND must not change what these tests see."""
    monkeypatch.delenv(ENV_OVERRIDES, raising=False)
    monkeypatch.delenv(ENV_BACKEND, raising=False)
