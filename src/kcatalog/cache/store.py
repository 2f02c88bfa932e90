"""A cache of linked catalogs, so that a warm start reads one file instead of importing PyYAML and pydantic.

An entry holds what linking yields, which depends on nothing but the files' contents; it is used only
when its key still matches: the files (paths and exact text), kcatalog's own code, and the installed
PyYAML and pydantic. It also holds the static target checks, reused only while every module they read
is found at the same place with the same source (see pyresolve/fingerprints.py). The other checks that depend on this
machine or the caller run on every load. Only catalogs that link without errors are stored, and only
target checks without errors. One entry per set of catalog paths and Python environment: an edit
replaces it.

Entries are written with `marshal`, as Python writes the .pyc files it caches its own modules in: reading
one runs no code. Like those, they are trusted only where no other user could have written them.
"""

from __future__ import annotations

import marshal
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model import CacheOutcome, CacheStatus, CatalogLayer, LinkedCatalog, SourceDigests, TargetChecks
from ..pyresolve import digest, find_spec
from ..read.files import SourceFile
from ..read.permissions import exposure
from ..write.atomic import TEMPORARY, write_file
from .codec import Codec
from .directory import CacheDir, default_dir

__all__ = ["Cache", "CacheDir", "CacheEntry", "CacheRead", "Cleared", "clear", "default_dir", "entries"]

ENTRY_FORMAT = 4
SUFFIX = ".kcache"
MAGIC = b"kcatalog cache entry\n"  # what every entry starts with: `clear` removes nothing else
_CHECKSUM_BYTES = len(digest(b""))  # the hex blake2b of the rest of the entry: a flipped byte is a miss
MAX_ENTRIES = 64  # entries beyond this, oldest first, are removed when one is written
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_DEPENDENCIES = ("yaml", "pydantic", "pydantic_core")  # what parsing and validation results depend on


@dataclass(frozen=True)
class CacheEntry:
    """What an entry holds: the linked catalog and, when they found no error, its static target checks; and the
    kernel source digests its tuned entries were compared with (None: no entry records any)."""

    linked: LinkedCatalog
    targets: TargetChecks | None
    sources: SourceDigests | None = None


@dataclass(frozen=True)
class CacheRead:
    """The entry read, or None and why not (no entry yet, files changed, unreadable, not trusted)."""

    entry: CacheEntry | None
    reason: str = ""
    path: Path | None = None  # the entry's file, when one was used


class Cache:
    """The entry for one list of catalog files: looked up by their texts, written after a clean link."""

    def __init__(self, directory: Path, sources: Sequence[SourceFile], layers: Sequence[CatalogLayer] = ()) -> None:
        self.directory = directory
        self.files = [str(source.path) for source in sources]
        roles = [source.is_settings for source in sources]  # a renamed link can change a file's role
        # Each file's layer, and the layers' names: they decide allow-lists, merges and what diagnostics say.
        layering = [[source.layer for source in sources], [(layer.name, layer.origin) for layer in layers]]
        self.shown = [source.shown for source in sources]
        # Named by the files and the Python environment: an edit or an upgrade replaces the entry, and two
        # virtual environments loading one catalog keep one entry each instead of overwriting each other's.
        self.path = directory / f"{digest(repr([self.files, sys.prefix, sys.version]).encode())[:32]}{SUFFIX}"
        texts = [source.text.encode() for source in sources]
        self.key = digest(
            b"\0".join(
                [
                    repr(
                        [
                            ENTRY_FORMAT,
                            sys.version,
                            _code_fingerprint(),
                            self.files,
                            roles,
                            layering,
                            [len(t) for t in texts],
                        ]
                    ).encode(),
                    *texts,
                ]
            )
        )

    def read(self) -> CacheRead:
        """The entry for these files, or why there is none to use."""
        try:
            problem = _unsafe(self.directory) or _unsafe(self.path)
            if problem:
                return CacheRead(None, f"entry not trusted: {problem}")
            with open(self.path, "rb") as handle:
                raw = handle.read()
            body = raw[len(MAGIC) + _CHECKSUM_BYTES :]
            if not raw.startswith(MAGIC) or raw[len(MAGIC) : len(MAGIC) + _CHECKSUM_BYTES] != digest(body).encode():
                return CacheRead(None, "entry damaged (checksum mismatch)")
            entry = marshal.loads(body)
        except FileNotFoundError:
            return CacheRead(None, "no entry yet")
        except (OSError, EOFError, ValueError, TypeError) as exc:
            return CacheRead(None, f"entry unreadable ({type(exc).__name__}: {exc})")
        if not (isinstance(entry, tuple) and len(entry) == 3 and entry[0] == self.key):
            return CacheRead(None, "files or versions changed")
        try:
            linked, targets, sources = Codec(self.shown).decode(entry[2])
            return CacheRead(CacheEntry(linked, targets, sources), "", self.path)
        except Exception as exc:  # damaged in a way marshal cannot see: whatever it is, load from the files
            return CacheRead(None, f"entry malformed ({type(exc).__name__}: {exc})")

    def write(self, entry: CacheEntry, read: CacheRead) -> CacheStatus:
        """Store the entry (its catalog free of errors) atomically; `read` is what reading found before."""
        refreshed = read.entry is not None
        outcome = CacheOutcome.REFRESHED if refreshed else CacheOutcome.WRITTEN
        reason = "target modules changed" if refreshed else read.reason
        try:
            body = marshal.dumps(
                (self.key, tuple(self.files), Codec(self.shown).encode((entry.linked, entry.targets, entry.sources)))
            )
            data = MAGIC + digest(body).encode() + body
        except (ValueError, TypeError) as exc:  # a value marshal cannot write; none is expected from validated data
            return CacheStatus(CacheOutcome.NOT_WRITTEN, reason, None, str(exc))
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            problem = _unsafe(self.directory)
            if problem:
                return CacheStatus(CacheOutcome.NOT_WRITTEN, reason, None, problem)
            # Readers see the old entry or the new one, never half of one; not synced: an entry lost is a miss.
            write_file(self.path, data, mode=0o600, sync=False)
        except OSError as exc:
            return CacheStatus(CacheOutcome.NOT_WRITTEN, reason, None, f"{type(exc).__name__}: {exc}")
        _prune(self.directory)
        return CacheStatus(outcome, reason, self.path)


