"""Branch conditions decided without running them: TYPE_CHECKING, sys.version_info, constants (see index.py)."""

from __future__ import annotations

import ast
import operator
import sys


def decide(test: ast.expr) -> bool | None:
    """The value of a branch condition at run time, where it can be known here; None where it cannot."""
    if isinstance(test, ast.Constant):
        return bool(test.value) if isinstance(test.value, (bool, int, str, bytes, type(None))) else None
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        return False
    if isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        value = decide(test.operand)
        return None if value is None else not value
    if isinstance(test, ast.BoolOp):
        values = [decide(v) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in values else (True if all(v is True for v in values) else None)
        return True if True in values else (False if all(v is False for v in values) else None)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        return _version_compare(test.left, test.ops[0], test.comparators[0])
    return None


def _version_compare(left: ast.expr, op: ast.cmpop, right: ast.expr) -> bool | None:
    """`sys.version_info >= (3, 10)` and the like (either side; indexed, sliced, .major/.minor)."""
    swapped = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}
    version = _version_value(left)
    other = right
    if version is None:
        version, other = _version_value(right), left
        if version is None or type(op) not in swapped:
            return None
        op = swapped[type(op)]()
    try:
        constant = ast.literal_eval(other)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(version, tuple) != isinstance(constant, tuple):
        return None
    compare = {
        ast.Lt: operator.lt,
        ast.Gt: operator.gt,
        ast.LtE: operator.le,
        ast.GtE: operator.ge,
        ast.Eq: operator.eq,
        ast.NotEq: operator.ne,
    }.get(type(op))
    if compare is None:
        return None
    try:
        return bool(compare(version, constant))
    except TypeError:
        return None


def _version_value(node: ast.expr) -> tuple[int, ...] | int | None:
    info = tuple(sys.version_info[:3])
    if _is_version_info(node):
        return info
    if isinstance(node, ast.Attribute) and _is_version_info(node.value) and node.attr in ("major", "minor", "micro"):
        return info[("major", "minor", "micro").index(node.attr)]
    if isinstance(node, ast.Subscript) and _is_version_info(node.value):
        index = node.slice
        if isinstance(index, ast.Constant) and isinstance(index.value, int) and 0 <= index.value < 3:
            return info[index.value]
        if isinstance(index, ast.Slice) and index.lower is None and index.step is None:
            upper = index.upper
            if isinstance(upper, ast.Constant) and isinstance(upper.value, int) and 0 < upper.value <= 3:
                return info[: upper.value]
    return None


def _is_version_info(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "version_info"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def why_dead(test: ast.expr, when_true: bool) -> str:
    """Why a skipped branch never runs, for the message about a name bound only there."""
    text = ast.unparse(test)
    if len(text) > 60:
        text = text[:57] + "..."
    if "TYPE_CHECKING" in text:
        return (
            f"bound only under 'if {text}:', which is false at run time"
            if when_true
            else (f"bound only in the else branch of 'if {text}:', which never runs")
        )
    version = ".".join(map(str, sys.version_info[:2]))
    branch = f"'if {text}:'" if when_true else f"the else branch of 'if {text}:'"
    return f"bound only under {branch}, which does not run on Python {version}"
