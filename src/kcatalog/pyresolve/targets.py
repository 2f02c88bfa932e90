"""Static checks of 'module:attr' targets: find the module, read its source, follow what it binds.

Nothing is imported. Each module is located (finder.py) and indexed (index.py) once per
TargetChecker; the checker then follows a target's attribute path through that index: re-exports
(`from m import n`, also relative and chained) to the module that defines the name, star imports into the
modules they import from (honouring a literal `__all__`), class members through the bases of the class
(C3 order, across modules), and a package's submodules. Where the chain leaves what the sources show
(a compiled module, a base that is a call, a metaclass or decorator that may add attributes, a
module-level `__getattr__`) the target is "not verifiable statically" (KC304, a warning), never an error.

An attribute path may not walk through, or end at, a module bound by an import (`import torch` then
`mod:torch.os.system`): KC305. It may walk into the module's own submodules (`pkg:sub.fn`).

This module walks a target's path; the parts it relies on: target_modules (each module read once, or why
not), target_bindings (a module's names: re-exports, star imports, submodules), target_classes (class
members through the bases) and target_problems (the problems and the diagnostics they become).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import codes
from ..errors import Diagnostic
from ..model import ModuleFingerprint
from .bindings import DEF
from .finder import memo
from .index_record import IndexStore
from .target_bindings import ModuleNames, Obj, unique
from .target_classes import Members
from .target_modules import ModuleReader
from .target_problems import Problem, diagnostic, pick, quote


@dataclass(frozen=True)
class Resolution:
    """What a target resolves to: its problem (None: it resolves), the module that defines the object it names,
    where the sources show it (None where they do not, or where several are possible), and that object's kind
    (DEF, CLASS, VALUE, 'module'; None where it may be of several). Where its resolution stopped short (a warning:
    not verifiable, unavailable), `imported_from` holds the modules the object was being followed into (`from os
    import system` in the target's module: 'os'), where it must come from if it exists."""

    problem: Diagnostic | None
    defining_module: str | None
    imported_from: tuple[str, ...] = ()
    kind: str | None = None

    @property
    def non_class(self) -> str | None:
        """'a function' or 'a module' where the sources show that the target names one and no class, else None:
        where a class is expected (a layer mapping's), what it names instead."""
        return {DEF: "a function", "module": "a module"}.get(self.kind or "")


class TargetChecker:
    """Checks targets against module sources; each module is located and indexed once.

    `indexes`: where the caller keeps module indexes between checks (index_record.py, content-addressed): a
    source indexed before is neither parsed nor syntax-checked again."""

    def __init__(self, indexes: IndexStore | None = None) -> None:
        self._reader = ModuleReader(indexes)
        self._members = Members(ModuleNames(self._reader))
        self._resolved: dict[str, Resolution] = {}

    def fingerprints(self) -> tuple[ModuleFingerprint, ...]:
        """Every module looked at so far (also looked for and not found) and what its checks depended on."""
        return self._reader.fingerprints()

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
        module = self._reader.module(module_name)
        if module.problem is not None:
            return Resolution(diagnostic(target, module.problem), None)
        attrs = attr_path.split(".")
        current = [Obj("module", module_name)]
        for depth, attr in enumerate(attrs):
            owner = ".".join(attrs[:depth])
            found: list[Obj] = []
            problems: list[Problem] = []
            for obj in current:
                result = self._members.attribute(obj, attr, owner, 0)
                if isinstance(result, Problem):
                    problems.append(result)
                else:
                    found.extend(result)
            if not found:
                problem = pick(problems)
                # What the path had reached (an object of another module: a re-exported class), then its imports.
                owners = tuple(dict.fromkeys(obj.module for obj in current if obj.module and obj.module != module_name))
                return Resolution(diagnostic(target, problem), None, (*owners, *problem.through))
            refused = _through_import(
                found, current, ".".join(attrs[: depth + 1]), module_name, depth == len(attrs) - 1
            )
            if refused is not None:
                return Resolution(diagnostic(target, refused), None)
            current = unique(found)
        modules = {obj.module for obj in current}
        kinds = {obj.kind for obj in current}
        return Resolution(
            None, modules.pop() if len(modules) == 1 else None, kind=kinds.pop() if len(kinds) == 1 else None
        )


def _through_import(found: list[Obj], owners: list[Obj], path: str, module: str, last: bool) -> Problem | None:
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
        return Problem(
            codes.TARGET_NOT_ALLOWED,
            f"{quote(path)} in {quote(module)} is the imported module {quote(obj.module)}; {rule}",
        )
    return None
