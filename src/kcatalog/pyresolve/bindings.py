"""The index's types: how a name may be bound, and what a module or a class body binds (see index.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# How a name is bound.
DEF = "def"
CLASS = "class"
VALUE = "value"
MODULE = "module"  # `import m` / `import m as n`: the name is the module m
FROM = "from"  # `from m import n`: whatever m's n is
INSTANCE = "instance"  # `x = C(...)`: what calling the dotted name C returns (an instance, where C is a class)

# A dotted name as written (('nn', 'Module') for nn.Module), or why an expression is not one.
Expr = tuple[str, ...] | str

# Metaclasses and class decorators known to add no non-dunder attributes a target could name.
PLAIN_METACLASSES = frozenset({"type", "ABCMeta", "EnumMeta", "EnumType", "_ProtocolMeta"})
PLAIN_DECORATORS = frozenset({"dataclass", "final", "total_ordering", "runtime_checkable", "unique", "verify"})


@dataclass(frozen=True, slots=True)
class Binding:
    """One way a name may be bound."""

    kind: str  # DEF, CLASS, VALUE, MODULE, FROM or INSTANCE
    line: int  # where the name is bound (0 for defs and values: not kept)
    module: str = ""  # MODULE: the module; FROM: the module imported from (absolute; '' if beyond the top)
    name: str = ""  # FROM: the name imported
    cls: ClassIndex | None = None  # CLASS
    called: tuple[str, ...] = ()  # INSTANCE: the dotted name called, as written (('nn', 'Linear'))


@dataclass(frozen=True, slots=True, eq=False)  # compared by identity: one per class statement
class ClassIndex:
    """What a class body binds, and what it is built from."""

    name: str
    line: int
    members: Mapping[str, tuple[Binding, ...]]
    bases: tuple[Expr, ...]
    metaclass: Expr | None
    decorators: tuple[Expr, ...]
    unbound: Mapping[str, str]  # names seen but not bound at the end of the body: why


@dataclass(frozen=True, slots=True)
class Star:
    """A star import that may run: `from module import *`."""

    module: str  # absolute; '' if the relative import goes beyond the top-level package
    line: int
    certain: bool  # in straight-line code at the top level: it runs whenever the module is imported


@dataclass(frozen=True, slots=True)
class ModuleIndex:
    """What a module's source binds at its top level."""

    names: Mapping[str, tuple[Binding, ...]]
    stars: tuple[Star, ...]
    all: tuple[str, ...] | None  # a literal __all__ (after literal += / extend / append)
    all_dynamic: bool  # __all__ is bound to something that is not a literal list or tuple
    getattr: bool  # defines a module-level __getattr__ (PEP 562)
    unbound: Mapping[str, str]  # names seen but not bound at the end: why ("bound only under ...")
    attributes: Mapping[str, frozenset[str]]  # `name.attr = ...` at the top level: attributes set on names
    global_names: Mapping[str, int]  # names a function declares `global` (it may bind them): its line
    dynamic: str | None  # why the module may bind names no statement shows (globals(), sys.modules[__name__])
