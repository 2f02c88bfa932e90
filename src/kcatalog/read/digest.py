"""A catalog's content digest: what its files say, whatever their paths and order (plans record it)."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable

from .files import SourceFile


def text_digest(text: str) -> str:
    """One file's text, hashed (sha256, hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_digest(sources: Iterable[SourceFile], leave_out: Collection[str] = ()) -> str:
    """16 hex digits of the files' texts, independent of where they lie and of their order; files whose
    text_digest is in `leave_out` do not count."""
    texts = sorted(d for d in (text_digest(source.text) for source in sources) if d not in leave_out)
    return hashlib.sha256("\n".join(texts).encode("ascii")).hexdigest()[:16]
