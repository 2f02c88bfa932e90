"""Finding a module's file without running any code.

Only the parts of the import system that cannot run foreign code are used: `_imp`'s built-in and frozen
tables, and a walk of sys.path and of package search locations done here, the way the standard path
finder does it (regular packages, PEP 420 namespace portions gathered over every path entry, extension
suffixes first, then `.py` source, then sourceless `.pyc`; zip archives on sys.path read with zipfile).
No finder on sys.meta_path or hook on sys.path_hooks is ever called, no package `__init__` runs, and of
sys.modules only plain module objects are looked at, through their `__dict__`.

Third-party import hooks are honoured only where what they do is known without calling them (import_hooks.py
says which); what the walk finds is fingerprinted in fingerprints.py.
"""

from __future__ import annotations

import _imp
import os
import sys
from collections.abc import Callable, Iterable
from importlib.machinery import BYTECODE_SUFFIXES, EXTENSION_SUFFIXES, SOURCE_SUFFIXES, FrozenImporter, ModuleSpec
from typing import Any, TypeVar

from . import kinds
from .filesystem import DIR, FILE, MAX_SOURCE_BYTES, FileSystem, read_file, read_source
from .fingerprints import Fingerprint, fingerprint
from .import_hooks import ImportHooks, from_sys_modules
from .locations import Located, ModuleLocation

_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


def memo(table: dict[_Key, _Value], key: _Key, compute: Callable[[_Key], _Value]) -> _Value:
    """`table[key]`, computed by `compute(key)` the first time it is asked for."""
    found = table.get(key)
    if found is None:
        found = table[key] = compute(key)
    return found


class Finder:
    """Locates modules the way the standard path finder would, remembering what it saw of the file system.

    One Finder serves one check of a catalog: what it saw stays as it was for the rest of that check."""

    def __init__(self) -> None:
        self._files = FileSystem()
        self._hooks = ImportHooks()
        self._located: dict[str, Located] = {}

    # -- modules ----------------------------------------------------------------------------------------

    def locate(self, name: str) -> Located:
        """The module `name`, found parent by parent (once per finder)."""
        found = self._located.get(name)
        if found is not None:
            return found
        # Parents first, so that `_locate` finds its parent remembered: a name of any number of dotted parts never
        # nests calls deeper than one level (walking up recursively hit the recursion limit at ~330 parts).
        parts = name.split(".")
        for end in range(1, len(parts)):
            memo(self._located, ".".join(parts[:end]), self._locate)
        return memo(self._located, name, self._locate)

    def _locate(self, name: str) -> Located:
        parts = name.split(".")
        if not parts[-1].isidentifier():  # never a path: '..', '/', NUL
            parent = self.locate(".".join(parts[:-1])) if len(parts) > 1 else None
            if parent is not None and parent.location is None:
                return parent
            return Located(None, len(parts) - 1, parent.location.search if parent and parent.location else None)
        if len(parts) == 1:
            location = self.find(name, None)
            if location is None:
                return self._missing(name, 0, None)
            return Located(location)
        parent = self.locate(".".join(parts[:-1]))
        if parent.location is None:
            return parent
        if parent.location.kind in (kinds.HOOKED, kinds.RUNTIME):  # its submodules come from where it came from
            return Located(ModuleLocation(name, parent.location.kind, via=parent.location.via))
        search = parent.location.search
        if search is None:  # a module, not a package: only an alias in sys.modules (os.path) can be here
            alias = self._alias(name)
            return Located(alias) if alias is not None else Located(None, len(parts) - 1, None)
        location = self.find(name, search)
        if location is None:
            return self._missing(name, len(parts) - 1, search)
        return Located(location)

    def _missing(self, name: str, failed_at: int, search: tuple[str, ...] | None) -> Located:
        """Not found by the walk: an alias or a hook's module in sys.modules, or which hooks might provide it."""
        alias = self._alias(name)
        if alias is not None:
            return Located(alias)
        return Located(None, failed_at, search, tuple(self._hooks.unknown(name)))

    def find(self, fullname: str, search: tuple[str, ...] | None) -> ModuleLocation | None:
        """One step of the walk: `fullname` in `search` (None: a top-level module, on sys.path)."""
        if search is None:
            shim = self._hooks.claimed_ahead(fullname)
            if shim is not None:
                return ModuleLocation(fullname, kinds.HOOKED, via=shim)
            if _imp.is_builtin(fullname):
                return ModuleLocation(fullname, kinds.BUILTIN)
        frozen = _frozen(fullname)
        if frozen is not None:
            return frozen
        entries = _sys_path() if search is None else search
        tail = fullname.rpartition(".")[2]
        portions: list[str] = []
        for entry in entries:
            found = self._find_in(fullname, tail, entry, portions)
            if found is not None:
                return found
        if portions:
            return ModuleLocation(fullname, kinds.NAMESPACE, search=tuple(portions))
        if search is None:
            return self._editable(fullname)
        return None

    def _find_in(self, fullname: str, tail: str, entry: str, portions: list[str]) -> ModuleLocation | None:
        """What the standard FileFinder would find for `tail` in one path entry."""
        archive = self._files.archive(entry)
        if archive is None and self._files.kind(entry, None) != DIR:
            return None
        base = os.path.join(entry, tail)
        if self._files.kind(base, archive) == DIR:
            for suffix, kind in _SUFFIXES:
                init = os.path.join(base, "__init__" + suffix)
                if self._files.kind(init, archive) == FILE:
                    return self._package(fullname, kind, init, base, archive)
            portions.append(base)
        for suffix, kind in _SUFFIXES:
            path = base + suffix
            if self._files.kind(path, archive) == FILE:
                return ModuleLocation(fullname, kind, path, archive=archive)
        return None

    def _package(self, fullname: str, kind: str, init: str, base: str, archive: str | None) -> ModuleLocation:
        search: tuple[str, ...] = (base,)
        if kind == kinds.SOURCE and archive is None and _extends_path(init):
            # pkgutil.extend_path / pkg_resources.declare_namespace: every <entry>/<name> on the parent's path
            parent = fullname.rpartition(".")[0]
            entries = (
                _sys_path() if not parent else (self.locate(parent).location or ModuleLocation("", "")).search or ()
            )
            tail = fullname.rpartition(".")[2]
            extra = [os.path.join(entry, tail) for entry in entries]
            search = tuple(dict.fromkeys([base, *(path for path in extra if self._files.kind(path, None) == DIR)]))
        return ModuleLocation(fullname, kind, init, search, archive=archive)

    def _alias(self, name: str) -> ModuleLocation | None:
        """A module in sys.modules under a name the walk does not find (import_hooks.py)."""
        return from_sys_modules(name, self.locate)

    def _editable(self, fullname: str) -> ModuleLocation | None:
        """A top-level package of a setuptools editable install: MAPPING names its directory."""
        for path in self._hooks.editable_paths(fullname):
            portions: list[str] = []
            found = self._find_in(fullname, os.path.basename(path), os.path.dirname(path), portions)
            if found is not None:
                return found
        return None

    def read_source(self, location: ModuleLocation) -> bytes | OSError | None:
        """The module's Python source (None when it has none to read), or why it cannot be read."""
        return read_source(location)

    def submodules(self, search: Iterable[str]) -> list[str]:
        """The names of the modules and packages in these search locations, sorted."""
        found: set[str] = set()
        suffixes = tuple(suffix for suffix, _ in _SUFFIXES)
        for entry in search:
            archive = self._files.archive(entry)
            if archive is not None:
                inner = os.path.relpath(entry, archive).replace(os.sep, "/")
                prefix = "" if inner == "." else inner + "/"
                names = {m[len(prefix) :].split("/")[0] for m in self._files.members(archive) if m.startswith(prefix)}
            else:
                try:
                    names = set(os.listdir(entry))
                except OSError:
                    continue
            for name in names:
                stem = next((name[: -len(s)] for s in suffixes if name.endswith(s)), None)
                if stem is not None and stem.isidentifier() and stem != "__init__":
                    found.add(stem)
                elif (
                    name.isidentifier()
                    and name != "__pycache__"  # bytecode, never a package
                    and self._files.kind(os.path.join(entry, name), archive) == DIR
                ):
                    found.add(name)
        return sorted(found)


