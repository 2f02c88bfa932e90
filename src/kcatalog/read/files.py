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


def _walk(root: Path) -> list[Path]:
    """Every *.yaml and *.yml below `root`, sorted; iterative, so no depth of directories is too deep, and
    symlinked directories are not entered."""
    found: list[Path] = []
    stack = [root]
    while stack:
        directory = stack.pop()
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


def discover(paths: Iterable[PathLike], diagnostics: Diagnostics) -> list[CatalogFile]:
    """Catalog files under the given files and directories, in a stable order; problems go to `diagnostics`."""
    files: dict[Path, bool] = {}  # resolved path -> is the settings file
    for raw in paths:
        given = Path(raw)
        if given.is_dir():
            root = given.resolve()
            found = _walk(root)
            if not found:
                diagnostics.error(codes.PATH_NOT_FOUND, f"no catalog files (*.yaml, *.yml) in directory '{given}'")
            for path in found:
                try:
                    real = path.resolve(strict=True)
                except (OSError, RuntimeError):  # dangling, or a loop (RuntimeError before Python 3.13)
                    diagnostics.error(
                        codes.FILE_UNREADABLE,
                        "cannot read file: symlink is dangling or loops",
                        Location(display_path(path), 1, 1),
                    )
                    continue
                if not real.is_relative_to(root):
                    diagnostics.error(
                        codes.FILE_UNREADABLE,
                        f"symlink leaves the catalog directory (points to '{real}'); refused",
                        Location(display_path(path), 1, 1),
                    )
                    continue
                if real.is_file():  # not a link to a directory or a special file
                    files.setdefault(real, path.name == SETTINGS_FILE)
        elif given.is_file():
            real = given.resolve()
            files.setdefault(real, given.name == SETTINGS_FILE)
            # A single manifest is checked against the settings beside it.
            beside = real.parent / SETTINGS_FILE
            if beside.is_file():
                files.setdefault(beside, True)
        else:
            diagnostics.error(codes.PATH_NOT_FOUND, f"path '{given}' does not exist")
    return [CatalogFile(path, is_settings) for path, is_settings in files.items()]


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
