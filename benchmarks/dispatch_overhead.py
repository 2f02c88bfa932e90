"""Per-call overhead of a kcatalog op handle against calling the kernel directly, and against peers.

All calls run the same trivial CPU "kernel" (it returns a preallocated tensor, so the kernel's own time
does not drown the overhead in noise); each figure is the median of 1,001 interleaved repeats of 2,000 calls
(2M calls a row; repeats of well under a millisecond, so that most run between two of a shared machine's context
switches and a busy spell spoils few), minus the direct call's median. kcatalog's three ways: a handle the caller
keeps, `catalog.op(id)(x)` looked up on every call (the same cached handle each time), and `catalog.kernel(id)(x)`.
Targets: the first two <= 500 ns over the direct call, the third <= 1 us. Peers, measured in the same run:
  - torch.library.custom_op wrapping the same function (what vLLM/SGLang register for torch.compile);
  - an SGLang-style cached lookup, `get_kernel(op, backend)(x)` over a dict registry.
The same handle for an op a tuned table chooses by token count (five buckets, as the shipped H200 table has):
one bisect on the leading dimension more.
Tracing (catalog.trace()): the handle with no trace open (the rows above), the handle as it was before tracing
(runtime/handles.py at --before, loaded from git: today's handle, in the same run), and the handles of another
catalog of the same files with a trace open throughout (each call counted by its leading dimension). Targets:
off within 10 ns of before; on <= 200 ns over the direct call.
Run: python benchmarks/dispatch_overhead.py   (writes benchmarks/results/dispatch_overhead.json)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import timeit
from datetime import datetime, timezone
from pathlib import Path

import torch

import kcatalog

RESULTS = Path(__file__).parent / "results" / "dispatch_overhead.json"
BEFORE = "5a1aa38"  # main as merged last: its runtime/handles.py, without tracing

SETTINGS = "kcatalog: 1\nbackends: {torch: {description: reference}}\npriority: [torch]\n"
MANIFEST = """\
kcatalog: 1
group: bench
ops:
  kernel:
    description: returns a preallocated tensor
    signature: "(x: Tensor) -> Tensor"
    reference: torch
    fake: reference
    dtypes: [float32]
    backends:
      torch: {target: "kcbench_kernels:kernel"}
"""
# An op chosen by token count: two backends, both the same trivial kernel, five buckets (the shape of the shipped
# H200 table), so that the handle pays its boundary lookup on every call.
TUNED_SETTINGS = (
    "kcatalog: 1\nbackends: {torch: {description: reference}, alt: {description: other}}\npriority: [torch]\n"
)
TUNED_MANIFEST = """\
kcatalog: 1
group: bench
ops:
  kernel:
    description: returns a preallocated tensor
    signature: "(x: Tensor) -> Tensor"
    reference: torch
    dtypes: [float32]
    backends:
      torch: {target: "kcbench_kernels:kernel"}
      alt: {target: "kcbench_kernels:other"}
"""
TUNED_TABLE = """\
kcatalog: 1
tuned:
  platform: cpu
  provenance: {device: cpu}
  ops:
    bench.kernel:
      float32:
        - {tokens: [1, 2], backend: torch}
        - {tokens: [3, 22], backend: alt}
        - {tokens: [23, 512], backend: torch}
        - {tokens: [513, 8192], backend: alt}
        - {tokens: [8193, null], backend: torch}
