"""`kcatalog test`'s checks of what a backend promises of its outputs, on the op's declared samples: repeated runs
bitwise equal (deterministic), and each row computed alone bitwise equal to the same row computed inside the batch
(batch_invariant), every output the samples compare, mutated arguments included.

The rows are those of the dispatch argument's leading dimension; a tensor argument is cut into rows with it when its
declared shape starts with the same size (`x: {shape: [T, H]}` and `residual: {shape: [T, H]}` are, `weight: {shape:
[H]}` is not). Torch runs with its default settings (`torch.use_deterministic_algorithms` as the caller left it):
a promise must hold where applications run, not only in a stricter mode."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..link.samples import evaluate
from ..model import Promise
from ..validate.schema import SamplesDecl, TensorArgDecl
from .conformance import case_seed, reproduce, runnable, tested_as
from .formats import text_table
from .inputs import Call, build_call, describe, output_part, samples_of, size_sets

if TYPE_CHECKING:
    import torch

    from ..model import KernelSpec, OpInfo
    from ..registry.catalog import Catalog

REPEATS = 3  # runs compared for `deterministic`: the first and two more
MAX_ROWS = 64  # rows of a batch each computed alone for `batch_invariant`; beyond, that many spread evenly


@dataclass(frozen=True)
class PromiseCase:
    """One planned check of one promise: a backend of an op, a dtype, one size set and the seed of its inputs;
    `unchecked` says why it cannot be checked (the check then fails: a promise is never left unchecked silently)."""

    info: OpInfo
    spec: KernelSpec
    promise: Promise
    dtype: str
    sizes: dict[str, Any]
    seed: int
    unchecked: str = ""


@dataclass(frozen=True)
class PromiseResult:
    """What one check of a promise found; `message` says why it failed ('' when it held)."""

    op: str
    backend: str
    promise: str
    dtype: str
    sizes: str
    seed: int
    passed: bool
    message: str

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


@dataclass(frozen=True)
class Rows:
    """How a size set's call is cut into rows: the leading size's declaration ('T'), and the arguments that have it."""

    size: int | str
    arguments: tuple[str, ...]

    def count(self, sizes: dict[str, Any]) -> int:
        """The number of rows of the call for one size set."""
        return int(evaluate(self.size, sizes))


def rows_of(info: OpInfo, samples: SamplesDecl) -> Rows | str:
    """The op's rows as its samples declare them, or why it has none (the dispatch argument is no tensor of
    at least one dimension)."""
    name = info.dispatch.name
    declared = samples.args.get(name)
    if not isinstance(declared, TensorArgDecl) or not declared.shape:
        return f"its dispatch argument '{name}' is not a sample tensor of one dimension or more, to cut into rows"
    leading = declared.shape[0]
    cut = tuple(
        arg for arg, spec in samples.args.items() if isinstance(spec, TensorArgDecl) and spec.shape[:1] == (leading,)
    )
    return Rows(leading, cut)


def plan_promises(
    catalog: Catalog,
    ops: Sequence[str],
    *,
    device: str,
    backends: Sequence[str] = (),
    dtypes: Sequence[str] = (),
    base_seed: int,
    interpret: bool = False,
    every: bool = False,
    shapes: str = "test",
    sizes: Mapping[str, Sequence[Any]] | None = None,
) -> tuple[list[PromiseCase], list[str]]:
    """A case per promise each backend makes here (the reference too), dtype and size set (of the samples'
    `shapes`: test, decode or prefill, with `sizes` given on top); with `every`, both promises of every backend that
    can run here, declared or not (what benchmarks/promises.py measures). Under `interpret`, a Triton kernel is
    checked for what it promises on cuda, in the interpreter. A note for each promise left unchecked because the op
    declares no samples."""
    platform = catalog.platform(device)
    cases: list[PromiseCase] = []
    notes: list[str] = []
    for op in ops:
        info = catalog.info(op)
        samples = samples_of(info)
        op_dtypes = info.dtypes or ()
        for spec in info.backends.values():
            if backends and spec.backend not in backends:
                continue
            for dtype in [d for d in dtypes or op_dtypes if d in op_dtypes]:
                if runnable(spec, platform, dtype, interpret) is not None:
                    continue  # conformance's plan notes why it is skipped
                where = tested_as(spec, platform, dtype, interpret).device
                promised = [p for p in Promise if every or spec.keeps(p, where)]
                if promised and samples is None:
                    notes.append(f"{op} [{spec.backend}]: promises left unchecked: the op declares no samples")
                    break
                for promise in promised:
                    assert samples is not None
                    cases += _cases(info, spec, promise, dtype, samples, base_seed, size_sets(samples, shapes, sizes))
    return cases, notes


def _cases(
    info: OpInfo,
    spec: KernelSpec,
    promise: Promise,
    dtype: str,
    samples: SamplesDecl,
    base_seed: int,
    sets: list[dict[str, Any]],
) -> list[PromiseCase]:
    """One case per size set (for batch_invariant, per size set of more than one row: one row alone is no batch)."""
    indexed = list(enumerate(sets))
    seeds = {index: case_seed(base_seed, info.id, dtype, index) for index, _ in indexed}  # the accuracy checks' inputs
    unchecked = ""
    if promise is Promise.BATCH_INVARIANT:
        rows = rows_of(info, samples)
        if isinstance(rows, str):
            unchecked = f"cannot be checked: {rows}"
        else:
            batched = [(index, sizes) for index, sizes in indexed if rows.count(sizes) > 1]
            if not batched:
                unchecked = f"cannot be checked: no size set of the samples has more than one row ({rows.size})"
            indexed = batched or indexed[:1]
    return [PromiseCase(info, spec, promise, dtype, sizes, seeds[index], unchecked) for index, sizes in indexed]


def run_promises(cases: Sequence[PromiseCase], device: str, repeats: int = REPEATS) -> Iterator[PromiseResult]:
    """Check each case; a backend that raises fails its check with the message, never aborts the run. Consecutive
    cases of the same inputs (op, dtype, size set, seed) share one build of them: each run gets a copy."""
    built: tuple[tuple[str, str, str, int], Call | str] | None = None
    for case in cases:
        key = (case.info.id, case.dtype, describe(case.sizes), case.seed)
        if not case.unchecked and (built is None or built[0] != key):
            built = (key, _build(case, device))
        yield check_promise(case, device, repeats, built[1] if built is not None and built[0] == key else None)


def _build(case: PromiseCase, device: str) -> Call | str:
    """The case's inputs, or why they could not be built."""
    samples = samples_of(case.info)
    assert samples is not None  # planned only for ops with samples
    try:
        return build_call(case.info, samples, case.sizes, case.dtype, device, case.seed)
    except Exception as exc:  # an empty range or a negative size: this check fails, the run goes on
        return f"could not build the inputs: {type(exc).__name__}: {exc}"


