"""What a module's name statically is: the walk over the module's bindings, following re-exports
(`from m import n`, also relative and chained) to the module that defines the name, star imports into the
modules they import from (honouring a literal `__all__`), and a package's submodules."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import codes
from ..errors import did_you_mean, listing
from .index import CLASS, DEF, INSTANCE, MODULE, VALUE, Binding, ClassIndex
from .target_modules import ModuleReader
from .target_problems import UNVERIFIABLE, Problem, pick, quote, reason

MAX_HOPS = 64  # re-exports, star imports and bases followed for one name before giving up (KC304)


@dataclass(frozen=True, slots=True)
class Obj:
    """What a name statically is."""

    kind: str  # "module", DEF, CLASS, VALUE, INSTANCE or "builtin"
    module: str | None  # the module defining it (the module itself, for modules); None where unknown
    qualname: str = ""
    cls: ClassIndex | None = None
    scope: tuple[ClassIndex, ...] = ()  # the classes a nested class is defined in, innermost last
    value: Any = None  # "builtin": the real builtin object (only reached from base classes); INSTANCE: its Binding


Result = list[Obj] | Problem


class ModuleNames:
    """Resolves a module's names through the modules' indexes, each read once by the reader."""

    def __init__(self, reader: ModuleReader) -> None:
        self._reader = reader

    def assigned_attributes(self, obj: Obj) -> frozenset[str]:
        """Attributes set on a top-level name of its module (`fn.cuda = impl`)."""
        if obj.module is None or "." in obj.qualname:
            return frozenset()
        index = self._reader.module(obj.module).index
        return index.attributes.get(obj.qualname, frozenset()) if index is not None else frozenset()

    def module_attribute(self, name: str, attr: str, hops: int, visiting: frozenset[tuple[str, str]]) -> Result:
        """What `module.attr` is: a name it binds, one of its star imports exports, or a submodule."""
        module = self._reader.module(name)
        if module.problem is not None:
            return module.problem
        key = (name, attr)
        index = module.index
        name = module.name  # an alias (os.path) is read as the module it stands for (posixpath)
        cycle = key in visiting  # `from . import sub` in sub's own package, or a cycle of re-exports
        if index is not None and attr in index.names and not cycle:
            return self.bindings(name, attr, index.names[attr], (), hops, visiting | {key})
        star_problem = None
        if index is not None and not cycle:
            for star in reversed(index.stars):
                exported = self._star_export(star.module, attr, hops + 1, visiting | {key})
                if isinstance(exported, Problem):
                    source = quote(star.module) if star.module else "beyond the top-level package"
                    cause = reason(exported.text).partition("; its modules:")[0]
                    star_problem = star_problem or Problem(
                        codes.TARGET_UNVERIFIABLE,
                        f"{quote(attr)} not found in the source of {quote(name)}, whose star import of {source} "
                        f"(line {star.line}) cannot be followed: {cause}; {UNVERIFIABLE}",
                        through=(star.module, *exported.through) if star.module else exported.through,
                    )
                elif exported is not None:
                    return exported
        location = module.located.location
        if location is not None and location.search is not None:
            sub = self._reader.module(f"{name}.{attr}")
            if sub.located.location is not None:  # found (what it binds may still be unreadable)
                return [Obj("module", f"{name}.{attr}")]
        if star_problem is not None:
            return star_problem
        if cycle:  # `from a import x` in b and `from b import x` in a: never defined
            return Problem(
                codes.TARGET_ATTRIBUTE_MISSING,
                f"{quote(attr)} is only re-exported in a cycle of imports through {quote(name)}, never defined",
            )
        if index is None:
            siblings = self._reader.submodules(location.search or ()) if location is not None else []
            return Problem(
                codes.TARGET_ATTRIBUTE_MISSING,
                f"namespace package {quote(name)} has no module {quote(attr)}{did_you_mean(attr, siblings)}; "
                f"its modules: {listing(siblings)}",
            )
        if index.getattr:
            return Problem(
                codes.TARGET_UNVERIFIABLE,
                f"{quote(attr)} not found in the source of {quote(name)}, which defines __getattr__; {UNVERIFIABLE}",
            )
        if index.dynamic is not None:
            return Problem(
                codes.TARGET_UNVERIFIABLE,
                f"{quote(attr)} not found in the source of {quote(name)}, which {index.dynamic}; {UNVERIFIABLE}",
            )
        if attr in index.global_names:
            return Problem(
                codes.TARGET_UNVERIFIABLE,
                f"{quote(attr)} in {quote(name)} is assigned only inside a function ('global {attr}', line "
                f"{index.global_names[attr]}); {UNVERIFIABLE}",
            )
        why = index.unbound.get(attr)
        note = f" ({quote(attr)} is {why})" if why else ""
        hint = did_you_mean(attr, self._visible(name)) if not why else ""
        return Problem(codes.TARGET_ATTRIBUTE_MISSING, f"module {quote(name)} defines no {quote(attr)}{note}{hint}")

    def _visible(self, name: str) -> list[str]:
        """The names a module's source shows, for 'did you mean'."""
        index = self._reader.module(name).index
        return list(index.names) if index is not None else []

    def _star_export(
        self, name: str, attr: str, hops: int, visiting: frozenset[tuple[str, str]]
    ) -> list[Obj] | Problem | None:
        """What `from name import *` binds to `attr`: None when it binds nothing of that name."""
        if not name:
            return Problem(codes.TARGET_UNVERIFIABLE, "the relative import goes beyond the top-level package")
        if hops > MAX_HOPS:
            return Problem(codes.TARGET_UNVERIFIABLE, "too many star imports to follow")
        module = self._reader.module(name)
        if module.problem is not None:
            return module.problem
        index = module.index
        if index is None:  # a namespace package exports nothing
            return None
        if index.all is not None:
            if attr not in index.all:
                return None
            result = self.module_attribute(name, attr, hops, visiting)
            return result
        if attr.startswith("_") and not index.all_dynamic:
            return None
        key = (name, attr)
        if key in visiting:
            return None
        bindings = index.names.get(attr)
        if bindings:
            return self.bindings(name, attr, bindings, (), hops, visiting | {key})
        for star in reversed(index.stars):
            exported = self._star_export(star.module, attr, hops + 1, visiting | {key})
            if exported is not None:
                return exported
        if index.all_dynamic:
            return Problem(codes.TARGET_UNVERIFIABLE, f"{quote(name)} computes its __all__")
        return None

    def bindings(
        self,
        module: str,
        attr: str,
        bindings: Sequence[Binding],
        scope: tuple[ClassIndex, ...],
        hops: int,
        visiting: frozenset[tuple[str, str]],
        qualprefix: str = "",
    ) -> Result:
        """Every way a name may be bound, resolved; the name resolves if any of them does."""
        found: list[Obj] = []
        problems: list[Problem] = []
        qualname = f"{qualprefix}{attr}"
        for binding in bindings:
            result = self._binding(module, qualname, binding, scope, hops, visiting)
            if isinstance(result, Problem):
                problems.append(result)
            else:
                found.extend(result)
        return unique(found) if found else pick(problems)

    def _binding(
        self,
        module: str,
        qualname: str,
        binding: Binding,
        scope: tuple[ClassIndex, ...],
        hops: int,
        visiting: frozenset[tuple[str, str]],
    ) -> Result:
        kind = binding.kind
        if kind == DEF or kind == VALUE:
            return [Obj(kind, module, qualname)]
        if kind == CLASS:
            return [Obj(CLASS, module, qualname, binding.cls, scope)]
        if kind == INSTANCE:  # what the call returns is followed only for an attribute of it (target_classes)
            return [Obj(INSTANCE, module, qualname, scope=scope, value=binding)]
        if kind == MODULE:
            return [Obj("module", binding.module)]
        # FROM: whatever the other module's name is; `from m import n` also imports a submodule m.n.
        source, name = binding.module, binding.name
        line = f"line {binding.line} of {quote(module)}"
        if not source:
            return Problem(
                codes.TARGET_MODULE_NOT_FOUND,
                f"{quote(qualname)} is imported by a relative import beyond the top-level package ({line})",
            )
        if hops >= MAX_HOPS:  # each re-export followed nests this walk deeper: a chain of 1,000 hit the recursion limit
            return Problem(
                codes.TARGET_UNVERIFIABLE, f"more than {MAX_HOPS} re-exports to follow ({line}); {UNVERIFIABLE}"
            )
        result = self.module_attribute(source, name, hops + 1, visiting)
        if isinstance(result, Problem):
            return Problem(
                result.code,
                f"{quote(qualname)} is imported from {quote(source)} ({line}), but {result.text}",
                through=(source, *result.through),
            )
        return result


def unique(objs: Iterable[Obj]) -> list[Obj]:
    seen: list[Obj] = []
    for obj in objs:
        if obj not in seen:
            seen.append(obj)
    return seen
