"""Finding a module's file through the import system's finders, without importing it or its parents,
and fingerprinting what was found, so that cached results are reused only while it is unchanged."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from typing import Any

try:  # a builtin module: hashlib's OpenSSL import would cost more than a warm load's hashing
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - every CPython has it, other interpreters may not
    from hashlib import blake2b

Fingerprint = tuple[Any, ...]


def digest(data: bytes) -> str:
    """A hex digest of `data`, for cache keys and source fingerprints."""
    return blake2b(data).hexdigest()


@dataclass(frozen=True)
class Located:
    """Where the finders put a module: its spec, or where the search stopped and what it searched last."""

    spec: ModuleSpec | None
    failed_at: int | None = None  # index of the first dotted part not found, or that is a module, not a package
    search: Any = None  # the search locations of the last package found


def locate(name: str) -> Located:
    """The module's spec, found parent by parent, or where the search stopped."""
    parts = name.split(".")
    spec: ModuleSpec | None = None
    search: Any = None
    for index in range(len(parts)):
        if index > 0 and search is None:
            return Located(None, index)
        spec = find_spec(".".join(parts[: index + 1]), search)
        if spec is None:
            return Located(None, index, search)
        search = spec.submodule_search_locations
    return Located(spec, None, search)


def find_spec(fullname: str, search: Any) -> ModuleSpec | None:
    """Ask the import system's finders directly: they locate files without running parent __init__s."""
    loaded = sys.modules.get(fullname)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None:
        return loaded.__spec__
    for finder in sys.meta_path:
        finder_find_spec = getattr(finder, "find_spec", None)
        if finder_find_spec is None:
            continue
        try:
            spec: ModuleSpec | None = finder_find_spec(fullname, search)
        except (ImportError, ValueError, AttributeError):
            continue
        if spec is not None:
            return spec
    return None


def fingerprint(spec: ModuleSpec | None, failed_at: int | None, source: bytes | None) -> Fingerprint:
    """What a check of the module depends on: where it was found (or where the search stopped) and, for
    source, its exact bytes; for a compiled module, its file's size and time."""
    if spec is None:
        return ("not found", failed_at)
    search = tuple(spec.submodule_search_locations or ()) if spec.submodule_search_locations is not None else None
    if source is not None:
        return (spec.origin, search, digest(source))
    try:
        info = os.stat(spec.origin) if spec.origin and spec.has_location else None
    except OSError:
        info = None
    return (spec.origin, search, info and (info.st_size, info.st_mtime_ns))


def read_source(spec: ModuleSpec) -> bytes | OSError | None:
    """The module's Python source (None when it has none: compiled, built-in, namespace), or why it cannot
    be read."""
    origin = spec.origin
    if origin is None or not origin.endswith(".py"):
        return None
    try:
        with open(origin, "rb") as handle:
            return handle.read()
    except OSError as exc:
        return exc


def current_fingerprint(name: str) -> Fingerprint:
    """The module's fingerprint now."""
    located = locate(name)
    source = read_source(located.spec) if located.spec is not None else None
    return fingerprint(located.spec, located.failed_at, source if isinstance(source, bytes) else None)
