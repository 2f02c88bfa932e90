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
- `x = C(...)`, C a dotted name, binds what calling C returns: an instance, where C is a class (its members are
  followed only for an attribute of x, target_classes.py).
- globals() and `sys.modules[__name__]` may bind names no statement shows (a missing name is then not verifiable),
  except where globals() is only read, or rebinds a name the same code tested to be there.
"""

from __future__ import annotations

import ast
import re
from types import MappingProxyType

from .bindings import (
    CLASS,
    DEF,
    FROM,
    INSTANCE,
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
    "INSTANCE",
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
        dynamic=_dynamic(source, tree, shadowed="globals" in names),
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


def _dynamic(source: bytes, tree: ast.Module, shadowed: bool) -> str | None:
    """Why the module may bind names no statement shows (None: it cannot).

    A use of globals() the tree shows to only read names, or to rebind a name it has just found there
    (`if name in globals(): globals()[name] = wrap(globals()[name])`), binds no new name. Every other use does
    or may: one the tree does not show (in a function body left out of it, a string or a comment), one that
    passes globals() on, a module that binds `globals` itself."""
    if b"globals()" not in source and b"sys.modules" not in source:
        return None
    harmless = set() if shadowed else _rebinding_only(tree)
    for match in _DYNAMIC.finditer(source):
        start = match.start()
        line = source.count(b"\n", 0, start) + 1
        if not match.group().startswith(b"globals"):
            return f"changes itself through sys.modules (line {line})"
        if (line, start - source.rfind(b"\n", 0, start) - 1) not in harmless:  # ast columns count UTF-8 bytes
            return f"uses globals() (line {line})"
    return None


# Methods of the globals() dict that only read it.
_READING = frozenset({"get", "keys", "values", "items", "copy", "__contains__", "__getitem__"})


def _rebinding_only(tree: ast.Module) -> set[tuple[int, int]]:
    """Where the tree calls globals() (line, column) only to read it, or to rebind a name it tested is there.

    Defs are not looked into: the tree may have been parsed without their bodies (skeleton.py), and the index
    must not depend on whether it was."""
    parents: dict[ast.AST, ast.AST] = {}
    calls: list[ast.Call] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if _is_globals(node):
            calls.append(node)  # type: ignore[arg-type]
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                parents[child] = node
                pending.append(child)
    harmless = set()
    for call in calls:
        parent = parents.get(call)
        if isinstance(parent, ast.Subscript) and parent.value is call:
            safe = isinstance(parent.ctx, ast.Load) or (isinstance(parent.ctx, ast.Store) and _guarded(parent, parents))
        elif isinstance(parent, ast.Compare):  # `name in globals()`
            safe = any(
                isinstance(op, (ast.In, ast.NotIn)) and right is call
                for op, right in zip(parent.ops, parent.comparators)
            )
        elif isinstance(parent, ast.Attribute) and parent.attr in _READING:
            grandparent = parents.get(parent)
            safe = isinstance(grandparent, ast.Call) and grandparent.func is parent
        else:
            safe = False
        if safe:
            harmless.add((call.lineno, call.col_offset))
    return harmless


def _guarded(store: ast.Subscript, parents: dict[ast.AST, ast.AST]) -> bool:
    """`globals()[name] = ...` (or `+=`) in the body of an `if name in globals():` that never rebinds name."""
    key = store.slice
    statement = parents.get(store)
    if not isinstance(key, ast.Name) or not isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        return False
    child: ast.AST = statement
    node = parents.get(child)
    while node is not None:
        if isinstance(node, ast.If) and any(child is stmt for stmt in node.body) and _tests_in(node.test, key.id):
            return not _rebinds(node.body, key.id)
        child, node = node, parents.get(node)
    return False


def _rebinds(body: list[ast.stmt], name: str) -> bool:
    """Whether these statements may bind or unbind `name` (defs' bodies are not looked into: see above)."""
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
            if not isinstance(node, ast.ClassDef):
                continue
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (alias.asname or alias.name.partition(".")[0]) == name for alias in node.names
        ):
            return True
        if getattr(node, "name", None) == name or getattr(node, "rest", None) == name:  # except ... as, match
            return True
        pending.extend(ast.iter_child_nodes(node))
    return False


def _tests_in(test: ast.expr, name: str) -> bool:
    """Whether the condition holds only where `name in globals()` does."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_tests_in(value, name) for value in test.values)
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.In)
        and isinstance(test.left, ast.Name)
        and test.left.id == name
        and _is_globals(test.comparators[0])
    )


def _is_globals(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "globals"
        and not node.args
        and not node.keywords
    )