# The standard FileFinder's order: extension modules, then source, then sourceless bytecode.
_SUFFIXES = (
    *((suffix, kinds.EXTENSION) for suffix in EXTENSION_SUFFIXES),
    *((suffix, kinds.SOURCE) for suffix in SOURCE_SUFFIXES),
    *((suffix, kinds.BYTECODE) for suffix in BYTECODE_SUFFIXES),
)


def _sys_path() -> list[str]:
    """sys.path as the path finder reads it."""
    return search_path(list(sys.path))


def search_path(path: Iterable[object]) -> list[str]:
    """Path entries as the path finder reads them: '' is the working directory; entries that are not str are
    skipped."""
    entries = []
    for entry in path:
        if type(entry) is not str:
            continue
        try:
            entries.append(os.path.abspath(entry) if entry else os.getcwd())
        except (OSError, ValueError):  # the working directory is gone, or a NUL in the entry
            continue
    return entries


def _frozen(fullname: str) -> ModuleLocation | None:
    """A frozen module (3.11 freezes os, codecs, ...): read from the source file it was frozen from, if known."""
    try:
        spec = FrozenImporter.find_spec(fullname)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    filename = getattr(spec.loader_state, "filename", None)
    search = tuple(spec.submodule_search_locations) if spec.submodule_search_locations is not None else None
    if type(filename) is str and os.path.isfile(filename):
        return ModuleLocation(fullname, kinds.FROZEN, filename, search)
    return ModuleLocation(fullname, kinds.FROZEN, None, search)


def _extends_path(init: str) -> bool:
    """Whether a package's __init__ extends its own __path__ over sys.path (old-style namespace packages)."""
    try:
        text = read_file(init, MAX_SOURCE_BYTES)
    except OSError:
        return False
    return isinstance(text, bytes) and (b"extend_path" in text or b"declare_namespace" in text)


def locate(name: str) -> Located:
    """The module `name`, located afresh."""
    return Finder().locate(name)


def current_fingerprint(name: str) -> Fingerprint:
    """The module's fingerprint now: equal to the one recorded by a check iff what it read is unchanged."""
    finder = Finder()
    located = finder.locate(name)
    source = finder.read_source(located.location) if located.location is not None else None
    return fingerprint(located, source)


def find_spec(fullname: str, search: Any = None) -> ModuleSpec | None:
    """A ModuleSpec (name, origin, search locations; no loader) for where the walk finds `fullname`.

    `search` is a package's search locations, or None for a top-level module. Nothing is imported or called."""
    locations = tuple(search) if search is not None else None
    location = Finder().find(fullname, locations) if locations is not None else locate(fullname).location
    if location is None:
        return None
    origin = None if location.kind == kinds.NAMESPACE else location.origin or location.kind  # as the standard specs say
    spec = ModuleSpec(fullname, None, origin=origin, is_package=location.search is not None)
    if location.search is not None:
        spec.submodule_search_locations = list(location.search)
    return spec
