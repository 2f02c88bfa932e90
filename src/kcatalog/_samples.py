"""Declared samples: size expressions, their static checks, and building real inputs from them."""

from __future__ import annotations

import ast
import itertools
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._pyparse import parse
from ._signature import signature_arguments, signature_keyword_only
from .errors import did_you_mean
from .schema import Samples, TensorArg

if TYPE_CHECKING:
    import torch

    from ._catalog import OpInfo

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
}

# Tolerances used where an op declares none for a dtype: relative error, as for the shipped ops.
DEFAULT_TOLERANCE = {"float64": 1e-7, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}


def expression_names(expr: object) -> set[str]:
    """Size names an expression uses; ValueError when it is not plain arithmetic on names and numbers."""
    if not isinstance(expr, str):
        return set()
    text = expr[1:] if expr.startswith("$") else expr
    try:
        tree = parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"'{expr}' is not an arithmetic expression") from None
    except (RecursionError, MemoryError):  # CPython's parser gives up on deeply nested expressions
        raise ValueError(f"'{expr[:40]}...' is too deeply nested to parse") from None
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
    return _eval(parse(expr.removeprefix("$"), mode="eval").body, env)


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


def sample_problems(
    info_id: str, signature: str, mutates: tuple[str, ...], samples: Samples
) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(code, message, path inside `samples`) for each static problem of an op's samples."""
    arguments = dict(signature_arguments(signature))
    for name in samples.args:
        if name not in arguments:
            yield (
                "KC209",
                (
                    f"samples of op '{info_id}' give '{name}', not a parameter"
                    f"{did_you_mean(name, arguments)}; parameters: {', '.join(arguments)}"
                ),
                ("args", name),
            )
    for name, required in arguments.items():
        if required and name not in samples.args:
            yield "KC209", f"samples of op '{info_id}' give no value for required parameter '{name}'", ("args",)
    defined = set(samples.sizes)
    for section in ("decode", "prefill"):
        for name in getattr(samples, section):
            if name not in defined:
                yield (
                    "KC210",
                    f"samples of op '{info_id}': {section} sets size '{name}', which 'sizes' does not "
                    f"define ({', '.join(sorted(defined)) or 'none'})",
                    (section, name),
                )
    for arg, value in samples.args.items():
        exprs = [*value.shape, *value.range] if isinstance(value, TensorArg) else [value]
        for expr in exprs:
            if not isinstance(expr, str) or (not isinstance(value, TensorArg) and not expr.startswith("$")):
                continue  # a plain string argument, e.g. approximate: tanh
            try:
                unknown = expression_names(expr) - defined
            except ValueError as exc:
                yield "KC210", f"samples of op '{info_id}', argument '{arg}': {exc}", ("args", arg)
                continue
            if unknown:
                yield (
                    "KC210",
                    f"samples of op '{info_id}', argument '{arg}': unknown size "
                    f"{', '.join(sorted(unknown))} (sizes: {', '.join(sorted(defined)) or 'none'})",
                    ("args", arg),
                )
    outputs = ["return", *mutates]
    for selector in samples.compare:
        for part in selector.split("*"):
            base, _, index = part.partition(".")
            if base not in outputs or (index and (base != "return" or not index.isdigit())):
                yield (
                    "KC211",
                    f"samples of op '{info_id}' compare '{part}', not an output; outputs: "
                    f"{', '.join(outputs)} (and return.N for tuples)",
                    ("compare",),
                )


def size_sets(samples: Samples, shapes: str = "test") -> list[dict[str, Any]]:
    """Every combination of sizes: `sizes` alone for tests, overridden by `decode`/`prefill` for benchmarks."""
    sizes = dict(samples.sizes)
    if shapes in ("decode", "prefill"):
        sizes.update(getattr(samples, shapes))
    names = list(sizes)
    return [dict(zip(names, combo)) for combo in itertools.product(*(sizes[n] for n in names))]


