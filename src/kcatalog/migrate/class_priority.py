"""Backend orders a registry keeps on classes rather than on its specs: SGLang's fused ops (`BaseFusedOp`
subclasses) rank their backends by a class attribute `priority`, and their specs' targets are methods of that
class or of a module-level instance of it ('module:Owner.forward_jit').

The owner's `priority` is read from the live object where the registry's import has loaded its module, and
otherwise from the module's source, without importing it (such modules import Triton and the engine's runtime):
a literal tuple or list of the registry's backend enum members (`KernelBackend.JIT`) or names, or a module-level
name bound to one, in the class body or in a base's (a class of the same module, or one imported with
`from m import Cls`). What cannot be read so gives no order, and the conversion says that declaration order
decides.
"""

from __future__ import annotations

import ast
import enum
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..pyresolve import locate, parse

_MAX_HOPS = 16  # bases and re-exports followed for one owner
_ABSENT = ()  # the class (and every base) is read, and none sets `priority`


@dataclass(frozen=True)
class ClassOrder:
    """An op's backend order, best first, and where it was read: 'module:Owner.priority'."""

    order: tuple[str, ...]
    source: str


def enum_members(backends: Iterable[object]) -> dict[str, str]:
    """Member name -> value of every member of each backend enum seen (also members no spec uses yet)."""
    members: dict[str, str] = {}
    for backend in backends:
        if isinstance(backend, enum.Enum):
            members.update((member.name, str(member.value)) for member in type(backend))
    return members


def class_orders(
    targets: Iterable[tuple[str, str]], members: Mapping[str, str], names: Iterable[str]
) -> dict[str, ClassOrder]:
    """The order of each op (of the (op, target) pairs) whose target is 'module:Owner.member' with an Owner whose
    `priority` names only backends (`names`; `members` maps the backend enum's member names to their values)."""
    reader = _Reader(members, frozenset(names))
    found: dict[str, ClassOrder] = {}
    for op, target in targets:
        module, _, path = target.partition(":")
        owner, dot, member = path.partition(".")
        if op in found or not dot or "." in member:
            continue
        order = reader.priority(module, owner, 0)
        if order:
            found[op] = ClassOrder(order, f"{module}:{owner}.priority")
    return found


