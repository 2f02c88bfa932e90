"""Static checks of 'module:attr' targets: find the module, read its source, follow what it binds.

Nothing is imported. Each module is located (check/finder.py) and indexed (check/index.py) once per
TargetChecker; the checker then follows a target's attribute path through that index: re-exports
(`from m import n`, also relative and chained) to the module that defines the name, star imports into the
modules they import from (honouring a literal `__all__`), class members through the bases of the class
(C3 order, across modules), and a package's submodules. Where the chain leaves what the sources show
(a compiled module, a base that is a call, a metaclass or decorator that may add attributes, a
module-level `__getattr__`) the target is "not verifiable statically" (KC304, a warning), never an error.

An attribute path may not walk through, or end at, a module bound by an import (`import torch` then
`mod:torch.os.system`): KC305. It may walk into the module's own submodules (`pkg:sub.fn`).
"""

from __future__ import annotations

import builtins
import functools
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import codes
from ..errors import Diagnostic, Severity, did_you_mean, listing
from ..model import ModuleFingerprint
from .finder import (
    BUILTIN,
    BYTECODE,
    EXTENSION,
    FROZEN,
    HOOKED,
    NAMESPACE,
    RUNTIME,
    Finder,
    Fingerprint,
    Located,
    fingerprint,
    memo,
)
from .index import (
    CLASS,
    DEF,
    MODULE,
    PLAIN_DECORATORS,
    PLAIN_METACLASSES,
    VALUE,
    Binding,
    ClassIndex,
    Expr,
    ModuleIndex,
    index_module,
)
from .skeleton import syntax_tree

MAX_HOPS = 64  # re-exports, star imports and bases followed for one name before giving up (KC304)


def _q(text: str) -> str:
    """Text from a target, quoted: repr escapes newlines and other control characters."""
    return repr(text)


@dataclass(frozen=True)
class Resolution:
    """What a target resolves to: its problem (None: it resolves) and the module that defines the object
    it names, where the sources show it (None where they do not, or where several are possible)."""

    problem: Diagnostic | None
    defining_module: str | None


@dataclass(frozen=True, slots=True)
class _Problem:
    """Why a name does not resolve: a code and a message without the target's prefix."""

    code: str
    text: str
    bare: bool = False  # a problem of the target's own module, reported as "module 'x' ..." without prefix

    @property
    def is_warning(self) -> bool:
        return self.code in codes.TARGET_WARNINGS


@dataclass(frozen=True, slots=True)
class _Module:
    """A module as located and indexed, or why it cannot be read."""

    name: str
    located: Located
    found: Fingerprint
    index: ModuleIndex | None
    problem: _Problem | None  # not found, unavailable, compiled, a syntax error, unreadable


@dataclass(frozen=True, slots=True)
class _Obj:
    """What a name statically is."""

    kind: str  # "module", DEF, CLASS, VALUE or "builtin"
    module: str | None  # the module defining it (the module itself, for modules); None where unknown
    qualname: str = ""
    cls: ClassIndex | None = None
    scope: tuple[ClassIndex, ...] = ()  # the classes a nested class is defined in, innermost last
    value: Any = None  # "builtin": the real builtin object (only reached from base classes)


_Result = list[_Obj] | _Problem


