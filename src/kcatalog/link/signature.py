"""Op signatures ('(x: Tensor, eps: float = 1e-6) -> Tensor') read as Python parameter lists."""

from __future__ import annotations

import ast
import functools

from ..model import Dispatch, Parameters
from ..pyresolve import parse

# How deeply a signature or size expression may nest, as parsed (`a.b.c` and `1+2+3` are 3 levels): real ones nest
# a few. The parser takes thousands, which compile(), ast.literal_eval and the walks here cannot follow: they recurse,
# and would fail at a depth that depends on the caller's stack.
MAX_NESTING = 100


def nesting(tree: ast.AST) -> int:
    """How many levels deep the syntax tree goes, counted without recursing."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


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
    if nesting(tree) > MAX_NESTING + 2:  # the module and the def around the parameters
        shown = signature if len(signature) <= 60 else signature[:57] + "..."
        raise ValueError(f"signature '{shown}' is nested more than {MAX_NESTING} levels deep")
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


def signature_params(signature: str) -> tuple[str, ...]:
    """Parameter names of an op signature; ValueError when it is not a valid Python signature."""
    return tuple(name for name, _ in signature_arguments(signature))


def signature_positional(signature: str) -> tuple[str, ...]:
    """Names of the parameters of an op signature that can be given by position."""
    args = parse_signature(signature)
    return tuple(arg.arg for arg in (*args.posonlyargs, *args.args))


@functools.lru_cache(maxsize=4096)  # ops of one signature share one value: the load cache stores it once
def read_parameters(signature: str) -> Parameters:
    """The op's parameter list as the model keeps it, read once at link time; ValueError when it is not valid."""
    args = parse_signature(signature)
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    declared: list[tuple[ast.arg, ast.expr | None]] = [
        (arg, args.defaults[i - first_default] if i >= first_default else None) for i, arg in enumerate(positional)
    ]
    declared += list(zip(args.kwonlyargs, args.kw_defaults))
    defaults: list[tuple[str, str]] = []
    exact = args.vararg is None and args.kwarg is None
    for arg, default in declared:
        if default is None:
            continue
        try:
            ast.literal_eval(default)
        except (ValueError, TypeError):  # not a literal, or an unhashable key ({[1]: 2}): forwarded as given
            exact = False
            continue
        defaults.append((arg.arg, ast.unparse(default)))
    return Parameters(
        positional=tuple(arg.arg for arg in positional),
        keyword_only=tuple(arg.arg for arg in args.kwonlyargs),
        required=tuple(arg.arg for arg, default in declared if default is None),
        defaults=tuple(defaults),
        exact=exact,
    )


@functools.lru_cache(maxsize=4096)  # likewise shared
def dispatch_of(parameters: Parameters | None, dispatch_arg: str | int | None) -> Dispatch:
    """The argument an op dispatches on: `dispatch_arg` (a name, or a position), else the first parameter; for an
    op without a signature, the declared position (default 0) or keyword. Linking has checked it exists."""
    if parameters is None:
        if isinstance(dispatch_arg, str):
            return Dispatch(dispatch_arg, None)
        return Dispatch("", dispatch_arg or 0)
    positional = parameters.positional
    if isinstance(dispatch_arg, int):
        name = positional[dispatch_arg] if dispatch_arg < len(positional) else ""
    else:
        name = dispatch_arg or (parameters.names[0] if parameters.names else "")
    return Dispatch(name, positional.index(name) if name in positional else None)
