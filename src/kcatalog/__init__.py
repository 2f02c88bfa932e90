"""kcatalog: a declarative, validated catalog of kernels, loaded from YAML and imported lazily.

The public API is what this module exports (and `__version__`, from the installed distribution's metadata), plus
`kcatalog.codes` (the diagnostic codes), `kcatalog.errors`, `kcatalog.model` (the typed model),
`kcatalog.validate.schema` (the file format's models), `kcatalog.compat` (SGLang-style registry names) and
`kcatalog.testing`. The stage packages (read, validate, link, check, cache,
select, runtime, registry, tools) and the static resolver they share (pyresolve) are internal.
"""

from .errors import (
    CatalogError,
    Diagnostic,
    InconsistentSelectionError,
    KernelImportError,
    Location,
    NoEligibleBackendError,
    Rejected,
    RejectKind,
    Severity,
    UnknownBackendError,
    UnknownOpError,
)
from .load import CheckResult, LoadOptions, check_catalog, load_catalog
from .model import (
    CacheOutcome,
    CacheStatus,
    Capability,
    CatalogSettings,
    KernelSpec,
    OpInfo,
    Parameters,
    Promise,
    Target,
)
from .platform import Platform
from .registry.catalog import Catalog

#: The installed distribution's version ("0+unknown" in a source tree never installed); module `__getattr__` reads
#: it on first use. An annotation alone binds no attribute, so the lookup still reaches `__getattr__`.
__version__: str

_KERNELIZE = ("KernelizeReport", "kernelize", "unkernelize")
_TRACE = ("Trace", "TraceEntry", "TraceRecord")


def __getattr__(name: str) -> object:
    if name == "__version__":  # from the distribution's metadata, read when asked: importing it costs tens of ms
        from ._version import version

        return version()
    # Selection's module loads with the first selection, not with the catalog: a warm load stays lean.
    if name in ("Selection", "SelectRequest"):
        from .select import selection

        return getattr(selection, name)
    if name in _TRACE:  # what a trace records: loaded by the first trace, never by `import kcatalog`
        from .runtime import trace, trace_file

        return getattr(trace if name == "Trace" else trace_file, name)
    if name in _KERNELIZE:  # model integration: loaded by its first use, never by `import kcatalog`
        from .integrations import kernelize

        return getattr(kernelize, name)
    raise AttributeError(f"module 'kcatalog' has no attribute '{name}'")


__all__ = [
    "CacheOutcome",
    "CacheStatus",
    "Capability",
    "Catalog",
    "CatalogError",
    "CatalogSettings",
    "CheckResult",
    "Diagnostic",
    "InconsistentSelectionError",
    "KernelImportError",
    "KernelSpec",
    "KernelizeReport",
    "Location",
    "LoadOptions",
    "NoEligibleBackendError",
    "OpInfo",
    "Parameters",
    "Platform",
    "Promise",
    "RejectKind",
    "Rejected",
    "SelectRequest",
    "Selection",
    "Severity",
    "Target",
    "Trace",
    "TraceEntry",
    "TraceRecord",
    "UnknownBackendError",
    "UnknownOpError",
    "check_catalog",
    "kernelize",
    "load_catalog",
    "unkernelize",
]
