"""Finding a module's file without running any code, and fingerprinting what was found.

Only the parts of the import system that cannot run foreign code are used: `_imp`'s built-in and frozen
tables, and a walk of sys.path and of package search locations done here, the way the standard path
finder does it (regular packages, PEP 420 namespace portions gathered over every path entry, extension
suffixes first, then `.py` source, then sourceless `.pyc`; zip archives on sys.path read with zipfile).
No finder on sys.meta_path or hook on sys.path_hooks is ever called, no package `__init__` runs, and of
sys.modules only plain module objects are looked at, through their `__dict__`.

Third-party import hooks are honoured only where what they do is known without calling them: the setuptools
distutils shim (it provides top-level 'distutils' ahead of the standard finders), setuptools' editable
finders (their MAPPING of top-level names to directories), six's (only `six.moves`), and pytest's and
virtualenv's (they find what the walk finds). Any other hook on sys.meta_path or sys.path_hooks could provide
modules the walk does not find, so a module not found while one is installed is "not verifiable", not
missing. A module the walk finds is read from its file even where an unknown hook placed ahead of the
standard finders might provide another.
"""

from __future__ import annotations

import _imp
import importlib.machinery
import os
import re
import stat
import sys
import types
import zipimport
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.machinery import (
    BYTECODE_SUFFIXES,
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    BuiltinImporter,
    ExtensionFileLoader,
    FrozenImporter,
    ModuleSpec,
    PathFinder,
    SourceFileLoader,
    SourcelessFileLoader,
)
from typing import Any, TypeVar

try:  # a builtin module: hashlib's OpenSSL import would cost more than a warm load's hashing
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - every CPython has it, other interpreters may not
    from hashlib import blake2b

Fingerprint = tuple[Any, ...]

# What a located module is.
SOURCE = "source"  # Python source: a module file or a regular package's __init__.py
NAMESPACE = "namespace"  # a PEP 420 namespace package: only submodules
EXTENSION = "extension"  # a compiled extension module (.so, .pyd)
BYTECODE = "bytecode"  # a sourceless .pyc
BUILTIN = "built-in"
FROZEN = "frozen"  # frozen into the interpreter; read from its source file where that is known
HOOKED = "hooked"  # provided by a third-party import hook: nothing to read
RUNTIME = "run time"  # only in sys.modules (a proxy object, or a module made at run time): nothing to read

MAX_SOURCE_BYTES = 16 * 1024 * 1024  # a module larger than this is not parsed (it would cost a lot of memory)

_MODULE_DICT: Any = vars(types.ModuleType)["__dict__"]  # a module's namespace, read without its __getattribute__
_TYPE_QUALNAME: Any = type.__dict__["__qualname__"]
_TYPE_MODULE: Any = type.__dict__["__module__"]
_STANDARD_FINDERS = (BuiltinImporter, FrozenImporter, PathFinder)
_STANDARD_LOADERS = (  # and what a module they loaded is
    (SourceFileLoader, SOURCE),
    (SourcelessFileLoader, BYTECODE),
    (ExtensionFileLoader, EXTENSION),
    (BuiltinImporter, BUILTIN),
    (FrozenImporter, FROZEN),
    (getattr(importlib.machinery, "NamespaceLoader", None), NAMESPACE),  # 3.11
)
# Hooks that locate nothing the walk does not find: pytest's rewrites modules the path finder found;
# virtualenv's patches distutils.dist and setuptools.dist as the other finders find them.
_TRANSPARENT_HOOKS = frozenset({"_pytest.assertion.rewrite.AssertionRewritingHook", "_virtualenv._Finder"})
_STANDARD_PATH_HOOKS = frozenset(
    f"{module}.FileFinder.path_hook.<locals>.path_hook_for_FileFinder"
    for module in ("_frozen_importlib_external", "importlib._bootstrap_external")
)
_SIX_IMPORTER = "six._SixMetaPathImporter"  # six (or a vendored copy) provides only <...>six.moves[.*]
_SIX_MOVES = re.compile(r"(?:^|\.)\w*six\.moves(?:\.|$)")
_DISTUTILS_SHIM = "_distutils_hack.DistutilsMetaFinder"  # provides 'distutils' (setuptools' copy), ahead of ours
_EDITABLE_FINDER = "_EditableFinder"  # setuptools' editable installs: class in __editable___<dist>_finder


def digest(data: bytes) -> str:
    """A hex digest of `data`, for cache keys and source fingerprints."""
    return blake2b(data).hexdigest()


_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


def memo(table: dict[_Key, _Value], key: _Key, compute: Callable[[_Key], _Value]) -> _Value:
    """`table[key]`, computed by `compute(key)` the first time it is asked for."""
    found = table.get(key)
    if found is None:
        found = table[key] = compute(key)
    return found


