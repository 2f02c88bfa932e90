"""`kcatalog test`'s gradient checks of the ops that declare a backward, on the forward op's samples.

* Through the registered torch op (Catalog.register_torch_ops: autograd runs the backward op): the gradients with
  the catalog's own choices, then with each backward backend in turn (a `use()` override), against float64 autograd
  through the forward op's reference, within the forward op's tolerance for the dtype. A Triton backend tested
  under --interpret cannot be selected on the CPU, so its kernel is called directly on the same gradients.
* `torch.autograd.gradcheck` in float64 on the CPU of the pair of references (the forward op's reference, the
  backward op's reference as its derivative), on the smallest size set: finite differences of 1e-3 with tolerances
  of 1e-3, since the forward references compute in float32 (finite differences of gradcheck's 1e-6 would measure
  its rounding).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..errors import CatalogError, NamespaceTakenError
from .conformance import case_seed, runnable, tested_as
from .formats import text_table
from .inputs import DEFAULT_TOLERANCE, Call, build_call, describe, samples_of, size_sets

if TYPE_CHECKING:
    import torch

    from ..model import Backward, OpInfo
    from ..registry.catalog import Catalog

CATALOG = "catalog"  # the case that lets the catalog choose both backends
GRADCHECK = "gradcheck"  # the case of torch.autograd.gradcheck on the references
GRADCHECK_EPS, GRADCHECK_TOLERANCE = 1e-3, 1e-3


@dataclass(frozen=True)
class GradientCase:
    """One planned gradient check: an op with a backward, the backward backend under test (None: the catalog's
    choice; GRADCHECK: the references' gradcheck), a dtype, one size set and the seed of its inputs."""

    info: OpInfo
    backward: OpInfo
    backend: str  # a backend of the backward op, CATALOG or GRADCHECK
    dtype: str
    sizes: dict[str, Any]
    seed: int
    direct: bool = False  # call the backward kernel itself (a Triton kernel under --interpret)


@dataclass(frozen=True)
class GradientResult:
    """What one gradient check found; `message` says why it failed ('' when it passed)."""

    op: str
    backward: str
    backend: str
    dtype: str
    sizes: str
    seed: int
    relative_error: float | None
    tolerance: float
    passed: bool
    message: str
    via: str  # 'torch op', 'kernel' (called directly) or 'gradcheck'

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


def plan_gradients(
    catalog: Catalog,
    ops: Sequence[str],
    *,
    device: str,
    backends: Sequence[str] = (),
    dtypes: Sequence[str] = (),
    base_seed: int,
    interpret: bool = False,
) -> tuple[list[GradientCase], list[str]]:
    """A case per op with a backward, dtype and size set for the catalog's choice and for each backward backend
    that can run here (`backends` filters those), and one gradcheck of the references per op."""
    platform = catalog.platform(device)
    cases: list[GradientCase] = []
    notes: list[str] = []
    for op in ops:
        info = catalog.info(op)
        if info.backward is None:
            continue
        backward = catalog.info(info.backward.op)
        samples = samples_of(info)
        if samples is None or info.reference is None or backward.reference is None:
            notes.append(f"{op}: gradients not checked: the op needs samples, and both ops a reference backend")
            continue
        sets = size_sets(samples)
        op_dtypes = [d for d in dtypes or info.dtypes or () if d in (info.dtypes or ())]
        named = [b for b in backward.backends if not backends or b in backends]
        for dtype in op_dtypes:
            for index, sizes in enumerate(sets):
                seed = case_seed(base_seed, op, dtype, index)
                if not backends:
                    cases.append(GradientCase(info, backward, CATALOG, dtype, sizes, seed))
                for name in named:
                    spec = backward.backends[name]
                    if runnable(spec, platform, dtype, interpret) is not None:
                        continue
                    direct = tested_as(spec, platform, dtype, interpret) != platform
                    cases.append(GradientCase(info, backward, name, dtype, sizes, seed, direct))
        if not backends or backward.reference in backends:
            smallest = min(sets, key=lambda env: _elements(info, samples, env))
            cases.append(GradientCase(info, backward, GRADCHECK, "float64", smallest, case_seed(base_seed, op, "", 0)))
    return cases, notes


# Torch's operator registry is process-wide: the checks register under a namespace of their own, so that they never
# take 'kcatalog' from the process's shipped Catalog (kernelize's), and under a spare one where another Catalog of
# this process took theirs.
NAMESPACE = "kcatalog_gradients"
_SPARE_NAMESPACES = (f"{NAMESPACE}_{n}" for n in itertools.count())


def run_gradients(
    cases: Sequence[GradientCase], catalog: Catalog, device: str, namespace: str = NAMESPACE
) -> Iterator[GradientResult]:
    """Run each case (the ops registered as torch ops under `namespace`); one that raises is a failure with its
    message, never an abort."""
    registered: dict[str, Any] = {}
    for case in cases:
        if case.backend == GRADCHECK:
            yield _gradcheck(case)
            continue
        if case.info.id not in registered:
            try:
                try:
                    registered.update(catalog.register_torch_ops(namespace, [case.info.id]))
                except NamespaceTakenError:  # another Catalog of this process holds the names (kernelize's, say)
                    namespace = next(_SPARE_NAMESPACES)
                    registered.update(catalog.register_torch_ops(namespace, [case.info.id]))
            except CatalogError as exc:
                registered[case.info.id] = exc
        torch_op = registered[case.info.id]
        if isinstance(torch_op, CatalogError):
            yield _result(case, False, f"cannot register the torch ops: {torch_op}", None, "torch op")
            continue
        yield _check(case, catalog, torch_op, device)


def _tolerance(case: GradientCase) -> float:
    return case.info.tolerance.get(case.dtype, DEFAULT_TOLERANCE.get(case.dtype, 1e-2))


def _result(case: GradientCase, passed: bool, message: str, rel: float | None, via: str) -> GradientResult:
    tolerance = GRADCHECK_TOLERANCE if case.backend == GRADCHECK else _tolerance(case)
    return GradientResult(
        case.info.id,
        case.backward.id,
        case.backend,
        case.dtype,
        describe(case.sizes),
        case.seed,
        rel,
        tolerance,
        passed,
        message,
        via,
    )


def _check(case: GradientCase, catalog: Catalog, torch_op: Any, device: str) -> GradientResult:
    """The gradients through the torch op (or the backward kernel) against float64 autograd of the reference."""
    import torch

    info, bw = case.info, case.info.backward
    assert bw is not None
    via = "kernel" if case.direct else "torch op"
    samples = samples_of(info)
    assert samples is not None and info.reference is not None
    try:
        call = build_call(info, samples, case.sizes, case.dtype, device, case.seed)
    except Exception as exc:  # an empty range or a negative size: this check fails, the run goes on
        return _result(case, False, f"could not build the inputs: {type(exc).__name__}: {exc}", None, via)
    try:
        want, grad_outputs = _reference_gradients(info, call, case.seed)
    except Exception as exc:
        return _result(case, False, f"reference {info.reference} raised {type(exc).__name__}: {exc}", None, via)
    try:
        if case.direct:
            got = _kernel_gradients(case, torch_op, call, grad_outputs)
        elif case.backend == CATALOG:
            got = _gradients(torch_op, call, bw.grads, bw.saves, grad_outputs)
        else:
            with catalog.use({case.backward.id: case.backend}):
                got = _gradients(torch_op, call, bw.grads, bw.saves, grad_outputs)
        if device != "cpu":
            torch.cuda.synchronize()
    except Exception as exc:
        return _result(case, False, f"raised {type(exc).__name__}: {exc}", None, via)
    worst = 0.0
    for name, g, w in zip(bw.grads, got, want):
        if g is None or g.shape != w.shape or g.dtype != call.kwargs[name].dtype:
            shown = "no gradient" if g is None else f"{str(g.dtype).removeprefix('torch.')} {tuple(g.shape)}"
            expected = f"{str(call.kwargs[name].dtype).removeprefix('torch.')} {tuple(w.shape)}"
            return _result(case, False, f"the gradient of '{name}' is {shown}, expected {expected}", None, via)
        got64, want64 = g.detach().cpu().double(), w.cpu()
        if not bool(torch.isfinite(got64).all()):
            return _result(case, False, f"the gradient of '{name}' has NaN or Inf elements", None, via)
        norm = float(torch.linalg.vector_norm(want64))
        diff = float(torch.linalg.vector_norm(got64 - want64))
        worst = max(worst, diff / norm if norm > 0 else diff)
    tolerance = _tolerance(case)
    if worst > tolerance:
        return _result(case, False, f"relative error {worst:.3e} > tolerance {tolerance:.1e}", worst, via)
    return _result(case, True, "", worst, via)


def _reference_gradients(info: OpInfo, call: Call, seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Float64 autograd through the forward op's reference, and the output gradients it was given (random, in the
    dtype under test, so that the op under test gets the very same values)."""
    import torch

    bw = info.backward
    assert bw is not None and info.reference is not None
    wide = _float64(call)
    for name in bw.grads:
        wide.kwargs[name].requires_grad_(True)
    outputs = _outputs(wide.invoke(info.backends[info.reference].load()))
    differentiable = [out for i, out in enumerate(outputs) if i not in bw.saves]
    dtype = call.kwargs[bw.grads[0]].dtype
    generator = torch.Generator().manual_seed(seed ^ 0x5EED)
    grad_outputs = [
        torch.randn(out.shape, generator=generator, dtype=torch.float64).to(dtype) for out in differentiable
    ]
    device = call.kwargs[bw.grads[0]].device
    grad_outputs = [g.to(device) for g in grad_outputs]
    inputs = [wide.kwargs[name] for name in bw.grads]
    wanted = torch.autograd.grad(differentiable, inputs, [g.double() for g in grad_outputs], allow_unused=True)
    return [torch.zeros_like(x) if w is None else w for x, w in zip(inputs, wanted)], grad_outputs


def _gradients(
    fn: Any, call: Call, grads: tuple[str, ...], saves: tuple[int, ...], grad_outputs: list[torch.Tensor]
) -> list[torch.Tensor | None]:
    """The gradients of `grads` through `fn` (the torch op) given the outputs' gradients."""
    import torch

    mine = call.clone()
    for name in grads:
        mine.kwargs[name].requires_grad_(True)
    outputs = _outputs(mine.invoke(fn))
    differentiable = [out for i, out in enumerate(outputs) if i not in saves]
    got = torch.autograd.grad(differentiable, [mine.kwargs[name] for name in grads], grad_outputs, allow_unused=True)
    return list(got)


def _kernel_gradients(case: GradientCase, torch_op: Any, call: Call, grad_outputs: list[torch.Tensor]) -> list[Any]:
    """The backward kernel called directly on the output gradients, the forward's arguments and its saved
    outputs (the forward run through the torch op)."""
    bw = case.info.backward
    assert bw is not None and case.backward.parameters is not None
    outputs = _outputs(call.clone().invoke(torch_op))
    kernel = case.backward.backends[case.backend].load()
    results = kernel(*grad_outputs, **_handed(bw, case.backward, call.clone(), outputs))
    return list(results) if isinstance(results, tuple) else [results]


def _handed(bw: Backward, backward: OpInfo, call: Call, outputs: tuple[Any, ...]) -> dict[str, Any]:
    """What the backward op takes after the gradients, by name: the forward's arguments that `inputs` names (the
    ones the call passes; the others take their defaults), then the forward outputs handed over."""
    assert backward.parameters is not None
    names = backward.parameters.names
    taken = {name: call.kwargs[name] for name in bw.inputs if name in call.kwargs}
    return {**taken, **dict(zip(names[len(names) - len(bw.handed) :], (outputs[i] for i in bw.handed)))}


def _gradcheck(case: GradientCase) -> GradientResult:
    """torch.autograd.gradcheck of the forward op's reference with the backward op's reference as its derivative."""
    import torch

    info, backward = case.info, case.backward
    bw = info.backward
    samples = samples_of(info)
    assert bw is not None and samples is not None and info.reference is not None and backward.reference is not None
    assert backward.parameters is not None
    try:
        call = _float64(build_call(info, samples, case.sizes, "float64", "cpu", case.seed))
        forward = info.backends[info.reference].load()
        derivative = backward.backends[backward.reference].load()
    except Exception as exc:
        return _result(case, False, f"could not build the inputs: {type(exc).__name__}: {exc}", None, GRADCHECK)
    grads, saves, linked = bw.grads, bw.saves, bw

    class Pair(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *tensors: torch.Tensor) -> Any:
            given = Call({**call.kwargs, **dict(zip(grads, tensors))}, call.positional)
            result = given.invoke(forward)
            outputs = _outputs(result)
            ctx.kc_call, ctx.kc_outputs = given, outputs
            kept = [outputs[i] for i in saves]
            if kept:
                ctx.mark_non_differentiable(*kept)
            return result

        @staticmethod
        def backward(ctx: Any, *grad_outputs: torch.Tensor) -> Any:
            differentiable = [g for i, g in enumerate(grad_outputs) if i not in saves]
            results = derivative(*differentiable, **_handed(linked, backward, ctx.kc_call, ctx.kc_outputs))
            return results if isinstance(results, tuple) else (results,)

    inputs = tuple(call.kwargs[name].detach().requires_grad_(True) for name in grads)
    try:  # fast mode: the Jacobian against random projections (a few evaluations, not one per input element:
        # minutes for rotary's 12k inputs otherwise); a wrong derivative still fails it
        torch.autograd.gradcheck(
            Pair.apply, inputs, eps=GRADCHECK_EPS, atol=GRADCHECK_TOLERANCE, rtol=GRADCHECK_TOLERANCE, fast_mode=True
        )
    except Exception as exc:  # GradcheckError, or what a reference raised
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return _result(case, False, f"gradcheck: {first}", None, GRADCHECK)
    return _result(case, True, "", None, GRADCHECK)


def _float64(call: Call) -> Call:
    """A copy with every floating tensor in float64."""
    import torch

    def wide(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().to(torch.float64) if value.is_floating_point() else value.clone()
        return value

    return Call({name: wide(value) for name, value in call.kwargs.items()}, call.positional)


def _outputs(result: Any) -> tuple[Any, ...]:
    return result if isinstance(result, tuple) else (result,)


def _elements(info: OpInfo, samples: Any, env: dict[str, Any]) -> int:
    """How many elements the size set's tensor arguments have (gradcheck's cost grows with them)."""
    from ..link.samples import evaluate
    from ..validate.schema import TensorArgDecl

    total = 0
    for spec in samples.args.values():
        if isinstance(spec, TensorArgDecl):
            count = 1
            for dim in spec.shape:
                count *= int(evaluate(dim, env))
            total += count
    return total


def format_gradients(results: Sequence[GradientResult]) -> str:
    """One row per gradient check."""
    rows = [["op", "backward", "backend", "dtype", "sizes", "via", "rel err", "tol", "result"]]
    for r in results:
        error = "-" if r.relative_error is None else f"{r.relative_error:.2e}"
        rows.append(
            [
                r.op,
                r.backward,
                r.backend,
                r.dtype,
                r.sizes,
                r.via,
                error,
                f"{r.tolerance:.0e}",
                "ok" if r.passed else "FAIL",
            ]
        )
    return text_table(rows)


def gradient_failure_line(r: GradientResult, base_seed: int) -> str:
    """A failed gradient check with its figures and seeds."""
    return (
        f"FAIL gradients of {r.op} [{r.backend}] {r.dtype} {r.sizes} via {r.via}: {r.message} "
        f"(seed {base_seed}; case seed {r.seed})"
    )
