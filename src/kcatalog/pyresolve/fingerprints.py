"""What a check of a module depends on, as a value a later load compares: fingerprints, and their digest."""

from __future__ import annotations

import os
from typing import Any

try:  # a builtin module: hashlib's OpenSSL import would cost more than a warm load's hashing
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - every CPython has it, other interpreters may not
    from hashlib import blake2b

from .locations import Located

Fingerprint = tuple[Any, ...]


def digest(data: bytes) -> str:
    """A hex digest of `data`, for cache keys and source fingerprints."""
    return blake2b(data).hexdigest()


def fingerprint(located: Located, source: bytes | OSError | None, source_digest: str = "") -> Fingerprint:
    """What a check of the module depends on: where it was found (or where the search stopped and which
    hooks might have provided it) and, for source, its exact bytes (`source_digest`: their digest, where the
    caller has it already); for other files, their size and time."""
    location = located.location
    if location is None:
        return ("not found", located.failed_at, located.hooks)
    where = (location.kind, location.origin, location.search, location.via)
    if isinstance(source, bytes):
        return (*where, source_digest or digest(source))
    if isinstance(source, OSError):
        return (*where, f"unreadable: {source}")
    try:
        stamp = os.stat(location.archive or location.origin) if location.origin else None
    except OSError:
        stamp = None
    return (*where, stamp and (stamp.st_size, stamp.st_mtime_ns))