@dataclass(frozen=True)
class Location:
    """Where a module is: what kind of module, its file, and (for packages) where its submodules are."""

    name: str
    kind: str  # SOURCE, NAMESPACE, EXTENSION, BYTECODE, BUILTIN, FROZEN, HOOKED or RUNTIME
    origin: str | None = None  # the file; inside a zip archive, "<archive>/<member>"
    search: tuple[str, ...] | None = None  # a package's submodule search locations; None for a plain module
    via: str | None = None  # HOOKED: the hook's class; RUNTIME: what is there; else the module it aliases
    archive: str | None = None  # the zip archive holding the file, if any


@dataclass(frozen=True)
class Located:
    """A module's location, or where the search stopped and why."""

    location: Location | None
    failed_at: int | None = None  # index of the first dotted part not found, or that is a module, not a package
    search: tuple[str, ...] | None = None  # the search locations of the last package found
    hooks: tuple[str, ...] = ()  # not found: third-party import hooks that might provide it


class Finder:
    """Locates modules the way the standard path finder would, remembering what it saw of the file system.

    One Finder serves one check of a catalog: what it saw stays as it was for the rest of that check."""

    def __init__(self) -> None:
        self._kinds: dict[str, int] = {}  # path -> _MISSING, _FILE or _DIR
        self._archives: dict[str, str | None] = {}  # path entry -> the zip archive it is in, if any
        self._zips: dict[str, frozenset[str] | None] = {}  # archive -> its members (None: not a zip)
        self._located: dict[str, Located] = {}
        self._hooks: tuple[tuple[str, Any, bool], ...] | None = None

    # -- modules ----------------------------------------------------------------------------------------

    def locate(self, name: str) -> Located:
        """The module `name`, found parent by parent (once per finder)."""
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
        if parent.location.kind in (HOOKED, RUNTIME):  # its submodules come from where it came from
            return Located(Location(name, parent.location.kind, via=parent.location.via))
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
        return Located(None, failed_at, search, tuple(self._unknown_hooks(name)))

    def find(self, fullname: str, search: tuple[str, ...] | None) -> Location | None:
        """One step of the walk: `fullname` in `search` (None: a top-level module, on sys.path)."""
        if search is None:
            shim = self._claimed_ahead(fullname)
            if shim is not None:
                return Location(fullname, HOOKED, via=shim)
            if _imp.is_builtin(fullname):
                return Location(fullname, BUILTIN)
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
            return Location(fullname, NAMESPACE, search=tuple(portions))
        if search is None:
            return self._editable(fullname)
        return None

    def _find_in(self, fullname: str, tail: str, entry: str, portions: list[str]) -> Location | None:
        """What the standard FileFinder would find for `tail` in one path entry."""
        archive = self._archive(entry)
        if archive is None and self._kind(entry, None) != _DIR:
            return None
        base = os.path.join(entry, tail)
        if self._kind(base, archive) == _DIR:
            for suffix, kind in _SUFFIXES:
                init = os.path.join(base, "__init__" + suffix)
                if self._kind(init, archive) == _FILE:
                    return self._package(fullname, kind, init, base, archive)
            portions.append(base)
        for suffix, kind in _SUFFIXES:
            path = base + suffix
            if self._kind(path, archive) == _FILE:
                return Location(fullname, kind, path, archive=archive)
        return None

    def _package(self, fullname: str, kind: str, init: str, base: str, archive: str | None) -> Location:
        search: tuple[str, ...] = (base,)
        if kind == SOURCE and archive is None and _extends_path(init):
            # pkgutil.extend_path / pkg_resources.declare_namespace: every <entry>/<name> on the parent's path
            parent = fullname.rpartition(".")[0]
            entries = _sys_path() if not parent else (self.locate(parent).location or Location("", "")).search or ()
            tail = fullname.rpartition(".")[2]
            extra = [os.path.join(entry, tail) for entry in entries]
            search = tuple(dict.fromkeys([base, *(path for path in extra if self._kind(path, None) == _DIR)]))
        return Location(fullname, kind, init, search, archive=archive)

    def _alias(self, name: str) -> Location | None:
        """A module registered in sys.modules under a name the walk does not find: another module's alias
        (os.path is posixpath) or one a third-party hook provided. Only plain module objects are read."""
        module = sys.modules.get(name)
        if module is None:
            return None
        if type(module) is not types.ModuleType:  # a proxy or a module subclass: never read, never run
            return Location(name, RUNTIME, via=f"a {_qualname(type(module))} object")
        spec = _MODULE_DICT.__get__(module).get("__spec__")
        if type(spec) is not ModuleSpec:
            return Location(name, RUNTIME, via="a module made at run time")
        loader = spec.loader
        if loader is None:
            return Location(name, RUNTIME, via="a module made at run time")
        cls: type = loader if issubclass(type(loader), type) else type(loader)  # type: ignore[assignment]
        kind = next((kind for standard, kind in _STANDARD_LOADERS if cls is standard), None)
        if kind is None:
            return Location(name, HOOKED, via=_qualname(cls))
        real = spec.name
        if type(real) is not str:
            return None
        if real != name:  # an alias: read what it stands for
            target = self.locate(real).location
            if target is None or target.kind in (HOOKED, RUNTIME):
                return None
            return Location(name, target.kind, target.origin, target.search, via=real, archive=target.archive)
        # Loaded from a file the walk does not reach (spec_from_file_location): read that file.
        origin, search = spec.origin, spec.submodule_search_locations
        if type(origin) is not str or not os.path.isfile(origin) or kind in (BUILTIN, FROZEN):
            return None
        if search is not None and not (type(search) is list and all(type(path) is str for path in search)):
            return None  # a namespace path object: reading it would recompute it from its parent
        return Location(name, kind, origin, tuple(search) if search is not None else None)

    # -- third-party hooks ------------------------------------------------------------------------------

    def _meta_hooks(self) -> tuple[tuple[str, Any, bool], ...]:
        """(name, finder, ahead of the standard finders) for each third-party finder on sys.meta_path."""
        if self._hooks is None:
            hooks = []
            ahead = True
            for finder in list(sys.meta_path):
                if any(finder is standard for standard in _STANDARD_FINDERS):
                    ahead = False
                    continue
                cls: type = finder if issubclass(type(finder), type) else type(finder)  # type: ignore[assignment]
                hooks.append((_qualname(cls), finder, ahead))
            self._hooks = tuple(hooks)
        return self._hooks

    def _claimed_ahead(self, fullname: str) -> str | None:
        for name, _, ahead in self._meta_hooks():
            if ahead and name == _DISTUTILS_SHIM and fullname == "distutils":
                return name
        return None

    def _unknown_hooks(self, fullname: str) -> Iterable[str]:
        """The hooks that might provide a module the walk did not find (known ones only where they would)."""
        for name, _, _ in self._meta_hooks():
            if name in _TRANSPARENT_HOOKS or name == _DISTUTILS_SHIM or _is_editable(name):
                continue
            if name.endswith(_SIX_IMPORTER) and not _SIX_MOVES.search(fullname):
                continue
            yield name
        yield from _path_hooks()

    def _editable(self, fullname: str) -> Location | None:
        """A top-level package of a setuptools editable install: MAPPING names its directory."""
        for name, finder, _ in self._meta_hooks():
            if not _is_editable(name) or not issubclass(type(finder), type):
                continue
            namespace = sys.modules.get(_type_module(finder) or "")
            if type(namespace) is not types.ModuleType:
                continue
            mapping = _MODULE_DICT.__get__(namespace).get("MAPPING")
            path = mapping.get(fullname) if type(mapping) is dict else None
            if type(path) is not str:
                continue
            portions: list[str] = []
            found = self._find_in(fullname, os.path.basename(path), os.path.dirname(path), portions)
            if found is not None:
                return found
        return None

    # -- the file system --------------------------------------------------------------------------------

    def _kind(self, path: str, archive: str | None) -> int:
        """_FILE, _DIR or _MISSING: on disk, or inside the zip archive the path lies in."""
        kind = self._kinds.get(path)
        if kind is None:
            kind = self._kinds[path] = self._stat(path) if archive is None else self._member(path, archive)
        return kind

    def _stat(self, path: str) -> int:
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            return _MISSING
        if stat.S_ISDIR(mode):
            return _DIR if _exact_case(path) else _MISSING
        if stat.S_ISREG(mode):
            return _FILE if _exact_case(path) else _MISSING
        return _MISSING

    def _archive(self, entry: str) -> str | None:
        """The zip archive a path entry is (or lies in), as zipimport reads 'archive.zip/sub/dir'; else None."""
        if entry in self._archives:
            return self._archives[entry]
        found = None
        if self._stat(entry) != _DIR:  # on disk (the cache of kinds also holds paths inside archives)
            head = entry
            while True:
                kind = self._stat(head)
                if kind == _FILE:
                    if head not in self._zips:
                        self._zips[head] = _zip_members(head)
                    found = head if self._zips[head] is not None else None
                    break
                parent = os.path.dirname(head)
                if kind == _DIR or parent == head:
                    break
                head = parent
        self._archives[entry] = found
        return found

    def _member(self, path: str, archive: str) -> int:
        if path == archive:
            return _DIR
        inner = os.path.relpath(path, archive).replace(os.sep, "/")
        members = self._zips.get(archive) or frozenset()
        if inner in members:
            return _FILE
        return _DIR if inner + "/" in members else _MISSING

    def read_source(self, location: Location) -> bytes | OSError | None:
        """The module's Python source (None when it has none to read), or why it cannot be read."""
        if location.kind not in (SOURCE, FROZEN) or location.origin is None:
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

    def submodules(self, search: Iterable[str]) -> list[str]:
        """The names of the modules and packages in these search locations, sorted."""
        found: set[str] = set()
        suffixes = tuple(suffix for suffix, _ in _SUFFIXES)
        for entry in search:
            archive = self._archive(entry)
            if archive is not None:
                inner = os.path.relpath(entry, archive).replace(os.sep, "/")
                prefix = "" if inner == "." else inner + "/"
                names = {m[len(prefix) :].split("/")[0] for m in self._zips[archive] or () if m.startswith(prefix)}
            else:
                try:
                    names = set(os.listdir(entry))
                except OSError:
                    continue
            for name in names:
                stem = next((name[: -len(s)] for s in suffixes if name.endswith(s)), None)
                if stem is not None and stem.isidentifier() and stem != "__init__":
                    found.add(stem)
                elif name.isidentifier() and self._kind(os.path.join(entry, name), archive) == _DIR:
                    found.add(name)
        return sorted(found)


