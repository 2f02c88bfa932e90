"""A small index of what a module's source binds at its top level and in its class bodies, built from its
AST, which is dropped afterwards.

Module-level code is followed statement by statement, as it runs at import. Rules (the tests in
tests/targets/ hold them):

- A branch that can be decided here is taken or skipped as it would be: `TYPE_CHECKING` (also
  `typing.TYPE_CHECKING`, any `X.TYPE_CHECKING`) is false; `sys.version_info` comparisons are decided for the
  running interpreter; constants are what they are. Names bound only in a skipped branch are not bound
  (the index remembers why, for the message).
- Any other branch (`sys.platform`, `os.name`, environment variables, `try`/`except`, loops) may or may not
  run: a name bound in any branch counts as bound, with every way it may be bound (the alternatives).
- Straight-line code rebinds: the last binding wins, and `del name` unbinds.
- Bindings are defs, classes (with their own index), assignments and every other name-binding form (`for`
  targets, `with ... as`, walrus, unpacking, `match` captures), `import m` (the module) and
  `from m import n` (a re-export, followed by the checker); `from m import *` is kept as a star import for
  the checker to follow; an annotation without a value (`x: int`) binds nothing.
"""

from __future__ import annotations

import ast
import re
from types import MappingProxyType

from .bindings import (
    CLASS,
    DEF,
    FROM,
    MODULE,
    PLAIN_DECORATORS,
    PLAIN_METACLASSES,
    VALUE,
    Binding,
    ClassIndex,
    Expr,
    ModuleIndex,
    Star,
)
from .body_walker import Walker, dotted
from .branches import decide

__all__ = [
    "CLASS",
    "DEF",
    "FROM",
    "MODULE",
    "PLAIN_DECORATORS",
    "PLAIN_METACLASSES",
    "VALUE",
    "Binding",
    "ClassIndex",
    "Expr",
    "ModuleIndex",
    "Star",
    "decide",
    "dotted",
    "index_module",
]


def index_module(tree: ast.Module, name: str, is_package: bool, source: bytes = b"") -> ModuleIndex:
    """The index of a parsed module named `name` (a package's __init__ when `is_package`)."""
    package = name if is_package else name.rpartition(".")[0]
    walker = Walker(package, top=True, walrus_seen=b":=" in source or not source)
    state = walker.block(tree.body, {}, certain=True)
    names = {key: value for key, value in state.items()}
    return ModuleIndex(
        names=MappingProxyType(names),
        stars=tuple(walker.stars),
        all=tuple(walker.all) if walker.all is not None and not walker.all_dynamic else None,
        all_dynamic=walker.all_dynamic,
        getattr="__getattr__" in names,
        unbound=MappingProxyType({k: v for k, v in walker.unbound.items() if k not in names}),
        attributes=MappingProxyType({k: frozenset(v) for k, v in walker.attributes.items()}),
        global_names=MappingProxyType(_global_names(source)),
        dynamic=_dynamic(source),
    )


# Read from the text, so that they are seen also where function bodies were left out of the tree
# (skeleton.py). A match in a string or comment only makes a missing name "not verifiable".
_GLOBAL = re.compile(rb"^[ \t]+global[ \t]+(\w+(?:[ \t]*,[ \t]*\w+)*)[ \t]*(?:#[^\n]*)?\r?$", re.MULTILINE)
_DYNAMIC = re.compile(rb"\bglobals\(\)|\bsys\.modules\[__name__\]|\bsetattr\(\s*sys\.modules\b")


def _global_names(source: bytes) -> dict[str, int]:
    """Names a `global` statement declares (a function may bind them at the top level), with its line."""
    if b"global" not in source:
        return {}
    names: dict[str, int] = {}
    for match in _GLOBAL.finditer(source):
        line = source.count(b"\n", 0, match.start()) + 1
        for name in match.group(1).split(b","):
            names.setdefault(name.strip().decode("ascii", "replace"), line)
    return names


def _dynamic(source: bytes) -> str | None:
    """Why the module may bind names no statement shows."""
    if b"globals()" not in source and b"sys.modules" not in source:
        return None
    match = _DYNAMIC.search(source)
    if match is None:
        return None
    line = source.count(b"\n", 0, match.start()) + 1
    what = "uses globals()" if match.group().startswith(b"globals") else "changes itself through sys.modules"
    return f"{what} (line {line})"
