"""Fixtures for the conformance tests: torch on one CPU thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conformance_support import one_torch_thread


@pytest.fixture
def single_threaded() -> Iterator[None]:
    """Torch on one CPU thread for the test (see one_torch_thread)."""
    with one_torch_thread():
        yield
