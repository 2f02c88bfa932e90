"""Files replaced whole or not at all: the one way kcatalog writes a file (plans, tuned tables, reports, imported
catalogs, cache entries, schemas).

Each file is first written to a temporary in its target directory, created with O_EXCL under a random name: a
link planted at any name there is never followed, and no name is predictable. Only when every file of a change is
written are they renamed over their names, so a reader sees each file old or new, never half of one; when a
change of several files fails part way, the files already renamed are put back as they were and every temporary
is removed, so a catalog directory never holds half of an import.

`write_new` is the one exception, for files that check themselves (a checksum the reader verifies, such as the
module indexes): written straight under their name, never replacing one, so that a run writing hundreds of them
pays for no temporary and no rename.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

# Temporaries start with a dot (no catalog file, no glob of *.yaml matches them) and are named by random bytes,
# not after the file they become: a name near the file system's limit still leaves room for it.
_PREFIX = ".kcatalog-"
_SUFFIX = ".tmp"
# A hard link to a link, not to what it points at, where the system can tell them apart (not on Windows).
_KEEP_LINKS: dict[str, bool] = {"follow_symlinks": False} if os.link in os.supports_follow_symlinks else {}
TEMPORARY = re.compile(rf"{re.escape(_PREFIX)}[0-9a-f]{{16}}{re.escape(_SUFFIX)}")  # what a killed writer leaves


def write_file(path: Path, data: str | bytes, *, mode: int = 0o666, sync: bool = True) -> None:
    """Replace `path` with `data` (text as UTF-8), whole or not at all; the OSError that stops it is raised."""
    replace_files(path.parent, {path.name: data}, mode=mode, sync=sync)


def write_new(path: Path, data: bytes, *, mode: int = 0o600) -> bool:
    """Create `path` holding `data`, unless a file (or a link) is there already: False then, nothing written.
    Not atomic: a reader may see it half written, or a crash may leave it so; only for data whose reader checks it
    whole (and removes what fails the check, so that a later write can put it back)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(path, flags, mode)
    except FileExistsError:
        return False
    try:
        with open(descriptor, "wb") as handle:
            handle.write(data)
    except BaseException:  # a full disk: no half file left behind where it can be helped
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return True


def replace_files(
    directory: Path,
    files: Mapping[str, str | bytes],
    *,
    remove: Iterable[str] = (),
    mode: int = 0o666,
    sync: bool = True,
) -> None:
    """Write each of `files` (name -> content) into `directory` and remove each name of `remove`, all or none.

    `mode` is that of new files (less the umask); `sync` flushes them to disk before renaming (off for what can
    be rebuilt, such as cache entries). Raises the OSError that stopped it, with the directory as it was."""
    removed = [name for name in remove if name not in files]
    for name in [*files, *removed]:
        if name in ("", ".", "..") or os.path.basename(name) != name:
            raise ValueError(f"{name!r} is not a file name")
    temporaries: dict[str, Path] = {}
    backups: dict[str, Path | None] = {}  # name -> its previous content, None where there was no file
    done: list[str] = []
    try:
        for name, data in files.items():
            temporaries[name] = _temporary(directory, data.encode() if isinstance(data, str) else data, mode, sync)
        if len(files) + len(removed) > 1:  # one rename is atomic on its own; several need a way back
            for name in [*files, *removed]:
                backups[name] = _backup(directory / name)
        for name, temporary in temporaries.items():
            os.replace(temporary, directory / name)
            done.append(name)
        for name in removed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)
            done.append(name)
        if sync:
            _sync_directory(directory)
    except BaseException:  # KeyboardInterrupt too: the directory as it was
        for name in reversed(done):
            with contextlib.suppress(OSError):
                backup = backups.get(name)
                if backup is None:
                    os.unlink(directory / name)
                else:
                    os.replace(backup, directory / name)
        raise
    finally:
        for path in [*temporaries.values(), *(b for b in backups.values() if b is not None)]:
            with contextlib.suppress(OSError):
                os.unlink(path)  # gone already where it was renamed


def _temporary(directory: Path, data: bytes, mode: int, sync: bool) -> Path:
    """A new file in `directory` holding `data`, under a random name no one else created."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    while True:
        path = _random_name(directory)
        try:
            descriptor = os.open(path, flags, mode)
            break
        except FileExistsError:  # someone's file, or a link planted there: never opened, another name drawn
            continue
    try:
        with open(descriptor, "wb") as handle:
            handle.write(data)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return path


def _backup(path: Path) -> Path | None:
    """A second name for what is at `path` (a hard link, else a copy of a regular file), to put back if the change
    fails; None where there is nothing. A link at `path` is linked as the link, never followed."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    while True:
        backup = _random_name(path.parent)
        try:
            os.link(path, backup, **_KEEP_LINKS)
            return backup
        except FileExistsError:
            continue
        except OSError:  # a file system without hard links
            if not stat.S_ISREG(status.st_mode):
                raise
            break
    copy = _temporary(path.parent, path.read_bytes(), 0o600, sync=False)
    os.chmod(copy, stat.S_IMODE(status.st_mode))
    return copy


def _random_name(directory: Path) -> Path:
    return directory / f"{_PREFIX}{secrets.token_hex(8)}{_SUFFIX}"


def _sync_directory(directory: Path) -> None:
    """Flush the directory's entries (the renames) to disk, where the system allows opening a directory."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
