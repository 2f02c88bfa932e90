"""kcatalog: a declarative, validated catalog of kernels, loaded from YAML and imported lazily."""

from ._catalog import Catalog, KernelSpec, OpInfo
from ._load import check_catalog, load_catalog
from ._platform import Platform
from ._select import Rejected, Selection
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
