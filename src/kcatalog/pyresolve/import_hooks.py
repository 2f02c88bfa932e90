"""The import system's state, read without running any of it: third-party hooks on sys.meta_path and
sys.path_hooks, and modules already in sys.modules.

Third-party import hooks are honoured only where what they do is known without calling them: the setuptools
distutils shim (it provides top-level 'distutils' ahead of the standard finders), setuptools' editable
finders (their MAPPING of top-level names to directories), six's (only `six.moves`), transformers' legacy
alias finder (only old module paths inside transformers), and pytest's and virtualenv's (they find what the
walk finds). Any other hook on sys.meta_path or sys.path_hooks could provide modules the walk does not find,
so a module not found while one is installed is "not verifiable", not missing. A module the walk finds is
read from its file even where an unknown hook placed ahead of the standard finders might provide another.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys
import types
import zipimport
from collections.abc import Callable, Iterable, Iterator
from importlib.machinery import (
    BuiltinImporter,
    ExtensionFileLoader,
    FrozenImporter,
    ModuleSpec,
    PathFinder,
    SourceFileLoader,
    SourcelessFileLoader,
)
from typing import Any

from . import kinds
from .locations import Located, ModuleLocation

_MODULE_DICT: Any = vars(types.ModuleType)["__dict__"]  # a module's namespace, read without its __getattribute__
_TYPE_QUALNAME: Any = type.__dict__["__qualname__"]
_TYPE_MODULE: Any = type.__dict__["__module__"]
_STANDARD_FINDERS = (BuiltinImporter, FrozenImporter, PathFinder)
_STANDARD_LOADERS = (  # and what a module they loaded is
    (SourceFileLoader, kinds.SOURCE),
    (SourcelessFileLoader, kinds.BYTECODE),
    (ExtensionFileLoader, kinds.EXTENSION),
    (BuiltinImporter, kinds.BUILTIN),
    (FrozenImporter, kinds.FROZEN),
    (getattr(importlib.machinery, "NamespaceLoader", None), kinds.NAMESPACE),  # 3.11
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
# transformers (or a vendored copy) appends this on import; it serves only old module paths of its own package
_ALIAS_FINDER = ".utils.import_utils._LegacyModuleAliasFinder"
_EDITABLE_FINDER = "_EditableFinder"  # setuptools' editable installs: class in __editable___<dist>_finder


class ImportHooks:
    """The third-party finders on sys.meta_path, as one check first saw them."""

    def __init__(self) -> None:
        self._meta: tuple[tuple[str, Any, bool], ...] | None = None

    def meta(self) -> tuple[tuple[str, Any, bool], ...]:
        """(name, finder, ahead of the standard finders) for each third-party finder on sys.meta_path."""
        if self._meta is None:
            hooks = []
            ahead = True
            for finder in list(sys.meta_path):
                if any(finder is standard for standard in _STANDARD_FINDERS):
                    ahead = False
                    continue
                cls: type = finder if issubclass(type(finder), type) else type(finder)  # type: ignore[assignment]
                hooks.append((_qualname(cls), finder, ahead))
            self._meta = tuple(hooks)
        return self._meta

    def claimed_ahead(self, fullname: str) -> str | None:
        for name, _, ahead in self.meta():
            if ahead and name == _DISTUTILS_SHIM and fullname == "distutils":
                return name
        return None

    def unknown(self, fullname: str) -> Iterable[str]:
        """The hooks that might provide a module the walk did not find (known ones only where they would)."""
        for name, _, _ in self.meta():
            if name in _TRANSPARENT_HOOKS or name == _DISTUTILS_SHIM or _is_editable(name):
                continue
            if name.endswith(_SIX_IMPORTER) and not _SIX_MOVES.search(fullname):
                continue
            package = name.removesuffix(_ALIAS_FINDER)  # 'transformers', or where a copy is vendored
            if package.rpartition(".")[2] == "transformers" and not fullname.startswith(package + "."):
                continue
            yield name
        yield from _path_hooks()

    def editable_paths(self, fullname: str) -> Iterator[str]:
        """Where the MAPPING of each setuptools editable install puts the top-level package `fullname`."""
        for name, finder, _ in self.meta():
            if not _is_editable(name) or not issubclass(type(finder), type):
                continue
            namespace = sys.modules.get(_type_module(finder) or "")
            if type(namespace) is not types.ModuleType:
                continue
            mapping = _MODULE_DICT.__get__(namespace).get("MAPPING")
            path = mapping.get(fullname) if type(mapping) is dict else None
            if type(path) is not str:
                continue
            yield path


def from_sys_modules(name: str, locate: Callable[[str], Located]) -> ModuleLocation | None:
    """A module registered in sys.modules under a name the walk does not find: another module's alias
    (os.path is posixpath) or one a third-party hook provided. Only plain module objects are read."""
    module = sys.modules.get(name)
    if module is None:
        return None
    if type(module) is not types.ModuleType:  # a proxy or a module subclass: never read, never run
        return ModuleLocation(name, kinds.RUNTIME, via=f"a {_qualname(type(module))} object")
    spec = _MODULE_DICT.__get__(module).get("__spec__")
    if type(spec) is not ModuleSpec:
        return ModuleLocation(name, kinds.RUNTIME, via="a module made at run time")
    loader = spec.loader
    if loader is None:
        return ModuleLocation(name, kinds.RUNTIME, via="a module made at run time")
    cls: type = loader if issubclass(type(loader), type) else type(loader)  # type: ignore[assignment]
    kind = next((kind for standard, kind in _STANDARD_LOADERS if cls is standard), None)
    if kind is None:
        return ModuleLocation(name, kinds.HOOKED, via=_qualname(cls))
    real = spec.name
    if type(real) is not str:
        return None
    if real != name:  # an alias: read what it stands for
        target = locate(real).location
        if target is None or target.kind in (kinds.HOOKED, kinds.RUNTIME):
            return None
        return ModuleLocation(name, target.kind, target.origin, target.search, via=real, archive=target.archive)
    # Loaded from a file the walk does not reach (spec_from_file_location): read that file.
    origin, search = spec.origin, spec.submodule_search_locations
    if type(origin) is not str or not os.path.isfile(origin) or kind in (kinds.BUILTIN, kinds.FROZEN):
        return None
    if search is not None and not (type(search) is list and all(type(path) is str for path in search)):
        return None  # a namespace path object: reading it would recompute it from its parent
    return ModuleLocation(name, kind, origin, tuple(search) if search is not None else None)


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