def describe(env: Mapping[str, Any]) -> str:
    """'T=7 H=1000' for a size set."""
    return " ".join(f"{name}={value}" for name, value in env.items())


@dataclass
class Call:
    """Arguments for one call of an op, by name, in signature order."""

    kwargs: dict[str, Any]
    positional: int | None = None  # leading arguments passed by position (None: all); the rest by name

    def tensors(self) -> dict[str, torch.Tensor]:
        """Tensor arguments by name."""
        import torch

        return {name: value for name, value in self.kwargs.items() if isinstance(value, torch.Tensor)}

    def clone(self, upcast_from: str | None = None) -> Call:
        """A deep copy; with `upcast_from`, floating tensors of that dtype become float32 (float64 if float32)."""
        import torch

        def copy(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            if upcast_from is not None and str(value.dtype).removeprefix("torch.") == upcast_from:
                wide = torch.float64 if value.dtype == torch.float32 else torch.float32
                return value.to(wide)
            return value.clone()

        return Call({name: copy(value) for name, value in self.kwargs.items()}, self.positional)

    def invoke(self, fn: Any) -> Any:
        """Call `fn` with these arguments: by position in signature order up to the first parameter left
        out or keyword-only, by name from there on."""
        items = list(self.kwargs.items())
        count = len(items) if self.positional is None else self.positional
        return fn(*(value for _, value in items[:count]), **dict(items[count:]))


def build_call(info: OpInfo, samples: Samples, env: Mapping[str, Any], dtype: str, device: str, seed: int) -> Call:
    """Fresh random inputs for one size set: made on the CPU from `seed`, then moved to `device`."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    values: dict[str, Any] = {}
    positional: int | None = None
    keyword_only = signature_keyword_only(info.signature)
    for name, _ in signature_arguments(info.signature):
        if positional is None and (name not in samples.args or name in keyword_only):
            positional = len(values)  # from here on, arguments go by name
        if name not in samples.args:
            continue  # optional parameters left out use their defaults; the order stays the signature's
        spec = samples.args[name]
        if isinstance(spec, TensorArg):
            values[name] = _tensor(spec, env, dtype, generator).to(device)
        elif isinstance(spec, str) and spec.startswith("$"):
            values[name] = evaluate(spec, env)
        else:
            values[name] = spec
    return Call(values, positional)


def _tensor(spec: TensorArg, env: Mapping[str, Any], dtype: str, generator: torch.Generator) -> torch.Tensor:
    import torch

    shape = [int(evaluate(dim, env)) for dim in spec.shape]
    low, high = (evaluate(bound, env) for bound in spec.range)
    torch_dtype = getattr(torch, spec.dtype or dtype)
    if torch_dtype.is_floating_point:
        values = (torch.rand(shape, generator=generator, dtype=torch.float64) * (high - low) + low).to(torch_dtype)
        if torch_dtype.itemsize > 1:  # rounding may reach `high`; step back one ulp to keep [low, high)
            values = torch.where(values >= high, torch.nextafter(values, torch.full_like(values, low)), values)
        return values
    return torch.randint(int(low), int(high), shape, generator=generator, dtype=torch_dtype)


def output_part(part: str, result: Any, call: Call) -> Any:
    """What one part of a compare selector ('return', 'return.1', 'x') names, as returned or mutated."""
    base, _, index = part.partition(".")
    return call.kwargs[base] if base != "return" else (result[int(index)] if index else result)


def select_output(selector: str, result: Any, call: Call) -> torch.Tensor:
    """The tensor a compare selector names, as float64; products multiply their parts."""
    import torch

    product = None
    for part in selector.split("*"):
        value = output_part(part, result, call)
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"'{part}' is a {type(value).__name__}, not a tensor")
        value = value.detach().to(torch.float64)
        product = value if product is None else product * value
    assert product is not None  # selectors are non-empty: the schema pattern needs a character
    return product