class _Reader:
    """Reads owners' `priority`, each module's source parsed once."""

    def __init__(self, members: Mapping[str, str], names: frozenset[str]) -> None:
        self._members = members
        self._names = names
        self._trees: dict[str, ast.Module | None] = {}
        self._packages: set[str] = set()  # the modules read that are packages (for relative imports)

    def priority(self, module: str, owner: str, hops: int) -> tuple[str, ...] | None:
        """The owner's order; _ABSENT where nothing sets one; None where the sources do not tell."""
        if hops > _MAX_HOPS:
            return None
        live = sys.modules.get(module)
        if live is not None:  # imported by the registry already: the value the engine itself ranks by
            try:
                obj = getattr(live, owner, None)
                return None if obj is None else self._live(getattr(obj, "priority", None))
            except Exception:  # a module's or class's own __getattr__ may raise anything
                return None
        tree = self._tree(module)
        if tree is None:
            return None
        cls = self._class(tree, module, owner, hops)
        if not isinstance(cls, ast.ClassDef):
            return cls  # None, or an order read through an import
        value = _assigned(cls.body, "priority")
        if value is not None:
            return self._literal(tree, value)
        for base in cls.bases:
            order = self._named(tree, module, base, hops + 1)
            if order != _ABSENT:
                return order  # the first base that tells, in MRO order for single inheritance
        return _ABSENT

    def _class(self, tree: ast.Module, module: str, name: str, hops: int) -> ast.ClassDef | tuple[str, ...] | None:
        """The class a top-level name is (a class statement, or an instance made by calling one): its statement,
        or, for one imported from elsewhere, its order."""
        binding = _binding(tree, name)
        if isinstance(binding, ast.ClassDef):
            return binding
        if isinstance(binding, ast.Call):
            return self._named_class(tree, module, binding.func, hops)
        if isinstance(binding, ast.ImportFrom):
            return self._imported(module, binding, name, hops)
        return None

    def _named_class(
        self, tree: ast.Module, module: str, node: ast.expr, hops: int
    ) -> ast.ClassDef | tuple[str, ...] | None:
        if not isinstance(node, ast.Name):
            return None
        binding = _binding(tree, node.id)
        if isinstance(binding, ast.ClassDef):
            return binding
        if isinstance(binding, ast.ImportFrom):
            return self._imported(module, binding, node.id, hops)
        return None

    def _named(self, tree: ast.Module, module: str, node: ast.expr, hops: int) -> tuple[str, ...] | None:
        """The order of a base class named in `module`."""
        cls = self._named_class(tree, module, node, hops)
        if isinstance(cls, ast.ClassDef):
            assert isinstance(node, ast.Name)
            return self.priority(module, node.id, hops)
        return cls

    def _imported(self, module: str, statement: ast.ImportFrom, name: str, hops: int) -> tuple[str, ...] | None:
        """The order of `name` as `from m import ...` binds it: m's own name's."""
        original = next(alias.name for alias in statement.names if (alias.asname or alias.name) == name)
        return self.priority(_absolute(module, module in self._packages, statement), original, hops + 1)

    def _tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            self._trees[module] = self._read(module)
        return self._trees[module]

    def _read(self, module: str) -> ast.Module | None:
        """The module's parsed source, located without importing anything; None where there is none to read."""
        location = locate(module).location
        origin = location.origin if location is not None and location.archive is None else None
        if origin is None or not origin.endswith(".py"):
            return None
        try:
            with open(origin, "rb") as file:
                tree = parse(file.read(), origin)
        except (OSError, SyntaxError, ValueError):
            return None
        if location is not None and location.search is not None:
            self._packages.add(module)
        return tree

    def _live(self, value: object) -> tuple[str, ...] | None:
        if value is None:
            return _ABSENT
        if not isinstance(value, (tuple, list)):
            return None
        names = [str(item.value) if isinstance(item, enum.Enum) else item for item in value]
        return tuple(names) if all(isinstance(n, str) and n in self._names for n in names) else None

    def _literal(self, tree: ast.Module, node: ast.expr, depth: int = 0) -> tuple[str, ...] | None:
        """A tuple or list of backend names (enum members or text), or a module-level name bound to one."""
        if isinstance(node, ast.Name) and depth < 2:
            value = _assigned(tree.body, node.id)
            return None if value is None else self._literal(tree, value, depth + 1)
        if not isinstance(node, (ast.Tuple, ast.List)):
            return None
        names = []
        for item in node.elts:
            if isinstance(item, ast.Attribute) and item.attr in self._members:
                names.append(self._members[item.attr])
            elif isinstance(item, ast.Constant) and item.value in self._names:
                names.append(item.value)
            else:
                return None
        return tuple(names)


def _binding(tree: ast.Module, name: str) -> ast.ClassDef | ast.Call | ast.ImportFrom | None:
    """How the module's top level last binds `name`: a class statement, a call, a `from` import (else None)."""
    found: ast.ClassDef | ast.Call | ast.ImportFrom | None = None
    for statement in tree.body:
        if isinstance(statement, ast.ClassDef) and statement.name == name:
            found = statement
        elif isinstance(statement, ast.ImportFrom) and any((a.asname or a.name) == name for a in statement.names):
            found = statement
        else:
            value = _value_of(statement, name)
            if value is not None:
                found = value if isinstance(value, ast.Call) else None
    return found


def _assigned(body: list[ast.stmt], name: str) -> ast.expr | None:
    """The value the last plain assignment to `name` in a body gives it."""
    found = None
    for statement in body:
        value = _value_of(statement, name)
        if value is not None:
            found = value
    return found


def _value_of(statement: ast.stmt, name: str) -> ast.expr | None:
    if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in statement.targets):
        return statement.value
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.target.id == name:
        return statement.value
    return None


def _absolute(module: str, is_package: bool, statement: ast.ImportFrom) -> str:
    """The module a `from` import in `module` names, a relative one resolved against the package it is in (or is)."""
    if not statement.level:
        return statement.module or ""
    parts = module.split(".")
    package = parts[: len(parts) + is_package - statement.level]
    return ".".join([*package, *([statement.module] if statement.module else [])])
