"""Building real inputs from an op's declared samples, for `kcatalog test` and `kcatalog bench`."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..link.samples import evaluate
from ..runtime.dispatch import dtype_name
from ..validate.schema import SamplesDecl, TensorArgDecl

if TYPE_CHECKING:
    import torch

    from ..model import OpInfo
    from ..registry.catalog import Catalog

# Tolerances used where an op declares none for a dtype: relative error, as for the shipped ops.
DEFAULT_TOLERANCE = {"float64": 1e-7, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}


def samples_of(info: OpInfo) -> SamplesDecl | None:
    """The op's declared samples, validated (they were checked at load, so this cannot fail); the typed model
    keeps them as JSON text, so that a cached catalog loads without pydantic."""
    return None if info.samples_json is None else _samples(info.samples_json)


@functools.lru_cache(maxsize=1024)  # a test or bench run asks for an op's samples once per case
def _samples(text: str) -> SamplesDecl:
    return SamplesDecl.model_validate_json(text)


def with_samples(
    catalog: Catalog, ops: Sequence[str], purpose: str, notes: list[str]
) -> Iterator[tuple[OpInfo, SamplesDecl]]:
    """Each op with the samples it declares; a note for each op that declares none (nothing to `purpose`)."""
    for op in ops:
        info = catalog.info(op)
        samples = samples_of(info)
        if samples is None:
            notes.append(f"{op}: no samples declared; nothing to {purpose}")
        else:
            yield info, samples


def size_sets(
    samples: SamplesDecl, shapes: str = "test", extra: Mapping[str, Sequence[Any]] | None = None
) -> list[dict[str, Any]]:
    """Every combination of sizes: `sizes` alone for tests, overridden by `decode`/`prefill` for benchmarks, then
    by `extra` (a measurement's own values, for the size names the samples declare)."""
    sizes = dict(samples.sizes)
    if shapes in ("decode", "prefill"):
        sizes.update(getattr(samples, shapes))
    sizes.update({name: tuple(values) for name, values in (extra or {}).items() if name in sizes})
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
            if upcast_from is not None and dtype_name(value.dtype) == upcast_from:
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


def build_call(info: OpInfo, samples: SamplesDecl, env: Mapping[str, Any], dtype: str, device: str, seed: int) -> Call:
    """Fresh random inputs for one size set: made on the CPU from `seed`, then moved to `device`."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    values: dict[str, Any] = {}
    positional: int | None = None
    parameters = info.parameters
    if parameters is None:  # the linker refuses samples without a signature (KC209)
        raise ValueError(f"op '{info.id}' declares samples but no signature")
    keyword_only = parameters.keyword_only
    for name in parameters.names:
        if positional is None and (name not in samples.args or name in keyword_only):
            positional = len(values)  # from here on, arguments go by name
        if name not in samples.args:
            continue  # optional parameters left out use their defaults; the order stays the signature's
        spec = samples.args[name]
        if isinstance(spec, TensorArgDecl):
            values[name] = _tensor(spec, env, dtype, generator).to(device)
        elif isinstance(spec, str) and spec.startswith("$"):
            values[name] = evaluate(spec, env)
        else:
            values[name] = spec
    return Call(values, positional)


def _tensor(spec: TensorArgDecl, env: Mapping[str, Any], dtype: str, generator: torch.Generator) -> torch.Tensor:
    import torch

    shape = [int(evaluate(dim, env)) for dim in spec.shape]
    low, high = (evaluate(bound, env) for bound in spec.range)
    torch_dtype = getattr(torch, spec.dtype or dtype)
    if torch_dtype.is_floating_point:
        values: torch.Tensor = (torch.rand(shape, generator=generator, dtype=torch.float64) * (high - low) + low).to(
            torch_dtype
        )
        if torch_dtype.itemsize > 1:  # rounding may reach `high`; step back one ulp to keep [low, high)
            values = torch.where(values >= high, torch.nextafter(values, torch.full_like(values, low)), values)
        return values
    integers: torch.Tensor = torch.randint(int(low), int(high), shape, generator=generator, dtype=torch_dtype)
    return integers


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