def check_promise(
    case: PromiseCase, device: str, repeats: int = REPEATS, built: Call | str | None = None
) -> PromiseResult:
    """Whether the backend keeps its promise on one size set's fresh inputs (`built`: those inputs already made,
    or why they could not be; never changed here)."""
    info, samples = case.info, samples_of(case.info)
    assert samples is not None  # planned only for ops with samples

    def result(message: str = "") -> PromiseResult:
        return PromiseResult(
            info.id, case.spec.backend, case.promise.value, case.dtype, describe(case.sizes), case.seed, not message,
            message,
        )  # fmt: skip

    if case.unchecked:
        return result(case.unchecked)
    call = _build(case, device) if built is None else built
    if isinstance(call, str):
        return result(call)
    parts = [part for selector in samples.compare for part in selector.split("*")]
    try:
        kernel = case.spec.load()
        first = _outputs(kernel, call.clone(), parts)
        if case.promise is Promise.DETERMINISTIC:
            for run in range(2, repeats + 1):
                differs = _first_difference(first, _outputs(kernel, call.clone(), parts))
                if differs:
                    return result(f"run {run} differs from run 1: {differs}")
            return result()
        rows = rows_of(info, samples)
        assert isinstance(rows, Rows)  # planned as checkable
        count = rows.count(case.sizes)
        for row in _spread(count):
            alone = _outputs(kernel, _row_call(call, rows, row), parts)
            differs = _first_difference({p: _row(first[p], row, count, p) for p in parts}, alone)
            if differs:
                return result(f"row {row} of {count} computed alone differs from it in the batch: {differs}")
    except _NotRows as exc:
        return result(str(exc))
    except Exception as exc:
        return result(f"raised {type(exc).__name__}: {exc}")
    return result()


