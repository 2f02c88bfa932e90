"""Where the cache directory is (the load cache's entries and the target checks' module indexes): a module of its
own, so that finding it imports neither of them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CacheDir:
    """The cache directory, or None and why there is none."""

    path: Path | None
    why_off: str = ""


def default_dir() -> CacheDir:
    """The cache directory: none with KCATALOG_NO_CACHE, else KCATALOG_CACHE_DIR, else the XDG one."""
    if os.environ.get("KCATALOG_NO_CACHE", "") not in ("", "0"):
        return CacheDir(None, "KCATALOG_NO_CACHE is set")
    chosen = os.environ.get("KCATALOG_CACHE_DIR")
    if chosen:
        return CacheDir(Path(chosen))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):  # no home directory: a relative path would scatter caches over working dirs
        return CacheDir(None, "no home directory (set KCATALOG_CACHE_DIR)")
    return CacheDir(Path(base) / "kcatalog")
