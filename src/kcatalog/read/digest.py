"""A catalog's content digest: what its files say, whatever their paths and order (plans record it)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from .files import SourceFile


def content_digest(sources: Iterable[SourceFile]) -> str:
    """16 hex digits of the files' texts, independent of where they lie and of their order."""
    texts = sorted(hashlib.sha256(source.text.encode("utf-8")).hexdigest() for source in sources)
    return hashlib.sha256("\n".join(texts).encode("ascii")).hexdigest()[:16]