def entries(directory: Path) -> list[Path]:
    """The entries kcatalog wrote in a cache directory (none when it does not exist)."""
    try:
        named = sorted(Path(entry.path) for entry in os.scandir(directory) if entry.name.endswith(SUFFIX))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [path for path in named if _starts_with_magic(path)]


@dataclass(frozen=True)
class Cleared:
    """What `clear` removed, or why it removed nothing."""

    removed: int
    refused: str = ""


def clear(directory: Path) -> Cleared:
    """Remove every entry kcatalog wrote (and temporary files its killed writers left), in a directory it
    trusts; files of other names or contents are left alone."""
    if not directory.is_dir():
        return Cleared(0)
    problem = _unsafe(directory)
    if problem:
        return Cleared(0, f"{problem}; kcatalog neither uses nor clears it")
    removed = 0
    for path in entries(directory):
        path.unlink(missing_ok=True)
        removed += 1
    for leftover in directory.glob(".*.tmp"):
        if TEMPORARY.fullmatch(leftover.name):
            leftover.unlink(missing_ok=True)
    return Cleared(removed)


def _starts_with_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _unsafe(path: Path) -> str:
    """Why an entry or the directory must not be trusted: anyone but this user may change it (read/permissions.py)."""
    found = exposure(path)
    if found.other_owner:
        return f"{path} belongs to another user"
    if not found.private:
        return f"{path} is writable by group or others"
    return ""


def _prune(directory: Path) -> None:
    """Remove the oldest entries beyond MAX_ENTRIES; races with other writers are harmless."""
    try:
        by_age = sorted((path.stat().st_mtime_ns, path) for path in entries(directory))
        for _, path in by_age[:-MAX_ENTRIES]:
            path.unlink()
    except OSError:
        pass


def _code_fingerprint() -> list[Any]:
    """What the linked result depends on besides the files: kcatalog's modules and the parsers' installs."""
    parts: list[Any] = []
    for directory, subdirectories, names in os.walk(_PACKAGE_DIR):
        subdirectories[:] = sorted(set(subdirectories) - {"kernels", "__pycache__"})  # kernels: checked per target
        for name in sorted(names):
            if name.endswith(".py"):  # by content: a same-size edit within the clock's resolution still counts
                path = os.path.join(directory, name)
                with open(path, "rb") as handle:
                    parts.append([os.path.relpath(path, _PACKAGE_DIR), digest(handle.read())])
    for name in _DEPENDENCIES:
        spec = find_spec(name, None)
        origin = spec.origin if spec is not None else None
        found = os.stat(origin) if origin else None
        parts.append([name, origin, found and found.st_mtime_ns, found and found.st_size])
    return parts
