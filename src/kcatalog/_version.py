"""kcatalog's own version, read from the installed distribution's metadata."""

from __future__ import annotations

import functools

#: What a source tree that was never installed reports (PEP 440: a local version of 0).
UNKNOWN = "0+unknown"


@functools.cache
def version() -> str:
    """The installed kcatalog's version, or `UNKNOWN` where no distribution is installed (a bare source tree)."""
    import importlib.metadata  # costs tens of ms: read on first use, never by `import kcatalog`

    try:
        return importlib.metadata.version("kcatalog")
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN
