"""Finding catalog files and reading their text: no YAML, no pydantic, so a cached load stays cheap."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import Location
from .permissions import exposure

SETTINGS_FILE = "kcatalog.yaml"
MAX_FILE_BYTES = 4 * 1024 * 1024
_SUFFIXES = (".yaml", ".yml")

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class CatalogFile:
    """A catalog file found: its resolved path, and whether it is the settings file (by the name it was
    found under, so that a `kcatalog.yaml` symlink to any file is the settings file)."""

    path: Path
    is_settings: bool
    layer: int = 0  # its layer's number in the catalog's list of layers (read/layer_sources.py)


@dataclass(frozen=True)
class SourceFile:
    """A catalog file's text, its resolved path, its role, its layer's number, and the path diagnostics show."""

    path: Path
    shown: str
    text: str
    is_settings: bool
    layer: int = 0


def shipped_catalog_dir() -> Path:
    """The catalog directory shipped inside the package (in the wheel, or the repo's catalog/)."""
    return Path(__file__).resolve().parent.parent / "catalog"


def display_path(path: Path) -> str:
    """A path relative to the working directory when below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def catalog_root(directory: Path) -> Path:
    """The catalog a file of `directory` belongs to: the nearest of `directory` and the directories above it, up
    to the working directory, that holds a settings file, else `directory`; never one above the working directory,
    whose files could be anyone's."""
    cwd = Path.cwd().resolve()
    if not directory.is_relative_to(cwd):
        return directory
    for candidate in (directory, *directory.parents):
        if (candidate / SETTINGS_FILE).is_file():
            return candidate
        if candidate == cwd:
            break
    return directory


def given_file_root(given: Path) -> Path:
    """The catalog directory of a file given by name: its catalog_root, from the directory the name is in (not
    where a symlink points), so that it is read as it would be in a load of that directory."""
    return catalog_root(given.absolute().parent.resolve())


def discover(paths: Iterable[PathLike], diagnostics: Diagnostics) -> list[CatalogFile]:
    """Catalog files under the given files and directories, in a stable order; problems go to `diagnostics`.

    A file given by name is read as in a load of its catalog directory (given_file_root): the same suffixes, the
    same refusal of symlinks that leave the directory, of files and directories every user may write, and the
    settings file beside it."""
    files: dict[Path, bool] = {}  # resolved path -> is the settings file
    check = _Checks(diagnostics)
    for raw in paths:
        given = Path(raw)
        if given.is_dir():
            root = given.resolve()
            mark = len(diagnostics)
            found = _walk(root, check)
            if not found and not diagnostics.errors_since(mark):  # not when the directory itself was refused
                diagnostics.error(codes.PATH_NOT_FOUND, f"no catalog files (*.yaml, *.yml) in directory '{given}'")
            for path in found:
                real = check.member(path, root)
                if real is not None:
                    files.setdefault(real, path.name == SETTINGS_FILE)
        elif given.is_file():
            if given.suffix not in _SUFFIXES:  # a load of its directory would not read it either
                diagnostics.error(codes.PATH_NOT_FOUND, f"path '{given}' is not a catalog file (*.yaml, *.yml)")
                continue
            root = given_file_root(given)
            directory = given.absolute().parent
            if not check.directories_open(directory.resolve(), root):
                continue
            # The file, and the settings beside it (a single manifest is checked against them), as the walk does.
            beside = directory / SETTINGS_FILE
            for path in (given, beside) if beside.is_file() or beside.is_symlink() else (given,):
                real = check.member(path, root)
                if real is not None:
                    files.setdefault(real, path.name == SETTINGS_FILE)
        else:
            diagnostics.error(codes.PATH_NOT_FOUND, f"path '{given}' does not exist")
    return [CatalogFile(path, is_settings) for path, is_settings in files.items()]


def _walk(root: Path, check: _Checks) -> list[Path]:
    """Every *.yaml and *.yml below `root`, sorted; iterative, so no depth of directories is too deep, and
    symlinked directories are not entered, nor directories every user may write (refused)."""
    found: list[Path] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        if not check.directory_open(directory):
            continue
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue  # unreadable directory: nothing in it can be read either
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                stack.append(path)
            elif path.suffix in _SUFFIXES and (entry.is_symlink() or entry.is_file()):  # a looping link: reported
                found.append(path)
    return sorted(found)


class _Checks:
    """What decides whether a catalog file found is read: where a symlink leads, and who may write the file and
    its directory (each directory stat'ed and reported once)."""

    def __init__(self, diagnostics: Diagnostics) -> None:
        self.diagnostics = diagnostics
        self._directories: dict[Path, bool] = {}

    def member(self, path: Path, root: Path) -> Path | None:
        """A catalog file found in (or given from) the catalog directory `root`, resolved; None where it is not
        read: a symlink that dangles, loops or leaves `root`, a file every user may write, or one in such a
        directory (refused, reported), or not a regular file (a link to a directory or a special file: left out)."""
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):  # dangling, or a loop (RuntimeError before Python 3.13)
            self.diagnostics.error(codes.FILE_UNREADABLE, "cannot read file: symlink is dangling or loops", _at(path))
            return None
        if not real.is_relative_to(root):
            self.diagnostics.error(
                codes.FILE_UNREADABLE, f"symlink leaves the catalog directory (points to '{real}'); refused", _at(path)
            )
            return None
        if not real.is_file() or not self.directory_open(real.parent) or self._refused(real, "file", path):
            return None
        return real

    def directories_open(self, directory: Path, root: Path) -> bool:
        """Whether `directory` and those above it up to its catalog's `root` are ones a load of `root` would enter."""
        for candidate in (directory, *directory.parents):
            if not self.directory_open(candidate):
                return False
            if candidate == root or not candidate.is_relative_to(root):
                break
        return True

    def directory_open(self, directory: Path) -> bool:
        """Whether a load reads the files of this directory: not when every user may write it."""
        known = self._directories.get(directory)
        if known is None:
            known = self._directories[directory] = not self._refused(directory, "directory", None)
        return known

    def _refused(self, path: Path, what: str, named: Path | None) -> bool:
        """Refuse (reported at `named`, the file as found; a directory by its path) a catalog file or directory that
        every user may write: anyone could make it name any code. The rule the load cache applies to its own files
        (read/permissions.py), drawn at every user."""
        try:
            found = exposure(path)
        except OSError:
            return False  # cannot be seen: reading it reports why
        if not found.everyone:
            return False
        where = "" if named is not None else f" '{display_path(path)}'"
        self.diagnostics.error(
            codes.FILE_REFUSED,
            f"{what}{where} is writable by every user (mode {found.mode:04o}); refused",
            _at(named) if named is not None else None,
        )
        return True


def _at(path: Path) -> Location:
    """A diagnostic's place for a whole file: its start, named as found."""
    return Location(display_path(path), 1, 1)


def read_sources(files: Iterable[CatalogFile], diagnostics: Diagnostics) -> list[SourceFile]:
    """Each file's text; a file that cannot be read is left out, and what stops it goes to `diagnostics`."""
    sources = []
    for file in files:
        shown = display_path(file.path)
        text = _read_text(file.path, shown, diagnostics)
        if text is not None:
            sources.append(SourceFile(file.path, shown, text, file.is_settings, file.layer))
    return sources


def _read_text(path: Path, shown: str, diagnostics: Diagnostics) -> str | None:
    start = Location(shown, 1, 1)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            diagnostics.error(codes.FILE_REFUSED, f"file is {size} bytes, over the {MAX_FILE_BYTES}-byte limit", start)
            return None
        raw = path.read_bytes()
    except OSError as exc:
        diagnostics.error(codes.FILE_UNREADABLE, f"cannot read file: {exc.strerror or exc}", start)
        return None
    try:
        return raw.decode("utf-8-sig")  # a UTF-8 byte-order mark is harmless; drop it
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        diagnostics.error(
            codes.FILE_UNREADABLE,
            f"file is not UTF-8: byte 0x{raw[exc.start]:02x} cannot be decoded",
            Location(shown, line, col),
        )
        return None
