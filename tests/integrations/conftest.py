"""transformers, imported for these tests only: on import it adds an import hook to sys.meta_path, and with a
third-party hook present the static target checks call absent modules unverifiable (KC304) instead of missing;
so it is imported by a fixture, not at collection, and the hook is taken out again after each module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def transformers() -> Iterator[ModuleType]:
    meta_path, path_hooks = list(sys.meta_path), list(sys.path_hooks)
    module = pytest.importorskip("transformers")
    yield module
    sys.meta_path[:] = meta_path
    sys.path_hooks[:] = path_hooks
