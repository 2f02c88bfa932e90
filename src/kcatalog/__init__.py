"""kcatalog: a declarative, validated catalog of kernels, loaded from YAML and imported lazily."""

from ._catalog import Catalog, KernelSpec, OpInfo
from ._load import check_catalog, load_catalog
from ._platform import Platform
from .errors import (
    CatalogError,
    Diagnostic,
    KernelImportError,
    Location,
    NoEligibleBackendError,
    Severity,
    UnknownBackendError,
    UnknownOpError,
)


def __getattr__(name: str) -> object:
    # Selection's types load with the first selection, not with the catalog: a warm load stays lean.
    if name in ("Rejected", "Selection"):
        from . import _select

        return getattr(_select, name)
    raise AttributeError(f"module 'kcatalog' has no attribute '{name}'")


__all__ = [
    "Catalog",
    "CatalogError",
    "Diagnostic",
    "KernelImportError",
    "KernelSpec",
    "Location",
    "NoEligibleBackendError",
    "OpInfo",
    "Platform",
    "Rejected",
    "Selection",
    "Severity",
    "UnknownBackendError",
    "UnknownOpError",
    "check_catalog",
    "load_catalog",
]