class _NotRows(Exception):
    """An output that cannot be cut into the call's rows."""


def _outputs(kernel: Any, call: Call, parts: Sequence[str]) -> dict[str, Any]:
    """Each compared part of one call's outputs (returned, or the mutated arguments): copied (a kernel may reuse an
    output buffer), on the device they were computed on (a GPU's outputs are compared there, not moved)."""
    import torch

    result = call.invoke(kernel)
    found = {}
    for part in parts:
        value = output_part(part, result, call)
        found[part] = value.detach().clone() if isinstance(value, torch.Tensor) else value
    return found


def _row_call(call: Call, rows: Rows, row: int) -> Call:
    """The call with one row of each argument that has the rows (a copy of it), the others copied whole."""
    cut = call.clone()
    for name in rows.arguments:
        if name in cut.kwargs:
            cut.kwargs[name] = cut.kwargs[name][row : row + 1].clone()
    return cut


def _row(value: Any, row: int, count: int, part: str) -> Any:
    """Row `row` of an output of a call of `count` rows."""
    import torch

    if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.shape[0] != count:
        what = f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
        raise _NotRows(f"output '{part}' ({what}) does not have the call's {count} rows along its first dimension")
    return value[row : row + 1]


def _spread(count: int) -> list[int]:
    """Every row, or MAX_ROWS of them spread evenly, the first and last included."""
    if count <= MAX_ROWS:
        return list(range(count))
    return sorted({round(i * (count - 1) / (MAX_ROWS - 1)) for i in range(MAX_ROWS)})


def _first_difference(expected: dict[str, Any], got: dict[str, Any]) -> str:
    """'' when every part is bitwise equal, else what differs first."""
    import torch

    for part, want in expected.items():
        have = got[part]
        if not isinstance(want, torch.Tensor) or not isinstance(have, torch.Tensor):
            if want != have:
                return f"output '{part}' is {have!r}, not {want!r}"
            continue
        if want.shape != have.shape or want.dtype != have.dtype:
            return f"output '{part}' is {have.dtype} {tuple(have.shape)}, not {want.dtype} {tuple(want.shape)}"
        unequal = _unequal_bits(want, have)
        if unequal:
            return f"{unequal} of {want.numel()} elements of '{part}' differ in their bits"
    return ""


def _unequal_bits(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many elements of two tensors of one dtype and shape differ in their bits (NaN payloads and the sign of
    zero included: equal values are not enough)."""
    import torch

    width = a.element_size()
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(width)
    if a.dtype == torch.bool or as_int is None:
        return int((a != b).sum())
    return int((a.contiguous().view(as_int) != b.contiguous().view(as_int)).sum())


def format_promises(results: Sequence[PromiseResult]) -> str:
    """One row per check of a promise: op, backend, promise, dtype, sizes, result."""
    rows = [["op", "backend", "promise", "dtype", "sizes", "result"]]
    rows += [[r.op, r.backend, r.promise, r.dtype, r.sizes, "ok" if r.passed else "FAIL"] for r in results]
    return text_table(rows)


def promise_failure_line(
    r: PromiseResult, base_seed: int, *, catalogs: Sequence[str] = (), device: str = "cpu", interpret: bool = False
) -> str:
    """A broken promise, what differs, and the command that reproduces it."""
    again = reproduce(r.op, r.backend, r.dtype, base_seed, catalogs=catalogs, device=device, interpret=interpret)
    return (
        f"FAIL {r.op} [{r.backend}] {r.promise} {r.dtype} {r.sizes}: {r.message} (seed {base_seed}; "
        f"case seed {r.seed}; reproduce: {again})"
    )