class TargetChecker:
    """Checks targets against module sources; each module is located and indexed once."""

    def __init__(self) -> None:
        self._finder = Finder()
        self._modules: dict[str, _Module] = {}
        self._mros: dict[int, list[_Obj | _Problem]] = {}  # by id of the ClassIndex, which the index keeps alive
        self._resolved: dict[str, Resolution] = {}

    def fingerprints(self) -> tuple[ModuleFingerprint, ...]:
        """Every module looked at so far (also looked for and not found) and what its checks depended on."""
        return tuple(ModuleFingerprint(name, module.found) for name, module in self._modules.items())

    def check(self, target: str) -> Diagnostic | None:
        """None when the target resolves statically, else what is wrong with it."""
        return self.resolve(target).problem

    def defining_module(self, target: str) -> str | None:
        """The module whose source defines the object the target names, where the sources show it."""
        return self.resolve(target).defining_module

    def resolve(self, target: str) -> Resolution:
        """The target's problem and defining module (checked once per target)."""
        return memo(self._resolved, target, self._resolve)

    def _resolve(self, target: str) -> Resolution:
        module_name, _, attr_path = target.partition(":")
        module = self._module(module_name)
        if module.problem is not None:
            return Resolution(self._diagnostic(target, module.problem), None)
        attrs = attr_path.split(".")
        current = [_Obj("module", module_name)]
        for depth, attr in enumerate(attrs):
            owner = ".".join(attrs[:depth])
            found: list[_Obj] = []
            problems: list[_Problem] = []
            for obj in current:
                result = self._attribute(obj, attr, owner, 0)
                if isinstance(result, _Problem):
                    problems.append(result)
                else:
                    found.extend(result)
            if not found:
                return Resolution(self._diagnostic(target, _pick(problems)), None)
            refused = _through_import(
                found, current, ".".join(attrs[: depth + 1]), module_name, depth == len(attrs) - 1
            )
            if refused is not None:
                return Resolution(self._diagnostic(target, refused), None)
            current = _unique(found)
        modules = {obj.module for obj in current}
        return Resolution(None, modules.pop() if len(modules) == 1 else None)

    def _diagnostic(self, target: str, problem: _Problem) -> Diagnostic:
        message = problem.text if problem.bare else f"target {_q(target)}: {problem.text}"
        severity = Severity.WARNING if problem.is_warning else Severity.ERROR
        return Diagnostic(problem.code, message, None, severity)

    # -- modules ---------------------------------------------------------------------------------------

    def _module(self, name: str) -> _Module:
        cached = self._modules.get(name)
        if cached is None:
            located = self._finder.locate(name)
            alias = located.location.via if located.location is not None else None
            if alias is not None and located.location is not None and located.location.kind not in (HOOKED, RUNTIME):
                real = self._module(alias)  # os.path is posixpath: read once, under its own name
                found = fingerprint(located, self._finder.read_source(located.location))
                cached = _Module(real.name, located, found, real.index, real.problem)
            else:
                cached = self._read(name, located)
            self._modules[name] = cached
        return cached

    def _read(self, name: str, located: Located) -> _Module:
        location = located.location
        source = self._finder.read_source(location) if location is not None else None
        found = fingerprint(located, source)
        if location is None:
            return _Module(name, located, found, None, self._missing(name, located))
        kind = location.kind
        if kind == NAMESPACE:
            return _Module(name, located, found, None, None)
        if kind == HOOKED:
            why = f"module {_q(name)} is found only through a third-party import hook ({location.via}); "
            return _Module(name, located, found, None, _Problem(codes.TARGET_UNVERIFIABLE, why + _UNVERIFIABLE))
        if kind == RUNTIME:
            why = f"module {_q(name)} is only in sys.modules ({location.via}), in no file; "
            return _Module(name, located, found, None, _Problem(codes.TARGET_UNVERIFIABLE, why + _UNVERIFIABLE))
        if source is None:
            what = {BUILTIN: "built-in", EXTENSION: location.origin, FROZEN: "frozen"}.get(kind)
            text = (
                f"module {_q(name)} is compiled ({what}); {_UNVERIFIABLE}"
                if kind != BYTECODE
                else f"module {_q(name)} has no source (bytecode only: {location.origin}); {_UNVERIFIABLE}"
            )
            return _Module(name, located, found, None, _Problem(codes.TARGET_UNVERIFIABLE, text))
        if isinstance(source, OSError):
            text = f"module {_q(name)} cannot be read ({source.strerror or source}); {_UNVERIFIABLE}"
            return _Module(name, located, found, None, _Problem(codes.TARGET_UNVERIFIABLE, text))
        origin = location.origin or name
        try:
            tree = syntax_tree(source, origin)  # function bodies left out
        except (SyntaxError, ValueError) as exc:  # importing it would certainly fail
            line = f", line {exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
            detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
            text = f"module {_q(name)} cannot be imported: syntax error in {os.path.basename(origin)}{line}: {detail}"
            return _Module(name, located, found, None, _Problem(codes.TARGET_SYNTAX_ERROR, _one_line(text), True))
        except (RecursionError, MemoryError):  # so would compiling it, which uses the same parser
            text = f"module {_q(name)} cannot be imported: {os.path.basename(origin)} is too deeply nested to parse"
            return _Module(name, located, found, None, _Problem(codes.TARGET_SYNTAX_ERROR, text, True))
        try:
            index = index_module(tree, name, location.search is not None, source)
        except RecursionError:  # conditions nested some hundred levels deep: parsed, but not followed here
            text = f"module {_q(name)} nests its code too deeply to be followed; {_UNVERIFIABLE}"
            return _Module(name, located, found, None, _Problem(codes.TARGET_UNVERIFIABLE, text))
        del tree  # only the index is kept
        return _Module(name, located, found, index, None)

    def _missing(self, name: str, located: Located) -> _Problem:
        parts = name.split(".")
        failed_at = located.failed_at or 0
        if located.hooks:
            hooks = ", ".join(located.hooks)
            return _Problem(
                codes.TARGET_UNVERIFIABLE,
                f"module {_q(name)} is not found by the standard import machinery; the third-party import "
                f"hook{'s' if len(located.hooks) > 1 else ''} {hooks} might provide it (never called here); "
                f"{_UNVERIFIABLE}",
            )
        if failed_at == 0:
            return _Problem(
                codes.TARGET_UNAVAILABLE,
                f"module {_q(name)} unavailable here: top-level package {_q(parts[0])} is not installed"
                f"{nearest_installed(parts[0], tuple(sys.path))}",
                True,
            )
        parent = ".".join(parts[:failed_at])
        if located.search is None:
            return _Problem(
                codes.TARGET_MODULE_NOT_FOUND,
                f"module {_q(name)} not found: {_q(parent)} is a module, not a package",
                True,
            )
        siblings = self._finder.submodules(located.search)
        return _Problem(
            codes.TARGET_MODULE_NOT_FOUND,
            f"module {_q(name)} not found: package {_q(parent)} has no module {_q(parts[failed_at])}"
            f"{did_you_mean(parts[failed_at], siblings)}; its modules: {listing(siblings)}",
            True,
        )

    # -- attributes ------------------------------------------------------------------------------------

    def _attribute(self, obj: _Obj, attr: str, owner: str, hops: int) -> _Result:
        """What `obj.attr` is, statically. `owner` is how the target path spells obj, for messages."""
        if hops > MAX_HOPS:
            return _Problem(codes.TARGET_UNVERIFIABLE, f"too many re-exports and bases to follow; {_UNVERIFIABLE}")
        if obj.kind == "module":
            assert obj.module is not None  # modules always know their name
            return self._module_attribute(obj.module, attr, hops, frozenset())
        if obj.kind == CLASS:
            return self._class_attribute(obj, attr, owner, hops)
        if obj.kind == "builtin":
            if hasattr(obj.value, attr):
                return [_Obj("builtin", "builtins", attr)]
            return _Problem(codes.TARGET_ATTRIBUTE_MISSING, f"{_q(owner)} has no attribute {_q(attr)}")
        if attr in self._assigned_attributes(obj):  # `fn.cuda = impl` at the top level of its module
            return [_Obj(VALUE, obj.module, f"{obj.qualname}.{attr}")]
        return _Problem(
            codes.TARGET_UNVERIFIABLE,
            f"{_q(owner)} is not a class in the source; {_q(attr)} on it is not verifiable statically",
        )

    def _assigned_attributes(self, obj: _Obj) -> frozenset[str]:
        """Attributes set on a top-level name of its module (`fn.cuda = impl`)."""
        if obj.module is None or "." in obj.qualname:
            return frozenset()
        index = self._module(obj.module).index
        return index.attributes.get(obj.qualname, frozenset()) if index is not None else frozenset()

    def _module_attribute(self, name: str, attr: str, hops: int, visiting: frozenset[tuple[str, str]]) -> _Result:
        """What `module.attr` is: a name it binds, one of its star imports exports, or a submodule."""
        module = self._module(name)
        if module.problem is not None:
            return module.problem
        key = (name, attr)
        index = module.index
        name = module.name  # an alias (os.path) is read as the module it stands for (posixpath)
        cycle = key in visiting  # `from . import sub` in sub's own package, or a cycle of re-exports
        if index is not None and attr in index.names and not cycle:
            return self._bindings(name, attr, index.names[attr], (), hops, visiting | {key})
        star_problem = None
        if index is not None and not cycle:
            for star in reversed(index.stars):
                exported = self._star_export(star.module, attr, hops + 1, visiting | {key})
                if isinstance(exported, _Problem):
                    source = _q(star.module) if star.module else "beyond the top-level package"
                    reason = _reason(exported.text).partition("; its modules:")[0]
                    star_problem = star_problem or _Problem(
                        codes.TARGET_UNVERIFIABLE,
                        f"{_q(attr)} not found in the source of {_q(name)}, whose star import of {source} "
                        f"(line {star.line}) cannot be followed: {reason}; {_UNVERIFIABLE}",
                    )
                elif exported is not None:
                    return exported
        location = module.located.location
        if location is not None and location.search is not None:
            sub = self._module(f"{name}.{attr}")
            if sub.located.location is not None:  # found (what it binds may still be unreadable)
                return [_Obj("module", f"{name}.{attr}")]
        if star_problem is not None:
            return star_problem
        if cycle:  # `from a import x` in b and `from b import x` in a: never defined
            return _Problem(
                codes.TARGET_ATTRIBUTE_MISSING,
                f"{_q(attr)} is only re-exported in a cycle of imports through {_q(name)}, never defined",
            )
        if index is None:
            siblings = self._finder.submodules(location.search or ()) if location is not None else []
            return _Problem(
                codes.TARGET_ATTRIBUTE_MISSING,
                f"namespace package {_q(name)} has no module {_q(attr)}{did_you_mean(attr, siblings)}; "
                f"its modules: {listing(siblings)}",
            )
        if index.getattr:
            return _Problem(
                codes.TARGET_UNVERIFIABLE,
                f"{_q(attr)} not found in the source of {_q(name)}, which defines __getattr__; {_UNVERIFIABLE}",
            )
        if index.dynamic is not None:
            return _Problem(
                codes.TARGET_UNVERIFIABLE,
                f"{_q(attr)} not found in the source of {_q(name)}, which {index.dynamic}; {_UNVERIFIABLE}",
            )
        if attr in index.global_names:
            return _Problem(
                codes.TARGET_UNVERIFIABLE,
                f"{_q(attr)} in {_q(name)} is assigned only inside a function ('global {attr}', line "
                f"{index.global_names[attr]}); {_UNVERIFIABLE}",
            )
        why = index.unbound.get(attr)
        note = f" ({_q(attr)} is {why})" if why else ""
        hint = did_you_mean(attr, self._visible(name)) if not why else ""
        return _Problem(codes.TARGET_ATTRIBUTE_MISSING, f"module {_q(name)} defines no {_q(attr)}{note}{hint}")

    def _visible(self, name: str) -> list[str]:
        """The names a module's source shows, for 'did you mean'."""
        index = self._module(name).index
        return list(index.names) if index is not None else []

    def _star_export(
        self, name: str, attr: str, hops: int, visiting: frozenset[tuple[str, str]]
    ) -> list[_Obj] | _Problem | None:
        """What `from name import *` binds to `attr`: None when it binds nothing of that name."""
        if not name:
            return _Problem(codes.TARGET_UNVERIFIABLE, "the relative import goes beyond the top-level package")
        if hops > MAX_HOPS:
            return _Problem(codes.TARGET_UNVERIFIABLE, "too many star imports to follow")
        module = self._module(name)
        if module.problem is not None:
            return module.problem
        index = module.index
        if index is None:  # a namespace package exports nothing
            return None
        if index.all is not None:
            if attr not in index.all:
                return None
            result = self._module_attribute(name, attr, hops, visiting)
            return result
        if attr.startswith("_") and not index.all_dynamic:
            return None
        key = (name, attr)
        if key in visiting:
            return None
        bindings = index.names.get(attr)
        if bindings:
            return self._bindings(name, attr, bindings, (), hops, visiting | {key})
        for star in reversed(index.stars):
            exported = self._star_export(star.module, attr, hops + 1, visiting | {key})
            if exported is not None:
                return exported
        if index.all_dynamic:
            return _Problem(codes.TARGET_UNVERIFIABLE, f"{_q(name)} computes its __all__")
        return None

    def _bindings(
        self,
        module: str,
        attr: str,
        bindings: Sequence[Binding],
        scope: tuple[ClassIndex, ...],
        hops: int,
        visiting: frozenset[tuple[str, str]],
        qualprefix: str = "",
    ) -> _Result:
        """Every way a name may be bound, resolved; the name resolves if any of them does."""
        found: list[_Obj] = []
        problems: list[_Problem] = []
        qualname = f"{qualprefix}{attr}"
        for binding in bindings:
            result = self._binding(module, qualname, binding, scope, hops, visiting)
            if isinstance(result, _Problem):
                problems.append(result)
            else:
                found.extend(result)
        return _unique(found) if found else _pick(problems)

    def _binding(
        self,
        module: str,
        qualname: str,
        binding: Binding,
        scope: tuple[ClassIndex, ...],
        hops: int,
        visiting: frozenset[tuple[str, str]],
    ) -> _Result:
        kind = binding.kind
        if kind == DEF or kind == VALUE:
            return [_Obj(kind, module, qualname)]
        if kind == CLASS:
            return [_Obj(CLASS, module, qualname, binding.cls, scope)]
        if kind == MODULE:
            return [_Obj("module", binding.module)]
        # FROM: whatever the other module's name is; `from m import n` also imports a submodule m.n.
        source, name = binding.module, binding.name
        line = f"line {binding.line} of {_q(module)}"
        if not source:
            return _Problem(
                codes.TARGET_MODULE_NOT_FOUND,
                f"{_q(qualname)} is imported by a relative import beyond the top-level package ({line})",
            )
        result = self._module_attribute(source, name, hops + 1, visiting)
        if isinstance(result, _Problem):
            return _Problem(result.code, f"{_q(qualname)} is imported from {_q(source)} ({line}), but {result.text}")
        return result

    # -- classes ---------------------------------------------------------------------------------------

    def _class_attribute(self, obj: _Obj, attr: str, owner: str, hops: int) -> _Result:
        """A member of a class or of one of its bases, in method resolution order."""
        assert obj.cls is not None
        own = self._member(obj, attr, hops)
        if own is not None:
            return own
        mro = self._mro(obj, hops)
        unreadable: _Problem | None = None
        for entry in mro[1:]:
            if isinstance(entry, _Problem):
                unreadable = unreadable or entry
                continue
            if entry.kind == "builtin":
                if any(attr in vars(base) for base in entry.value.__mro__):
                    return [_Obj("builtin", None if unreadable else "builtins", attr)]
                continue
            member = self._member(entry, attr, hops)
            if member is not None:
                if unreadable is not None and not isinstance(member, _Problem):
                    return [_Obj(o.kind, None, o.qualname, o.cls, o.scope, o.value) for o in member]
                return member
        if unreadable is not None:
            return _Problem(
                codes.TARGET_UNVERIFIABLE,
                f"{_q(attr)} not found in class {_q(owner)} or the bases that could be read: "
                f"{_reason(unreadable.text)}; {_UNVERIFIABLE}",
            )
        for entry in mro:
            if isinstance(entry, _Obj) and entry.cls is not None:
                concern = _opaque_class(entry.cls)
                if concern is not None:
                    return _Problem(
                        codes.TARGET_UNVERIFIABLE,
                        f"{_q(attr)} not found in class {_q(owner)}, {concern}; {_UNVERIFIABLE}",
                    )
        classes = [e for e in mro if isinstance(e, _Obj) and e.cls is not None]
        members = [m for e in classes for m in (*e.cls.members, *self._assigned_attributes(e))]  # type: ignore[union-attr]
        bases = [e.qualname if e.module == obj.module else f"{e.module}.{e.qualname}" for e in classes[1:]]
        nor = f", nor do its bases ({', '.join(bases)})" if bases else ""
        why = obj.cls.unbound.get(attr)
        note = f" ({_q(attr)} is {why})" if why else ""
        return _Problem(
            codes.TARGET_ATTRIBUTE_MISSING,
            f"class {_q(owner)} defines no {_q(attr)}{nor}{note}{did_you_mean(attr, members) if not why else ''}",
        )

    def _member(self, obj: _Obj, attr: str, hops: int) -> _Result | None:
        """A member the class body itself binds (or that its module sets on it), or None."""
        assert obj.cls is not None
        bindings = obj.cls.members.get(attr)
        if bindings:
            return self._bindings(
                obj.module or "", attr, bindings, (*obj.scope, obj.cls), hops + 1, frozenset(), f"{obj.qualname}."
            )
        if attr in self._assigned_attributes(obj):
            return [_Obj(VALUE, obj.module, f"{obj.qualname}.{attr}")]
        return None

    def _mro(self, obj: _Obj, hops: int) -> list[_Obj | _Problem]:
        """The class's method resolution order (C3), bases that cannot be read standing in as problems."""
        key = id(obj.cls)
        known = self._mros.get(key)
        if known is not None:
            return known
        self._mros[key] = [obj, _Problem(codes.TARGET_UNVERIFIABLE, f"class {_q(obj.qualname)} is its own base")]
        assert obj.cls is not None
        sequences: list[list[_Obj | _Problem]] = []
        direct: list[_Obj | _Problem] = []
        for base in obj.cls.bases:
            resolved = self._base(obj, base, hops + 1)
            direct.append(resolved)
            if isinstance(resolved, _Obj) and resolved.kind == CLASS:
                sequences.append(self._mro(resolved, hops + 1))
            elif isinstance(resolved, _Obj):  # a builtin type
                sequences.append([_Obj("builtin", "builtins", t.__qualname__, value=t) for t in resolved.value.__mro__])
            else:
                sequences.append([resolved])
        if not obj.cls.bases:
            direct = [_OBJECT]
            sequences = [[_OBJECT]]
        merged = _c3([obj], [*sequences, direct])
        self._mros[key] = merged
        return merged

    def _base(self, obj: _Obj, base: Expr, hops: int) -> _Obj | _Problem:
        """A base class expression, resolved where the class statement runs."""
        name = f"class {_q(obj.qualname)}"
        if isinstance(base, str):
            return _Problem(codes.TARGET_UNVERIFIABLE, f"a base of {name} is {base}; {_UNVERIFIABLE}")
        spelled = ".".join(base)
        if hops > MAX_HOPS or obj.module is None:
            return _Problem(codes.TARGET_UNVERIFIABLE, f"base {_q(spelled)} of {name} is out of reach; {_UNVERIFIABLE}")
        first = self._name_in_scope(obj.module, base[0], obj.scope, hops)
        if first is None:
            value = builtins.__dict__.get(base[0])
            if isinstance(value, type) and len(base) == 1:
                return _Obj("builtin", "builtins", base[0], value=value)
            return _Problem(
                codes.TARGET_UNVERIFIABLE,
                f"base {_q(spelled)} of {name} is not bound in {_q(obj.module)}; {_UNVERIFIABLE}",
            )
        current: _Result = first
        for depth, attr in enumerate(base[1:], start=1):
            if isinstance(current, _Problem):
                break
            step: list[_Obj] = []
            problem: _Problem | None = None
            for item in current:
                result = self._attribute(item, attr, ".".join(base[:depth]), hops + 1)
                if isinstance(result, _Problem):
                    problem = problem or result
                else:
                    step.extend(result)
            current = step if step else (problem or _Problem(codes.TARGET_UNVERIFIABLE, _UNVERIFIABLE))
        if isinstance(current, _Problem):
            return _Problem(
                codes.TARGET_UNVERIFIABLE,
                f"base {_q(spelled)} of {name} cannot be read: {_reason(current.text)}; {_UNVERIFIABLE}",
            )
        classes = [
            item for item in current if item.kind == CLASS or (item.kind == "builtin" and isinstance(item.value, type))
        ]
        if not classes:
            what = {DEF: "a function", VALUE: "a value", "module": "a module"}.get(current[0].kind, "not a class")
            return _Problem(
                codes.TARGET_UNVERIFIABLE,
                f"base {_q(spelled)} of {name} is {what} in the source, not a class; {_UNVERIFIABLE}",
            )
        return classes[0]

    def _name_in_scope(self, module: str, name: str, scope: tuple[ClassIndex, ...], hops: int) -> _Result | None:
        """A name as code in a class body (nested in `scope`) sees it: the enclosing class, then the module."""
        if scope:
            bindings = scope[-1].members.get(name)
            if bindings:
                return self._bindings(module, name, bindings, scope[:-1], hops + 1, frozenset())
        result = self._module_attribute(module, name, hops + 1, frozenset())
        if isinstance(result, _Problem) and result.code == codes.TARGET_ATTRIBUTE_MISSING:
            return None
        return result


