"""`kcatalog bench`: time each eligible backend on the declared shapes, against the device's copy bandwidth."""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..select.selection import ineligibility
from .formats import text_table
from .inputs import Call, build_call, describe, samples_of, size_sets, with_samples

if TYPE_CHECKING:
    from ..model import KernelSpec, OpInfo
    from ..platform import Platform
    from ..registry.catalog import Catalog

GRAPH_INPUT_SETS = 8  # decode shapes fit in L2: rotate input sets so replays do not measure the cache
# A replay rotates enough input sets that it reads this much (the H200's L2 is 50 MiB): 2 at least, 8 at most.
ROTATED_BYTES = 256 << 20


@dataclass(frozen=True)
class BenchResult:
    """One backend of one op at one shape: its median time and what that means in bandwidth."""

    op: str
    backend: str
    dtype: str
    shapes: str
    sizes: str
    method: str
    time_us: float | None
    bytes_moved: int
    gbps: float | None
    fraction_of_copy: float | None
    speedup_vs_reference: float | None
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


@dataclass(frozen=True)
class Job:
    """One backend of one op at one size set, in one dtype: what `time_job` times."""

    info: OpInfo
    spec: KernelSpec
    dtype: str
    shapes: str
    sizes: dict[str, Any]


def plan(
    catalog: Catalog,
    ops: Sequence[str],
    *,
    device: str,
    shapes: str,
    dtypes: Sequence[str],
    backends: Sequence[str] = (),
) -> tuple[list[Job], list[str]]:
    """Every (op, backend, dtype, shape) to time, reference first within each shape, plus notes."""
    platform = catalog.platform(device)
    kinds = ["decode", "prefill"] if shapes == "all" else [shapes]
    jobs: list[Job] = []
    notes: list[str] = []
    for info, samples in with_samples(catalog, ops, "time", notes):
        ordered = sorted(info.backends.values(), key=lambda s: s.backend != info.reference)
        for dtype in [d for d in dtypes if d in (info.dtypes or ())]:  # samples need declared dtypes
            wanted = [s for s in ordered if not backends or s.backend in backends or s.backend == info.reference]
            runnable = runnable_here(wanted, platform, dtype, notes, "skipped")
            for kind in kinds:
                for sizes in size_sets(samples, kind):
                    jobs += [Job(info, spec, dtype, kind, sizes) for spec in runnable]
    return jobs, notes


def runnable_here(
    specs: Sequence[KernelSpec], platform: Platform, dtype: str, notes: list[str], label: str
) -> list[KernelSpec]:
    """The specs that can run on the platform for the dtype; for each other, a note '<op> [<backend>] <dtype>:
    <label>, <why>'."""
    runnable = []
    for spec in specs:
        why = ineligibility(spec, platform, dtype)
        if why is None:
            runnable.append(spec)
        else:
            notes.append(f"{spec.op} [{spec.backend}] {dtype}: {label}, {why.reason}")
    return runnable


