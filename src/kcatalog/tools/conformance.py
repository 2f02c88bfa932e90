"""`kcatalog test`: each eligible backend against the op's reference, on the samples its manifest declares."""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import shlex
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..errors import UnknownOpError
from ..platform import Platform
from ..select.selection import ineligibility
from .formats import text_table
from .inputs import (
    DEFAULT_TOLERANCE,
    build_call,
    describe,
    output_part,
    samples_of,
    select_output,
    size_sets,
    with_samples,
)

if TYPE_CHECKING:
    from ..model import KernelSpec, OpInfo
    from ..registry.catalog import Catalog


@dataclass(frozen=True)
class Case:
    """One planned check: a backend of an op, a dtype, one size set and the seed of its inputs."""

    info: OpInfo
    spec: KernelSpec
    dtype: str
    sizes: dict[str, Any]
    seed: int


@dataclass(frozen=True)
class CaseResult:
    """What one check found; `message` says why it failed ('' when it passed)."""

    op: str
    backend: str
    dtype: str
    sizes: str
    seed: int
    max_abs_error: float | None
    relative_error: float | None
    tolerance: float
    passed: bool
    message: str
    skipped: bool = False  # the backend's per-call gate refuses these inputs: selection never sends it such a call

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


def select_ops(catalog: Catalog, patterns: Sequence[str]) -> list[str]:
    """Op ids matching the patterns (ids or globs), all ops when none is given; UnknownOpError for a miss."""
    if not patterns:
        return catalog.ops()
    chosen = []
    for pattern in patterns:
        matches = [op for op in catalog.ops() if fnmatch.fnmatchcase(op, pattern)]
        if not matches:
            raise UnknownOpError(pattern, catalog.ops())
        chosen += [op for op in matches if op not in chosen]
    return chosen


def case_seed(base_seed: int, op: str, dtype: str, index: int) -> int:
    """The seed of one size set's inputs: the same for every backend, so all see the same data."""
    return zlib.crc32(f"{base_seed}:{op}:{dtype}:{index}".encode())


INTERPRETED = Platform("cuda", "9.0")  # what a Triton kernel run by the interpreter on the CPU stands in for


def tested_as(spec: KernelSpec, platform: Platform, dtype: str, interpret: bool) -> Platform:
    """The platform the spec is tested as: under --interpret, a Triton kernel that cannot run on the CPU is tested
    as on cuda 9.0 (still honouring its requires and dtypes), the interpreter running it on the CPU."""
    if interpret and platform.device == "cpu" and "triton" in spec.requires:
        if ineligibility(spec, platform, dtype) is not None:
            return INTERPRETED
    return platform


def runnable(spec: KernelSpec, platform: Platform, dtype: str, interpret: bool) -> str | None:
    """Why the spec cannot be tested here, or None. Under --interpret, Triton kernels run on the CPU."""
    why = ineligibility(spec, tested_as(spec, platform, dtype, interpret), dtype)
    return None if why is None else why.reason


def plan(
    catalog: Catalog,
    ops: Sequence[str],
    *,
    device: str,
    backends: Sequence[str] = (),
    dtypes: Sequence[str] = (),
    base_seed: int,
    interpret: bool = False,
) -> tuple[list[Case], list[str]]:
    """Every case to run, and a note for each op or backend left out (no samples, cannot run here)."""
    platform = catalog.platform(device)
    cases: list[Case] = []
    notes: list[str] = []
    unreferenced = [op for op in ops if catalog.info(op).reference is None]
    if unreferenced:
        notes.append(
            f"skipped {len(unreferenced)} op{'s' * (len(unreferenced) != 1)} that name no reference backend "
            f"to check against: {', '.join(unreferenced)}"
        )
    referenced = [op for op in ops if op not in set(unreferenced)]
    for info, samples in with_samples(catalog, referenced, "test", notes):
        op = info.id
        op_dtypes = info.dtypes or ()  # samples need declared dtypes (KC209)
        for spec in info.backends.values():
            if spec.backend == info.reference or (backends and spec.backend not in backends):
                continue
            skipped: dict[str, list[str]] = {}  # reason -> dtypes, so each reason is noted once
            for dtype in [d for d in dtypes or op_dtypes if d in op_dtypes]:
                reason = runnable(spec, platform, dtype, interpret)
                if reason is not None:
                    skipped.setdefault(reason, []).append(dtype)
                    continue
                for index, sizes in enumerate(size_sets(samples)):
                    cases.append(Case(info, spec, dtype, sizes, case_seed(base_seed, op, dtype, index)))
            notes += [f"{op} [{spec.backend}] {', '.join(ds)}: skipped, {reason}" for reason, ds in skipped.items()]
    return cases, notes