_UNVERIFIABLE = "not verifiable statically"
_OBJECT = _Obj("builtin", "builtins", "object", value=object)


def _c3(head: list[_Obj | _Problem], sequences: list[list[_Obj | _Problem]]) -> list[_Obj | _Problem]:
    """C3 linearisation; where the bases are inconsistent (the class statement would fail), depth-first."""
    result = list(head)
    pending = [list(seq) for seq in sequences if seq]
    while pending:
        for seq in pending:
            candidate = seq[0]
            if not any(candidate in other[1:] for other in pending):
                break
        else:
            for seq in pending:
                for item in seq:
                    if item not in result:
                        result.append(item)
            return result
        result.append(candidate)
        pending = [[item for item in seq if item != candidate] for seq in pending]
        pending = [seq for seq in pending if seq]
    return result


def _through_import(found: list[_Obj], owners: list[_Obj], path: str, module: str, last: bool) -> _Problem | None:
    """KC305 where the path reaches a module that is not its owner module's own submodule: one bound by an
    import. The allow-list names modules; walking out of one through an import would escape it."""
    for obj in found:
        if obj.kind != "module" or obj.module is None:
            continue
        if any(o.kind == "module" and o.module and obj.module.startswith(o.module + ".") for o in owners):
            continue
        rule = (
            "a target may not name an imported module"
            if last
            else ("an attribute path may not walk through an imported module")
        )
        return _Problem(
            codes.TARGET_NOT_ALLOWED, f"{_q(path)} in {_q(module)} is the imported module {_q(obj.module)}; {rule}"
        )
    return None


