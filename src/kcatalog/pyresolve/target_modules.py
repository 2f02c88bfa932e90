"""The modules the target checks read: each located (finder.py) and indexed (index.py) once, or
the problem that says why it cannot be read (not found, not installed, compiled, a syntax error, unreadable),
with the nearest names that do exist."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from .. import codes
from ..errors import did_you_mean, listing
from ..model import ModuleFingerprint
from . import kinds
from .finder import Finder, search_path
from .fingerprints import Fingerprint, digest, fingerprint
from .index import ModuleIndex, index_module
from .index_record import IndexStore, decode, encode, index_key
from .locations import Located
from .skeleton import syntax_tree
from .target_problems import UNVERIFIABLE, Problem, one_line, quote


@dataclass(frozen=True, slots=True)
class IndexedModule:
    """A module as located and indexed, or why it cannot be read."""

    name: str
    located: Located
    found: Fingerprint
    index: ModuleIndex | None
    problem: Problem | None  # not found, unavailable, compiled, a syntax error, unreadable


class ModuleReader:
    """Locates and indexes each module once, by name (also a name looked for and not found).

    `indexes`: where the caller keeps indexes between checks (index_record.py): a source indexed before, byte for
    byte, is neither parsed nor syntax-checked again; those indexed here are put there."""

    def __init__(self, indexes: IndexStore | None = None) -> None:
        self._finder = Finder()
        self._modules: dict[str, IndexedModule] = {}
        self._indexes = indexes

    def fingerprints(self) -> tuple[ModuleFingerprint, ...]:
        """Every module looked at so far (also looked for and not found) and what its checks depended on."""
        return tuple(ModuleFingerprint(name, module.found) for name, module in self._modules.items())

    def submodules(self, search: Iterable[str]) -> list[str]:
        """The modules of a package searched in these directories, for messages."""
        return self._finder.submodules(search)

    def module(self, name: str) -> IndexedModule:
        """The module of that name, located and indexed on first use."""
        cached = self._modules.get(name)
        if cached is None:
            located = self._finder.locate(name)
            alias = located.location.via if located.location is not None else None
            if (
                alias is not None
                and located.location is not None
                and located.location.kind not in (kinds.HOOKED, kinds.RUNTIME)
            ):
                real = self.module(alias)  # os.path is posixpath: read once, under its own name
                found = fingerprint(located, self._finder.read_source(located.location))
                cached = IndexedModule(real.name, located, found, real.index, real.problem)
            else:
                cached = self._read(name, located)
            self._modules[name] = cached
        return cached

    def _read(self, name: str, located: Located) -> IndexedModule:
        location = located.location
        source = self._finder.read_source(location) if location is not None else None
        source_digest = digest(source) if isinstance(source, bytes) else ""
        found = fingerprint(located, source, source_digest)
        if location is None:
            return IndexedModule(name, located, found, None, self._missing(name, located))
        kind = location.kind
        if kind == kinds.NAMESPACE:
            return IndexedModule(name, located, found, None, None)
        if kind == kinds.HOOKED:
            why = f"module {quote(name)} is found only through a third-party import hook ({location.via}); "
            return IndexedModule(name, located, found, None, Problem(codes.TARGET_UNVERIFIABLE, why + UNVERIFIABLE))
        if kind == kinds.RUNTIME:
            why = f"module {quote(name)} is only in sys.modules ({location.via}), in no file; "
            return IndexedModule(name, located, found, None, Problem(codes.TARGET_UNVERIFIABLE, why + UNVERIFIABLE))
        if source is None:
            what = {kinds.BUILTIN: "built-in", kinds.EXTENSION: location.origin, kinds.FROZEN: "frozen"}.get(kind)
            text = (
                f"module {quote(name)} is compiled ({what}); {UNVERIFIABLE}"
                if kind != kinds.BYTECODE
                else f"module {quote(name)} has no source (bytecode only: {location.origin}); {UNVERIFIABLE}"
            )
            return IndexedModule(name, located, found, None, Problem(codes.TARGET_UNVERIFIABLE, text))
        if isinstance(source, OSError):
            text = f"module {quote(name)} cannot be read ({source.strerror or source}); {UNVERIFIABLE}"
            return IndexedModule(name, located, found, None, Problem(codes.TARGET_UNVERIFIABLE, text))
        origin = location.origin or name
        is_package = location.search is not None
        key = index_key(name, is_package, source_digest) if self._indexes is not None else ""
        if key:
            assert self._indexes is not None
            recorded = self._indexes.get(key)
            index = decode(recorded) if recorded is not None else None
            if index is not None:  # indexed before: its syntax was checked then
                return IndexedModule(name, located, found, index, None)
        try:
            tree = syntax_tree(source, origin)  # function bodies left out
        except (SyntaxError, ValueError) as exc:  # importing it would certainly fail
            line = f", line {exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
            detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
            text = (
                f"module {quote(name)} cannot be imported: syntax error in {os.path.basename(origin)}{line}: {detail}"
            )
            return IndexedModule(name, located, found, None, Problem(codes.TARGET_SYNTAX_ERROR, one_line(text), True))
        except (RecursionError, MemoryError):  # so would compiling it, which uses the same parser
            text = f"module {quote(name)} cannot be imported: {os.path.basename(origin)} is too deeply nested to parse"
            return IndexedModule(name, located, found, None, Problem(codes.TARGET_SYNTAX_ERROR, text, True))
        try:
            index = index_module(tree, name, is_package, source)
        except RecursionError:  # conditions nested some hundred levels deep: parsed, but not followed here
            text = f"module {quote(name)} nests its code too deeply to be followed; {UNVERIFIABLE}"
            return IndexedModule(name, located, found, None, Problem(codes.TARGET_UNVERIFIABLE, text))
        del tree  # only the index is kept
        if key:
            assert self._indexes is not None
            self._indexes.put(key, encode(index))
        return IndexedModule(name, located, found, index, None)

    def _missing(self, name: str, located: Located) -> Problem:
        parts = name.split(".")
        failed_at = located.failed_at or 0
        if located.hooks:
            hooks = ", ".join(located.hooks)
            return Problem(
                codes.TARGET_UNVERIFIABLE,
                f"module {quote(name)} is not found by the standard import machinery; the third-party import "
                f"hook{'s' if len(located.hooks) > 1 else ''} {hooks} might provide it (never called here); "
                f"{UNVERIFIABLE}",
            )
        if failed_at == 0:
            return Problem(
                codes.TARGET_UNAVAILABLE,
                f"module {quote(name)} unavailable here: top-level package {quote(parts[0])} is not installed"
                f"{nearest_installed(parts[0], tuple(sys.path)) or '; install it to check this target'}",
                True,
            )
        parent = ".".join(parts[:failed_at])
        if located.search is None:
            return Problem(
                codes.TARGET_MODULE_NOT_FOUND,
                f"module {quote(name)} not found: {quote(parent)} is a module, not a package",
                True,
            )
        siblings = self._finder.submodules(located.search)
        return Problem(
            codes.TARGET_MODULE_NOT_FOUND,
            f"module {quote(name)} not found: package {quote(parent)} has no module {quote(parts[failed_at])}"
            f"{did_you_mean(parts[failed_at], siblings)}; its modules: {listing(siblings)}",
            True,
        )


@functools.lru_cache(maxsize=256)
def nearest_installed(name: str, path: tuple[str, ...]) -> str:
    """' (did you mean 'x'?)' for an installed top-level module `name` plausibly misspells (hundreds are
    installed: only a near-typo counts), found on `path` (sys.path) by the finder's own listing (pkgutil's would
    ask sys.path_hooks and the finders cached for each entry); remembered per name and path, since a catalog often
    names one missing package many times."""
    installed = set(Finder().submodules(search_path(path))) | set(sys.builtin_module_names)
    return did_you_mean(name, sorted(installed), typo=True)
