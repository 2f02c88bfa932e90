"""Fixtures of the torch-op tests: the shipped catalog registered once (namespace 'kcatalog'), and a fresh torch
namespace per test for throwaway catalogs (torch's operator registry is process-wide and never forgets)."""

from __future__ import annotations

import itertools
import re

import pytest

pytest.importorskip("torch")

import kcatalog  # noqa: E402

_NAMESPACES = itertools.count()


@pytest.fixture(scope="session")
def shipped() -> kcatalog.Catalog:
    """The shipped catalog, its ops registered as torch.ops.kcatalog.*: the process's one shipped Catalog, the one
    kcatalog.kernelize uses without a catalog, so that whichever of them registers first, the names are its."""
    from kcatalog.integrations.kernelize import default_catalog

    catalog = default_catalog()
    catalog.register_torch_ops()
    return catalog


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A torch op namespace no other test uses."""
    return f"kct_{re.sub(r'[^A-Za-z0-9_]', '_', request.node.name)[:40]}_{next(_NAMESPACES)}"