def run(cases: Sequence[Case], catalog: Catalog, device: str) -> Iterator[CaseResult]:
    """Run each case; a backend that raises is a failure with its message, never an abort."""
    for case in cases:
        yield check(case, reference_of(catalog, case), device)


def reference_of(catalog: Catalog, case: Case) -> KernelSpec:
    """The reference backend a case is checked against (plan() leaves out the ops that name none)."""
    if case.info.reference is None:
        raise ValueError(f"op '{case.info.id}' names no reference backend to check against")
    return case.info.backends[case.info.reference]


def check(case: Case, reference: KernelSpec, device: str) -> CaseResult:
    """Compare one backend with the reference on fresh inputs, in float64."""
    import torch

    info, samples = case.info, samples_of(case.info)
    assert samples is not None  # plan() only makes cases for ops with samples
    tolerance = info.tolerance.get(case.dtype, DEFAULT_TOLERANCE.get(case.dtype, 1e-2))

    def result(passed: bool, message: str = "", max_abs: float | None = None, rel: float | None = None) -> CaseResult:
        return CaseResult(
            info.id,
            case.spec.backend,
            case.dtype,
            describe(case.sizes),
            case.seed,
            max_abs,
            rel,
            tolerance,
            passed,
            message,
        )

    try:
        call = build_call(info, samples, case.sizes, case.dtype, device, case.seed)
    except Exception as exc:  # an empty range or a negative size: this check fails, the run goes on
        return result(False, f"could not build the inputs: {type(exc).__name__}: {exc}")
    if case.spec.gate is not None:
        from ..runtime.gates import gate_reasons

        refused = call.invoke(lambda *args, **kwargs: gate_reasons(info, args, kwargs)).get(case.spec.backend)
        if refused is not None:
            return dataclasses.replace(result(True, refused), skipped=True)
    expected_call = call.clone(upcast_from=case.dtype)  # the reference runs in higher precision
    native_call = call.clone()  # ...and once in the dtype under test, for the dtypes outputs must have
    try:
        expected = expected_call.invoke(reference.load())
        native = native_call.invoke(reference.load())
    except Exception as exc:
        return result(False, f"reference {reference.backend} raised {type(exc).__name__}: {exc}")
    actual_call = call.clone()
    untouched = {name: t.clone() for name, t in actual_call.tensors().items() if name not in info.mutates}
    try:
        with _nan_filled_allocations():
            actual = actual_call.invoke(case.spec.load())
            if device != "cpu":
                torch.cuda.synchronize()
    except Exception as exc:
        return result(False, f"raised {type(exc).__name__}: {exc}")
    for name, before in untouched.items():
        if not torch.equal(actual_call.kwargs[name], before):
            return result(False, f"changed '{name}', which the op does not declare in mutates")
    worst_rel, worst_abs = 0.0, 0.0
    for selector in samples.compare:
        for part in selector.split("*"):
            try:
                got_part, want_part = output_part(part, actual, actual_call), output_part(part, native, native_call)
            except (TypeError, IndexError, KeyError):
                continue  # select_output below reports it
            if (
                isinstance(got_part, torch.Tensor)
                and isinstance(want_part, torch.Tensor)
                and got_part.dtype != want_part.dtype
            ):
                return result(
                    False,
                    f"output '{part}' has dtype {str(got_part.dtype).removeprefix('torch.')}, "
                    f"expected {str(want_part.dtype).removeprefix('torch.')}",
                )
        try:
            got = select_output(selector, actual, actual_call)
            want = select_output(selector, expected, expected_call)
        except (TypeError, IndexError, KeyError) as exc:
            return result(False, f"output '{selector}': {exc}")
        if got.shape != want.shape:
            return result(False, f"output '{selector}' has shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        got, want = got.cpu(), want.cpu()
        bad = int((~torch.isfinite(got) & torch.isfinite(want)).sum())
        if bad:
            return result(
                False, f"{bad} of {got.numel()} elements of '{selector}' are NaN or Inf (unwritten or overflowed)"
            )
        diff = (got - want).abs()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        norm = float(torch.linalg.vector_norm(want))
        rel = float(torch.linalg.vector_norm(got - want)) / norm if norm > 0 else max_abs
        worst_rel, worst_abs = max(worst_rel, rel), max(worst_abs, max_abs)
    if worst_rel > tolerance:
        return result(False, f"relative error {worst_rel:.3e} > tolerance {tolerance:.1e}", worst_abs, worst_rel)
    return result(True, "", worst_abs, worst_rel)


@contextlib.contextmanager
def _nan_filled_allocations() -> Iterator[None]:
    """New tensors (torch.empty and friends) start as NaN, or the integer maximum, on every device, so an
    element a backend never writes shows whatever the allocator hands back (on the CPU, often the right answer)."""
    import warnings

    import torch
    import torch.utils.deterministic

    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    # A module attribute that torch's type stubs do not declare.
    deterministic: Any = torch.utils.deterministic
    fill = deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)  # the fill needs the flag; warn_only never raises
    deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "... does not have a deterministic implementation"
            yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        deterministic.fill_uninitialized_memory = fill


