"""The file system as the path finder sees it, read once per check: what each path is (matched in exact case),
the zip archives on the path and their members, and module files read up to a size limit."""

from __future__ import annotations

import os
import stat
import sys

from . import kinds
from .locations import ModuleLocation

MAX_SOURCE_BYTES = 16 * 1024 * 1024  # a module larger than this is not parsed (it would cost a lot of memory)

MISSING, FILE, DIR = 0, 1, 2


class FileSystem:
    """What one check saw of the file system: it stays as it was for the rest of that check."""

    def __init__(self) -> None:
        self._kinds: dict[str, int] = {}  # path -> MISSING, FILE or DIR
        self._archives: dict[str, str | None] = {}  # path entry -> the zip archive it is in, if any
        self._zips: dict[str, frozenset[str] | None] = {}  # archive -> its members (None: not a zip)

    def kind(self, path: str, archive: str | None) -> int:
        """FILE, DIR or MISSING: on disk, or inside the zip archive the path lies in."""
        kind = self._kinds.get(path)
        if kind is None:
            kind = self._kinds[path] = self._stat(path) if archive is None else self._member(path, archive)
        return kind

    def _stat(self, path: str) -> int:
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            return MISSING
        if stat.S_ISDIR(mode):
            return DIR if _exact_case(path) else MISSING
        if stat.S_ISREG(mode):
            return FILE if _exact_case(path) else MISSING
        return MISSING

    def archive(self, entry: str) -> str | None:
        """The zip archive a path entry is (or lies in), as zipimport reads 'archive.zip/sub/dir'; else None."""
        if entry in self._archives:
            return self._archives[entry]
        found = None
        if self._stat(entry) != DIR:  # on disk (the cache of kinds also holds paths inside archives)
            head = entry
            while True:
                kind = self._stat(head)
                if kind == FILE:
                    if head not in self._zips:
                        self._zips[head] = _zip_members(head)
                    found = head if self._zips[head] is not None else None
                    break
                parent = os.path.dirname(head)
                if kind == DIR or parent == head:
                    break
                head = parent
        self._archives[entry] = found
        return found

    def members(self, archive: str) -> frozenset[str]:
        """The members of a zip archive `archive()` found (with every directory they imply)."""
        return self._zips.get(archive) or frozenset()

    def _member(self, path: str, archive: str) -> int:
        if path == archive:
            return DIR
        inner = os.path.relpath(path, archive).replace(os.sep, "/")
        members = self._zips.get(archive) or frozenset()
        if inner in members:
            return FILE
        return DIR if inner + "/" in members else MISSING


def read_source(location: ModuleLocation) -> bytes | OSError | None:
    """The module's Python source (None when it has none to read), or why it cannot be read."""
    if location.kind not in (kinds.SOURCE, kinds.FROZEN) or location.origin is None:
        return None
    try:
        if location.archive is not None:
            import zipfile

            inner = os.path.relpath(location.origin, location.archive).replace(os.sep, "/")
            with zipfile.ZipFile(location.archive) as archive:
                if archive.getinfo(inner).file_size > MAX_SOURCE_BYTES:
                    return OSError(f"larger than {MAX_SOURCE_BYTES} bytes")
                return archive.read(inner)
        return read_file(location.origin, MAX_SOURCE_BYTES)
    except (OSError, KeyError, ValueError) as exc:
        return exc if isinstance(exc, OSError) else OSError(str(exc))


def read_file(path: str, limit: int) -> bytes | OSError:
    """A file's bytes, or an OSError saying it holds more than `limit` (sized first: no large buffer)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            return OSError(f"larger than {limit} bytes")
        chunks = []
        while True:
            chunk = os.read(fd, max(size + 1, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            if sum(map(len, chunks)) > limit:
                return OSError(f"larger than {limit} bytes")
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def _exact_case(path: str) -> bool:
    """On case-insensitive file systems the finder matches names exactly, as here; elsewhere stat already did."""
    if sys.platform not in ("win32", "cygwin", "darwin") or "PYTHONCASEOK" in os.environ:
        return True
    try:
        return os.path.basename(path) in os.listdir(os.path.dirname(path) or ".")
    except OSError:
        return False


def _zip_members(path: str) -> frozenset[str] | None:
    """The members of a zip archive (with every directory they imply), or None if it is not one."""
    import zipfile

    try:
        if not zipfile.is_zipfile(path):
            return None
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, ValueError):
        return None
    members = set(names)
    for name in names:
        parts = name.split("/")
        members.update("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
    return frozenset(members)