_MISSING, _FILE, _DIR = 0, 1, 2
# The standard FileFinder's order: extension modules, then source, then sourceless bytecode.
_SUFFIXES = (
    *((suffix, EXTENSION) for suffix in EXTENSION_SUFFIXES),
    *((suffix, SOURCE) for suffix in SOURCE_SUFFIXES),
    *((suffix, BYTECODE) for suffix in BYTECODE_SUFFIXES),
)


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


def _sys_path() -> list[str]:
    """sys.path as the path finder reads it: '' is the working directory; entries that are not str are skipped."""
    entries = []
    for entry in list(sys.path):
        if type(entry) is not str:
            continue
        try:
            entries.append(os.path.abspath(entry) if entry else os.getcwd())
        except (OSError, ValueError):  # the working directory is gone, or a NUL in the entry
            continue
    return entries


def _path_hooks() -> list[str]:
    """Third-party hooks on sys.path_hooks: each could turn some path entry into modules the walk misses."""
    hooks = []
    for hook in list(sys.path_hooks):
        if hook is zipimport.zipimporter:
            continue
        if type(hook) is types.FunctionType:  # the standard FileFinder's hook is a closure of FileFinder.path_hook
            name = f"{hook.__module__}.{hook.__qualname__}"
            if name in _STANDARD_PATH_HOOKS:
                continue
        else:
            name = _qualname(hook if issubclass(type(hook), type) else type(hook))  # type: ignore[arg-type]
        hooks.append(name)
    return hooks