"""
KERNEL_MODULE = (
    "import torch\n\nOUT = torch.zeros(8)\n\n\ndef kernel(x):\n    return OUT\n\n\ndef other(x):\n    return OUT\n"
)


def write_bench_catalog(workdir: Path) -> Path:
    """A one-op catalog whose kernel returns a preallocated tensor, its module on sys.path; the catalog dir."""
    (workdir / "catalog").mkdir()
    (workdir / "catalog" / "kcatalog.yaml").write_text(SETTINGS)
    (workdir / "catalog" / "bench.yaml").write_text(MANIFEST)
    (workdir / "kcbench_kernels.py").write_text(KERNEL_MODULE)
    sys.path.insert(0, str(workdir))
    return workdir / "catalog"


def handle_before(catalog: kcatalog.Catalog, op: str, revision: str) -> object | None:
    """The op handle as runtime/handles.py made it at `revision` (None where git cannot show it)."""
    shown = subprocess.run(
        ["git", "show", f"{revision}:src/kcatalog/runtime/handles.py"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent,
    )
    if shown.returncode != 0:
        return None
    spec = importlib.util.spec_from_loader("kcatalog.runtime._handles_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "kcatalog.runtime"
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    exec(compile(shown.stdout, f"handles.py@{revision}", "exec"), module.__dict__)
    return module.make_handle(catalog.info(op), catalog.runtime.dispatcher(op))


def build_callables(workdir: Path, before: str = BEFORE) -> dict[str, object]:
    """Write the throwaway catalog and kernel, and return each way of calling the kernel (and, under '_trace',
    the traces to close after measuring)."""
    catalog = kcatalog.load_catalog([write_bench_catalog(workdir)])
    direct = catalog.kernel("bench.kernel", "torch")
    handle = catalog.op("bench.kernel")
    assert catalog.op("bench.kernel") is handle  # one handle per op: looking it up again builds nothing

    @torch.library.custom_op("kcbench::kernel", mutates_args=())
    def custom(x: torch.Tensor) -> torch.Tensor:
        return direct(x)

    tuned_dir = workdir / "tuned_catalog"
    (tuned_dir / "tuned").mkdir(parents=True)
    (tuned_dir / "kcatalog.yaml").write_text(TUNED_SETTINGS)
    (tuned_dir / "bench.yaml").write_text(TUNED_MANIFEST)
    (tuned_dir / "tuned" / "cpu.yaml").write_text(TUNED_TABLE)
    tuned_handle = kcatalog.load_catalog([tuned_dir]).op("bench.kernel")

    # The same catalogs again, a trace open on each while everything is measured (closed by main()).
    traced = kcatalog.load_catalog([workdir / "catalog"], cache=False)
    traced_tuned = kcatalog.load_catalog([tuned_dir], cache=False)
    traces = [traced.trace().__enter__(), traced_tuned.trace().__enter__()]

    registry = {("bench.kernel", "torch"): direct}

    def get_kernel(op: str, backend: str) -> object:
        return registry[(op, backend)]

    callables: dict[str, object] = {
        "direct": direct,
        "kcatalog op handle": handle,
    }
    old = handle_before(catalog, "bench.kernel", before)
    if old is not None:
        callables[f"kcatalog op handle, before tracing ({before})"] = old
    callables.update(
        {
            "kcatalog op handle, tracing on": traced.op("bench.kernel"),
            "kcatalog op handle, tuned (5 buckets)": tuned_handle,
            "kcatalog op handle, tuned (5 buckets), tracing on": traced_tuned.op("bench.kernel"),
            "kcatalog catalog.op(op)(x)": lambda x: catalog.op("bench.kernel")(x),
            "kcatalog catalog.kernel(op)": lambda x: catalog.kernel("bench.kernel")(x),
            "SGLang-style get_kernel(op, backend)": lambda x: get_kernel("bench.kernel", "torch")(x),
            "torch.library.custom_op": custom,
            "_traces": traces,
        }
    )
    return callables


def measure(callables: dict[str, object], calls: int, repeats: int) -> dict[str, list[float]]:
    """Interleaved repeats (A B C A B C ...) of `calls` calls each; seconds per call."""
    x = torch.randn(8)
    measured = {name: fn for name, fn in callables.items() if not name.startswith("_")}
    samples: dict[str, list[float]] = {name: [] for name in measured}
    for fn in measured.values():  # warm-up: first-call resolution and caches stay out of the figures
        fn(x)
    for _ in range(repeats):
        for name, fn in measured.items():
            samples[name].append(timeit.timeit(lambda fn=fn: fn(x), number=calls) / calls)
    # The lambda wrapper costs the same for every entry, so it cancels in the overheads.
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=1_001)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--before", default=BEFORE, help="git revision of the handle before tracing")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        callables = build_callables(Path(tmp), args.before)
        samples = measure(callables, args.calls, args.repeats)
        traces = callables["_traces"]
        for trace in traces:  # type: ignore[attr-defined]
            trace.__exit__(None, None, None)
    # Every call the traced handles made was counted: the warm-up and repeats x calls each.
    counted = [sum(e.calls for e in trace.record.entries) for trace in traces]  # type: ignore[attr-defined]
    assert counted == [1 + args.repeats * args.calls] * 2, counted
    direct = statistics.median(samples["direct"])
    rows = []
    for name, values in samples.items():
        median = statistics.median(values)
        rows.append(
            {
                "how": name,
                "median_ns_per_call": round(median * 1e9, 1),
                "overhead_ns": round((median - direct) * 1e9, 1),
            }
        )
    by_how = {row["how"]: row for row in rows}
    targets = {  # overhead over the direct call, ns
        "kcatalog op handle": 500,
        "kcatalog catalog.op(op)(x)": 500,
        "kcatalog catalog.kernel(op)": 1000,
        "kcatalog op handle, tracing on": 200,
    }
    met = {how: by_how[how]["overhead_ns"] <= limit for how, limit in targets.items()}

    # Each repeat measures every row back to back: a difference taken within a repeat cancels the machine's slower
    # and faster spells, so the tracing figures are medians of per-repeat differences (with their quartiles).
    def paired(a: str, b: str) -> dict[str, float]:
        differences = [1e9 * (x - y) for x, y in zip(samples[a], samples[b])]
        low, mid, high = statistics.quantiles(differences, n=4)
        return {"median": round(mid, 1), "q1": round(low, 1), "q3": round(high, 1)}

    off, on = "kcatalog op handle", "kcatalog op handle, tracing on"
    tuned, tuned_on = "kcatalog op handle, tuned (5 buckets)", "kcatalog op handle, tuned (5 buckets), tracing on"
    tracing: dict[str, object] = {
        "on_over_off_ns": paired(on, off),
        "tuned_on_over_off_ns": paired(tuned_on, tuned),
        "on_over_direct_ns": paired(on, "direct"),
    }
    before_row = f"kcatalog op handle, before tracing ({args.before})"
    if before_row in samples:
        tracing["off_over_before_ns"] = paired(off, before_row)
        # Off, the handle runs the code it ran before tracing existed: the same bytecode, names and constants.
        mine, old = (callables[name].__code__ for name in (off, before_row))  # type: ignore[attr-defined]
        same = (mine.co_code, mine.co_names, mine.co_consts) == (old.co_code, old.co_names, old.co_consts)
        tracing["off_bytecode_same_as_before"] = same
        median_off = tracing["off_over_before_ns"]["median"]  # type: ignore[index]
        met["tracing off within 10 ns of before"] = abs(median_off) <= 10
    met[on] = tracing["on_over_direct_ns"]["median"] <= targets[on]  # type: ignore[index]
    for row in rows:
        print(f"{row['how']:52s} {row['median_ns_per_call']:9.1f} ns/call   overhead {row['overhead_ns']:8.1f} ns")
    for key, value in tracing.items():
        print(f"tracing: {key} = {value}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "benchmark": "dispatch_overhead",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.processor() or ''} nproc={__import__('os').cpu_count()}".strip(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "commit": commit,
        "calls_per_repeat": args.calls,
        "repeats": args.repeats,
        "target_overhead_ns": targets,
        "targets_met": met,
        "tracing": tracing,
        "rows": rows,
        "reproduce": "python benchmarks/dispatch_overhead.py",
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    for how, limit in targets.items():
        print(f"target: {how} <= {limit} ns over direct: {'met' if met[how] else 'NOT met'}")
    within = met.get("tracing off within 10 ns of before")
    if within is not None:
        print(f"target: tracing off within 10 ns of before: {'met' if within else 'NOT met'}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
