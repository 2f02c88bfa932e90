"""Op signatures ('(x: Tensor, eps: float = 1e-6) -> Tensor') read as Python parameter lists."""

from __future__ import annotations

import ast
import functools

from ..read.python import parse


@functools.lru_cache(maxsize=4096)  # catalogs repeat a handful of signatures across many ops
def parse_signature(signature: str) -> ast.arguments:
    """The parsed parameters of an op signature; ValueError when it is not valid Python."""
    try:
        tree = parse(f"def _{signature}: pass")
    except SyntaxError as exc:
        raise ValueError(f"signature '{signature}' is not valid Python: {exc.msg}") from None
    except (RecursionError, MemoryError):  # CPython's parser gives up on deeply nested expressions
        shown = signature if len(signature) <= 60 else signature[:57] + "..."
        raise ValueError(f"signature '{shown}' is too deeply nested to parse") from None
    function = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(function, ast.FunctionDef):  # e.g. '(x) -> T: pass\rimport os\rdef f()' smuggles in more
        raise ValueError(f"signature {signature!r} is not one parameter list")
    try:  # what the op handle's generated code needs: compiling finds duplicate names (also after
        compile(tree, "<signature>", "exec")  # NFKC normalisation) and names such as __debug__; it runs nothing
    except SyntaxError as exc:
        raise ValueError(f"signature {signature!r} is not valid Python: {exc.msg}") from None
    return function.args


def signature_arguments(signature: str) -> tuple[tuple[str, bool], ...]:
    """(name, required) for each parameter of an op signature; ValueError when it is not valid Python."""
    args = parse_signature(signature)
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    result = [(arg.arg, index < first_default) for index, arg in enumerate(positional)]
    result += [(arg.arg, default is None) for arg, default in zip(args.kwonlyargs, args.kw_defaults)]
    return tuple(result)


def signature_keyword_only(signature: str) -> frozenset[str]:
    """Names of the keyword-only parameters of an op signature (those after '*')."""
    return frozenset(arg.arg for arg in parse_signature(signature).kwonlyargs)


def signature_params(signature: str) -> tuple[str, ...]:
    """Parameter names of an op signature; ValueError when it is not a valid Python signature."""
    return tuple(name for name, _ in signature_arguments(signature))


def signature_positional(signature: str) -> tuple[str, ...]:
    """Names of the parameters of an op signature that can be given by position."""
    args = parse_signature(signature)
    return tuple(arg.arg for arg in (*args.posonlyargs, *args.args))