def _opaque_class(cls: ClassIndex) -> str | None:
    """Why a class may have attributes its body does not show: a metaclass or decorator that may add them."""
    if cls.metaclass is not None:
        last = cls.metaclass[-1] if isinstance(cls.metaclass, tuple) else cls.metaclass
        if last not in PLAIN_METACLASSES:
            return f"whose metaclass {_q(_spell(cls.metaclass))} may add attributes"
    for decorator in cls.decorators:
        last = decorator[-1] if isinstance(decorator, tuple) else decorator
        if last not in PLAIN_DECORATORS:
            return f"which is decorated with {_q(_spell(decorator))}, which may add attributes or replace it"
    return None


def _spell(expr: Expr) -> str:
    return ".".join(expr) if isinstance(expr, tuple) else expr


def _pick(problems: Iterable[_Problem]) -> _Problem:
    """Of several ways a name fails, the one to report: one that may still work here (a warning) first."""
    listed = list(problems)
    warning = next((p for p in listed if p.is_warning), None)
    return warning or listed[-1]


def _unique(objs: Iterable[_Obj]) -> list[_Obj]:
    seen: list[_Obj] = []
    for obj in objs:
        if obj not in seen:
            seen.append(obj)
    return seen


def _reason(text: str) -> str:
    """A problem's text as the reason inside another message (which says 'not verifiable' once, at its end)."""
    return text.removesuffix(f"; {_UNVERIFIABLE}")


def _one_line(text: str) -> str:
    """No raw line breaks in a message."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


@functools.lru_cache(maxsize=256)
def nearest_installed(name: str, path: tuple[str, ...]) -> str:
    """' (did you mean 'x'?)' for the installed top-level module nearest to `name`, found on `path` (sys.path)
    without importing anything; remembered per name and path, since a catalog often names one missing
    package many times."""
    import pkgutil

    installed = {module.name for module in pkgutil.iter_modules(list(path))} | set(sys.builtin_module_names)
    return did_you_mean(name, sorted(installed))