def format_table(results: Sequence[CaseResult]) -> str:
    """One row per check: op, backend, dtype, sizes, errors, tolerance, result."""
    rows = [["op", "backend", "dtype", "sizes", "max abs err", "rel err", "tol", "result"]]
    for r in results:
        rows.append(
            [
                r.op,
                r.backend,
                r.dtype,
                r.sizes,
                "-" if r.max_abs_error is None else f"{r.max_abs_error:.2e}",
                "-" if r.relative_error is None else f"{r.relative_error:.2e}",
                f"{r.tolerance:.0e}",
                "skipped" if r.skipped else "ok" if r.passed else "FAIL",
            ]
        )
    return text_table(rows)


def failure_line(
    r: CaseResult, base_seed: int, *, catalogs: Sequence[str] = (), device: str = "cpu", interpret: bool = False
) -> str:
    """A failure with its figures and the command that reproduces it (same catalogs, device and interpreter)."""
    again = reproduce(r.op, r.backend, r.dtype, base_seed, catalogs=catalogs, device=device, interpret=interpret)
    return (
        f"FAIL {r.op} [{r.backend}] {r.dtype} {r.sizes}: {r.message} (seed {base_seed}; case seed {r.seed}; "
        f"reproduce: {again})"
    )


def reproduce(
    op: str, backend: str, dtype: str, base_seed: int, *, catalogs: Sequence[str], device: str, interpret: bool
) -> str:
    """The `kcatalog test` command that runs one backend's checks of one op and dtype again."""
    extra = "".join(f" --catalog {shlex.quote(str(path))}" for path in catalogs)
    extra += f" --device {device}" if device != "cpu" else ""
    extra += " --interpret" if interpret else ""
    return f"kcatalog test {op} --backend {backend} --dtype {dtype} --seed {base_seed}{extra}"