def run(
    jobs: Sequence[Job],
    device: str,
    copy_gbps: float,
    *,
    seed: int = 0,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[BenchResult]:
    """Time every job; a backend that fails is recorded with its error and the run goes on."""
    results: list[BenchResult] = []
    reference_times: dict[tuple[str, str, str], float] = {}
    for index, job in enumerate(jobs):
        label = f"{job.info.id} [{job.spec.backend}] {job.dtype} {describe(job.sizes)}"
        if progress:
            progress(index, len(jobs), label)
        result = time_job(job, device, copy_gbps, seed)
        key = (job.info.id, job.dtype, describe(job.sizes))
        if job.spec.backend == job.info.reference and result.time_us:
            reference_times[key] = result.time_us
        if result.time_us and key in reference_times:
            result = BenchResult(**{**result.as_dict(), "speedup_vs_reference": reference_times[key] / result.time_us})
        results.append(result)
    if progress:
        progress(len(jobs), len(jobs), "done")
    return results


def time_job(job: Job, device: str, copy_gbps: float, seed: int) -> BenchResult:
    """Time one job (CUDA-graph replays over rotating input sets on cuda, the wall clock on the CPU); errors
    recorded."""
    untimed = BenchResult(
        job.info.id,
        job.spec.backend,
        job.dtype,
        job.shapes,
        describe(job.sizes),
        method_of(job, device),
        time_us=None,
        bytes_moved=0,
        gbps=None,
        fraction_of_copy=None,
        speedup_vs_reference=None,
    )
    try:
        ready = prepare(job, device, seed)
        moved = bytes_moved(ready.call, ready.result, job.info.mutates)
        seconds = ready.seconds()
    except Exception as exc:  # one broken backend must not end a run that takes minutes
        return dataclasses.replace(untimed, error=f"{type(exc).__name__}: {exc}")
    gbps = moved / seconds / 1e9
    fraction = gbps / copy_gbps if copy_gbps else None
    return dataclasses.replace(untimed, time_us=seconds * 1e6, bytes_moved=moved, gbps=gbps, fraction_of_copy=fraction)


def method_of(job: Job, device: str) -> str:
    """How the job is timed: 'cuda-graph' on cuda, 'wall-clock' on the CPU.

    Every shape is timed by CUDA-graph replay, prefill too: timed by CUDA events, a 20-90 us kernel behind a
    Triton launch of 30-50 us timed the host as well, by an amount that changed from one process to the next
    (H200, 2026-12-02), so that the table's choice and `tune --check`'s disagreed. A model's step pays the
    kernel's GPU time when the GPU runs ahead of Python; the host's cost per call is dispatch_overhead's."""
    return "cuda-graph" if device == "cuda" else "wall-clock"


@dataclass(frozen=True)
class Prepared:
    """A job ready to be timed, again and again: its inputs made, its kernel imported and run once (imports, JIT
    and torch.compile stay out of the timing); `seconds()` times it once more, in seconds per call."""

    call: Call
    result: Any
    seconds: Callable[[], float]


def prepare(job: Job, device: str, seed: int = 0) -> Prepared:
    """The job's inputs and kernel, warmed up; raises what building the inputs, importing or the first call raise."""
    samples = samples_of(job.info)
    assert samples is not None  # plan() only makes jobs for ops with samples
    calls = [build_call(job.info, samples, job.sizes, job.dtype, device, seed)]
    fn = job.spec.load()
    result = calls[0].invoke(fn)  # warm-up: imports, JIT and torch.compile stay out of the timing
    if method_of(job, device) == "cuda-graph":
        calls += more_sets(job, calls[0], result, lambda i: build_call(job.info, samples, job.sizes, job.dtype,
                                                                      device, seed + i))  # fmt: skip
        return Prepared(calls[0], result, graphed_timer(fn, calls))
    timer = _time_cuda if device == "cuda" else _time_cpu
    return Prepared(calls[0], result, lambda: timer(lambda: calls[0].invoke(fn)))


def input_sets(job: Job, moved: int) -> int:
    """How many input sets one graph replay rotates through, so that no call finds its inputs in the L2: decode
    shapes and prefill shapes alike, since a decode call can read gigabytes too (an MoE layer's expert weights)."""
    return max(2, min(GRAPH_INPUT_SETS, -(-ROTATED_BYTES // max(moved, 1))))


def more_sets(job: Job, first: Call, result: Any, build: Callable[[int], Call]) -> list[Call]:
    """The input sets after `first` that a graph replay rotates through: small decode inputs built from their own
    seeds, larger ones copied on the device. Building them on the CPU took most of a prefill tuning run, and
    longer than a 150 s cap for one Mixtral-shaped MoE decode job (eight sets of 2.8 GB of expert weights, H200)."""
    sets = input_sets(job, bytes_moved(first, result, job.info.mutates))
    if job.shapes == "decode" and sets == GRAPH_INPUT_SETS:
        return [build(i) for i in range(1, sets)]
    return [first.clone() for _ in range(1, sets)]


def graphed_timer(fn: Callable[..., Any], calls: Sequence[Call]) -> Callable[[], float]:
    """Seconds per call by CUDA-graph replay; for a backend that cannot be captured (one that synchronises with
    the host), by CUDA events on the first set instead, the host's launch included."""
    captured: list[bool] = []

    def seconds() -> float:
        if not captured or captured[0]:
            try:
                value = _time_graph(fn, calls)
                captured[:] = [True]
                return value
            except RuntimeError:
                if captured:  # it was captured before: a real failure
                    raise
                captured[:] = [False]
                import torch

                torch.cuda.synchronize()  # the capture that failed is over: the next timing starts clean
        return _time_cuda(lambda: calls[0].invoke(fn))

    return seconds


def interleaved(timers: Sequence[Callable[[], float]], rounds: int) -> list[list[float]]:
    """`rounds` timings of each timer, taken in interleaved rounds whose order alternates (A B, B A, A B, ...): a
    drift of clocks or temperature falls on every timer alike. `result[i][r]` is timer i's in round r."""
    times: list[list[float]] = [[] for _ in timers]
    for round_ in range(rounds):
        order = range(len(timers)) if round_ % 2 == 0 else reversed(range(len(timers)))
        for index in order:
            times[index].append(timers[index]())
    return times


def bytes_moved(call: Call, result: Any, mutates: Sequence[str]) -> int:
    """The fewest bytes the op must move: every tensor argument read once, each output and mutated
    argument written once."""
    import torch

    def size(t: torch.Tensor) -> int:
        return t.numel() * t.element_size()

    tensors = call.tensors()
    outputs = result if isinstance(result, (tuple, list)) else [result]
    written = sum(size(t) for t in outputs if isinstance(t, torch.Tensor))
    written += sum(size(tensors[name]) for name in mutates if name in tensors)
    return sum(size(t) for t in tensors.values()) + written


def copy_bandwidth(device: str) -> float:
    """GB/s of a large device copy, counting bytes read plus bytes written: the ceiling for these ops."""
    import torch

    numel = (1 << 30) if device == "cuda" else (1 << 27)
    source = torch.randint(0, 255, (numel,), dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    timer = _time_cuda if device == "cuda" else _time_cpu
    return 2 * numel / timer(lambda: target.copy_(source)) / 1e9


def _time_cuda(fn: Callable[[], Any]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, return_mode="median")) / 1e3  # CUDA events, L2 flushed between repetitions


def _time_graph(fn: Callable[..., Any], calls: Sequence[Call]) -> float:
    """One CUDA graph replaying the op once per input set; seconds per call, median of replays."""
    import torch
    from triton.testing import do_bench

    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls:  # warm up on the side stream, as graph capture requires
            call.invoke(fn)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call.invoke(fn)
    return float(do_bench(graph.replay, return_mode="median")) / 1e3 / len(calls)


def _time_cpu(fn: Callable[[], Any], repeats: int = 5, min_seconds: float = 0.02) -> float:
    """Median over `repeats` of a loop long enough to time, in seconds per call."""
    fn()
    loops = 1
    while True:
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        if time.perf_counter() - start >= min_seconds:
            break
        loops *= 4
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops)
    return statistics.median(samples)


def progress_bar(done: int, total: int, label: str) -> None:
    """A one-line bar on stderr; plain lines when stderr is not a terminal."""
    width = 30
    filled = width * done // max(total, 1)
    line = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label}"
    if sys.stderr.isatty():
        end = "\n" if done == total else ""
        sys.stderr.write(f"\r\x1b[2K{line}{end}")
    else:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def format_table(results: Sequence[BenchResult]) -> str:
    """Op, backend, dtype, shape, time, GB/s, fraction of copy bandwidth, speedup over the reference."""
    rows = [["op", "backend", "dtype", "shape", "sizes", "time us", "GB/s", "of copy", "x ref"]]
    for r in results:
        rows.append(
            [
                r.op,
                r.backend,
                r.dtype,
                r.shapes,
                r.sizes,
                f"{r.time_us:.1f}" if r.time_us else f"error: {r.error}",
                f"{r.gbps:.1f}" if r.gbps else "-",
                f"{r.fraction_of_copy:.2f}" if r.fraction_of_copy else "-",
                f"{r.speedup_vs_reference:.2f}" if r.speedup_vs_reference else "-",
            ]
        )
    return text_table(rows)


def plot(results: Sequence[BenchResult], copy_gbps: float, path: str, title: str) -> None:
    """Bandwidth against bytes moved, one panel per op and one line per backend, saved as a PNG."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'kcatalog[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = sorted({r.op for r in results})
    columns = min(len(ops), 3) or 1
    rows = (len(ops) + columns - 1) // columns or 1
    figure, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.8 * rows), squeeze=False)
    for axis, op in zip(axes.flat, ops):
        for backend in sorted({r.backend for r in results if r.op == op}):
            points = sorted(
                (r.bytes_moved / 1e6, r.gbps) for r in results if r.op == op and r.backend == backend and r.gbps
            )
            if points:
                axis.plot(*zip(*points), marker="o", label=backend)
        if copy_gbps:
            axis.axhline(copy_gbps, color="grey", linestyle="--", linewidth=1, label="copy bandwidth")
        axis.set_xscale("log")
        axis.set_title(op, fontsize=10)
        axis.set_xlabel("MB moved")
        axis.set_ylabel("GB/s")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(ops) :]:
        axis.set_visible(False)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