def _frozen(fullname: str) -> Location | None:
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
        return Location(fullname, FROZEN, filename, search)
    return Location(fullname, FROZEN, None, search)


def _extends_path(init: str) -> bool:
    """Whether a package's __init__ extends its own __path__ over sys.path (old-style namespace packages)."""
    try:
        text = read_file(init, MAX_SOURCE_BYTES)
    except OSError:
        return False
    return isinstance(text, bytes) and (b"extend_path" in text or b"declare_namespace" in text)


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


def _qualname(cls: type) -> str:
    """'module.QualName' of a class, read from the type itself (no metaclass code runs)."""
    module = _type_module(cls)
    qualname = _TYPE_QUALNAME.__get__(cls)
    return f"{module}.{qualname}" if module and module != "builtins" else qualname


def _type_module(cls: type) -> str | None:
    module = _TYPE_MODULE.__get__(cls)
    return module if type(module) is str else None


def _is_editable(hook: str) -> bool:
    module, _, name = hook.rpartition(".")
    return name == _EDITABLE_FINDER and module.startswith("__editable__")


def fingerprint(located: Located, source: bytes | OSError | None) -> Fingerprint:
    """What a check of the module depends on: where it was found (or where the search stopped and which
    hooks might have provided it) and, for source, its exact bytes; for other files, their size and time."""
    location = located.location
    if location is None:
        return ("not found", located.failed_at, located.hooks)
    where = (location.kind, location.origin, location.search, location.via)
    if isinstance(source, bytes):
        return (*where, digest(source))
    if isinstance(source, OSError):
        return (*where, f"unreadable: {source}")
    try:
        stamp = os.stat(location.archive or location.origin) if location.origin else None
    except OSError:
        stamp = None
    return (*where, stamp and (stamp.st_size, stamp.st_mtime_ns))


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
    origin = None if location.kind == NAMESPACE else location.origin or location.kind  # as the standard specs say
    spec = ModuleSpec(fullname, None, origin=origin, is_package=location.search is not None)
    if location.search is not None:
        spec.submodule_search_locations = list(location.search)
    return spec
