"""The module indexes the static target checks keep between runs, in the cache directory's `indexes/`: so that
validating against a tree again, with or without bytecode, neither parses its modules again nor checks their
syntax whole again (pyresolve/index_record.py says what a key stands for: content-addressed, never stale).

One file per index, named by its key. Trusted and written as the load cache's entries are (store.py): only in a
directory private to this user (read/permissions.py), each file starting with a header and a checksum of the rest
(a file that does not match is a miss, and is removed), `marshal` data (reading it runs no code). Each is created
under its name, never renamed into place (write/atomic.py's write_new): a fresh check writes one per module it
reads, hundreds, and the temporary and rename of an atomic write cost it a quarter of a second on SGLang's tree
(benchmarks/sglang_tree.py); the checksum makes a half-written one a miss. `kcatalog cache --clear` removes them
with the entries. (Not through store.py, whose import a validate would otherwise pay for.)
"""

from __future__ import annotations

import os
from pathlib import Path

from ..pyresolve import digest
from ..read.permissions import exposure

SUBDIRECTORY = "indexes"
SUFFIX = ".kidx"
MAGIC = b"kcatalog module index\n"  # what every index file starts with: `clear` removes nothing else
MAX_INDEXES = 16384  # beyond this, the oldest are removed after a run that wrote some (about 1 KiB each)
_CHECKSUM_BYTES = len(digest(b""))


class ModuleIndexes:
    """Indexes by key (pyresolve's IndexStore), as files under `cache_dir/indexes/`; `close` prunes the oldest
    beyond MAX_INDEXES after a run that wrote some."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.directory = cache_dir / SUBDIRECTORY
        self._readable: bool | None = None  # decided on first use: a load whose cached checks hold reads none
        self._writable: bool | None = None
        self.written = 0

    def get(self, key: str) -> bytes | None:
        if self._readable is None:
            self._readable = self._trusted()
        if not self._readable:
            return None
        try:
            with open(self.directory / f"{key}{SUFFIX}", "rb") as handle:
                raw = handle.read()
        except OSError:  # none yet
            return None
        body = raw[len(MAGIC) + _CHECKSUM_BYTES :]
        if not raw.startswith(MAGIC) or raw[len(MAGIC) : len(MAGIC) + _CHECKSUM_BYTES] != digest(body).encode():
            try:  # damaged, or half written (by a run that crashed, or one writing it now): `put` writes it again
                os.unlink(self.directory / f"{key}{SUFFIX}")
            except OSError:
                pass
            return None
        return body

    def put(self, key: str, data: bytes) -> None:
        """Keep an index; one that cannot be written only costs the next run its time."""
        if self._writable is None:
            try:
                self.cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                self.directory.mkdir(mode=0o700, exist_ok=True)
            except OSError:
                pass
            self._writable = self._trusted()
        if not self._writable:
            return
        from ..write.atomic import write_new  # only a run that indexes afresh writes

        try:  # not synced: one lost is a miss; one there already (written by a run beside this one) is the same
            if write_new(self.directory / f"{key}{SUFFIX}", MAGIC + digest(data).encode() + data, mode=0o600):
                self.written += 1
        except OSError:
            return

    def close(self) -> None:
        """Remove the oldest indexes beyond MAX_INDEXES, after a run that wrote some; races are harmless."""
        if not self.written:
            return
        try:
            found = [entry for entry in os.scandir(self.directory) if entry.name.endswith(SUFFIX)]
            if len(found) <= MAX_INDEXES:
                return
            by_age = sorted((entry.stat().st_mtime_ns, entry.path) for entry in found)
            for _, path in by_age[: len(found) - MAX_INDEXES]:
                os.unlink(path)
        except OSError:
            pass

    def _trusted(self) -> bool:
        """Whether only this user may change the cache directory and the indexes' (False where they are missing)."""
        try:
            return exposure(self.cache_dir).private and exposure(self.directory).private
        except OSError:
            return False


def clear(cache_dir: Path) -> int:
    """Remove the indexes kcatalog wrote (and its temporary files) from a cache directory it trusts: how many.
    Files of other names or contents are left alone."""
    from ..write.atomic import TEMPORARY

    indexes = ModuleIndexes(cache_dir)
    if not indexes._trusted():
        return 0
    removed = 0
    for entry in os.scandir(indexes.directory):
        if entry.name.endswith(SUFFIX) and _starts_with_magic(entry.path):
            os.unlink(entry.path)
            removed += 1
        elif TEMPORARY.fullmatch(entry.name):
            os.unlink(entry.path)
    return removed


def _starts_with_magic(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC
    except OSError:
        return False
