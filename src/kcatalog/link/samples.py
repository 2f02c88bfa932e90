"""Declared samples checked at link time: size expressions and their fit with the op's signature."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import Location, did_you_mean
from ..pyresolve import parse_expression
from ..validate.schema import SamplesDecl, TensorArgDecl
from .signature import MAX_NESTING, nesting, signature_arguments

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
}


def expression_names(expr: object) -> set[str]:
    """Size names an expression uses; ValueError when it is not plain arithmetic on names and numbers."""
    if not isinstance(expr, str):
        return set()
    text = expr[1:] if expr.startswith("$") else expr
    try:
        tree = parse_expression(text)
    except SyntaxError:
        raise ValueError(f"'{expr}' is not an arithmetic expression") from None
    except (RecursionError, MemoryError):  # CPython's parser gives up on deeply nested expressions
        raise ValueError(f"'{expr[:40]}...' is too deeply nested to parse") from None
    if nesting(tree) > MAX_NESTING:  # evaluating it recurses: refuse it here, where it is located
        raise ValueError(f"'{expr[:40]}...' is nested more than {MAX_NESTING} levels deep")
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.Constant, ast.Load, *_BINARY)):
            raise ValueError(f"'{expr}' uses {type(node).__name__}; only + - * / // and unary - on names and numbers")
    return names


def evaluate(expr: object, env: Mapping[str, Any]) -> Any:
    """The value of a size expression ('2*H', 'T', 4096) with the sizes in `env`."""
    if not isinstance(expr, str):
        return expr
    return _eval(parse_expression(expr.removeprefix("$")).body, env)


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env)
    raise ValueError(f"unsupported expression node {type(node).__name__}")


def check_samples(
    info_id: str,
    signature: str,
    mutates: tuple[str, ...],
    samples: SamplesDecl,
    where: Callable[[tuple[str, ...]], Location],
    diagnostics: Diagnostics,
) -> None:
    """Add each static problem of an op's samples, located by `where` from its path inside `samples`; ValueError
    (and nothing added) when the signature does not parse."""
    arguments = dict(signature_arguments(signature))
    for name in samples.args:
        if name not in arguments:
            diagnostics.error(
                codes.SAMPLE_ARGUMENTS,
                (
                    f"samples of op '{info_id}' give '{name}', not a parameter"
                    f"{did_you_mean(name, arguments)}; parameters: {', '.join(arguments)}"
                ),
                where(("args", name)),
            )
    for name, required in arguments.items():
        if required and name not in samples.args:
            diagnostics.error(
                codes.SAMPLE_ARGUMENTS,
                f"samples of op '{info_id}' give no value for required parameter '{name}'",
                where(("args",)),
            )
    defined = set(samples.sizes)
    for section in ("decode", "prefill"):
        for name in getattr(samples, section):
            if name not in defined:
                diagnostics.error(
                    codes.SAMPLE_SIZE,
                    f"samples of op '{info_id}': {section} sets size '{name}', which 'sizes' does not "
                    f"define ({', '.join(sorted(defined)) or 'none'})",
                    where((section, name)),
                )
    for arg, value in samples.args.items():
        exprs = [*value.shape, *value.range] if isinstance(value, TensorArgDecl) else [value]
        for expr in exprs:
            if not isinstance(expr, str) or (not isinstance(value, TensorArgDecl) and not expr.startswith("$")):
                continue  # a plain string argument, e.g. approximate: tanh
            try:
                unknown = expression_names(expr) - defined
            except ValueError as exc:
                diagnostics.error(
                    codes.SAMPLE_SIZE, f"samples of op '{info_id}', argument '{arg}': {exc}", where(("args", arg))
                )
                continue
            if unknown:
                diagnostics.error(
                    codes.SAMPLE_SIZE,
                    f"samples of op '{info_id}', argument '{arg}': unknown size "
                    f"{', '.join(sorted(unknown))} (sizes: {', '.join(sorted(defined)) or 'none'})",
                    where(("args", arg)),
                )
    outputs = ["return", *mutates]
    for selector in samples.compare:
        for part in selector.split("*"):
            base, _, index = part.partition(".")
            if base not in outputs or (index and (base != "return" or not index.isdigit())):
                diagnostics.error(
                    codes.SAMPLE_COMPARE,
                    f"samples of op '{info_id}' compare '{part}', not an output; outputs: "
                    f"{', '.join(outputs)} (and return.N for tuples)",
                    where(("compare",)),
                )
