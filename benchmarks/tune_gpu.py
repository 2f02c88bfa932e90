#!/usr/bin/env python3
"""`kcatalog tune` over the shipped ops on one GPU, then, in the same run, the tuned selection against the best
single backend and the catalog's default priority at every bucket.

Run from the repository root (the GPU machine's ``python3``)::

    PYTHONPATH=src python3 benchmarks/tune_gpu.py --out out/      # about 3 minutes on an H200

1. tune: `kcatalog tune --device cuda --dtype bfloat16` over every shipped op, at the manifests' decode and prefill
   sizes (tools/tuning.py; timing as tools/timing.py times: CUDA-graph replays over rotating input sets, 8 for decode,
   enough for 256 MiB for prefill; medians, inputs made once per shape); writes the table ``cuda_9.0.yaml``;
2. the three arms at every bucket from this run's medians (benchmarks/tune_compare.py): (a) the tuned selection,
   (b) the op's best single backend, (c) the catalog's default priority;
3. with ``--retime``, the same three re-timed one after the other through the op handles: (a) the handle of the
   catalog with the table as a catalog file (dispatch by bucket), (b) the best single backend called directly,
   (c) the handle of the catalog without the table.

Results: ``$OUT/cuda_9.0.yaml``, ``$OUT/tune_h200.md`` and ``.json``; with --retime ``tune_retimed.txt``/``.json``.
Torch.compile candidates are skipped, with the reason recorded, once the time budget (``--budget-s``) runs short.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f}s] {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--budget-s", type=float, default=150.0, help="tuning stops compiling past this")
    parser.add_argument("--ops", nargs="*", default=None)
    parser.add_argument("--retime", action="store_true", help="also re-time the three arms through op handles")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself (wall-clock times)")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)

    import torch

    import kcatalog
    from kcatalog.read.files import shipped_catalog_dir
    from kcatalog.tools import timing, tuning
    from kcatalog.tools.conformance import select_ops
    from kcatalog.tools.inputs import build_call, describe, samples_of
    from kcatalog.tools.timing import BenchResult

    # The shipped catalog without any tuned table: what default priority means.
    plain_dir = Path(tempfile.mkdtemp()) / "catalog"
    shutil.copytree(shipped_catalog_dir(), plain_dir, ignore=shutil.ignore_patterns("tuned"))
    plain = kcatalog.load_catalog(plain_dir, cache=False)
    device = options.device
    platform = plain.platform(device)
    ops = select_ops(plain, options.ops or [])
    log(f"{_device_name(torch, device)} ({platform}), torch {torch.__version__}; ops: {', '.join(ops)}")

    # 1. tune
    dtype = "bfloat16" if device == "cuda" else "float32"
    jobs, notes = tuning.tune_jobs(plain, ops, platform=platform, dtypes=[dtype])
    log(f"tune: {len(jobs)} timings")

    # Inputs are made once per shape (on the CPU, from a seed: seconds for the largest) and shared by every
    # candidate and by the re-timing below; timing is tools/timing.py's (graph replays over rotating input sets).
    inputs: dict[tuple[str, str], list[Any]] = {}

    def seconds(job: timing.Job, fn: Any) -> float:
        calls = inputs.setdefault((job.info.id, describe(job.sizes)), [])
        samples = samples_of(job.info)
        assert samples is not None
        if not calls:
            calls.append(build_call(job.info, samples, job.sizes, job.dtype, device, 0))
        result = calls[0].invoke(fn)  # warm-up: imports, JIT and torch.compile stay out of the timing
        if device != "cuda":
            return float(timing._time_cpu(lambda: calls[0].invoke(fn)))
        if len(calls) == 1:
            calls += timing.more_sets(
                job, calls[0], result, lambda i: build_call(job.info, samples, job.sizes, job.dtype, device, i)
            )
        return float(timing.graphed_timer(fn, calls)())

    def timer(job: timing.Job) -> BenchResult:
        untimed = BenchResult(
            job.info.id, job.spec.backend, job.dtype, job.shapes, describe(job.sizes), "", None, 0, None, None, None
        )
        if job.spec.backend == "torch_compile" and time.perf_counter() - _T0 > options.budget_s:
            return dataclasses.replace(untimed, error=f"skipped: past the {options.budget_s:.0f} s budget")
        try:
            return dataclasses.replace(untimed, time_us=seconds(job, job.spec.load()) * 1e6)
        except Exception as exc:  # one broken backend must not end the run
            return dataclasses.replace(untimed, error=f"{type(exc).__name__}: {exc}")

    started = time.perf_counter()

    def progress(done: int, total: int, label: str) -> None:
        if done % 25 == 0 or done == total:
            log(f"tune: {done}/{total} {label}")

    measured = tuning.measure(jobs, device, timer=timer, progress=progress)
    log(f"tune: done in {time.perf_counter() - started:.0f} s")
    command = "kcatalog tune --device cuda --dtype bfloat16 --out tuned/ (benchmarks/tune_gpu.py)"
    table_path = options.out / f"{str(platform).replace(':', '_')}.yaml"
    # What the timings depend on, recorded for a load to compare: the GPU, versions, each backend's kernel source.
    prov = tuning.provenance(device, command, tuning.required(plain, ops))
    kernels = tuning.kernel_digests(plain, ops)
    table = tuning.table_text(str(platform), prov, measured, written_to=table_path, kernels=kernels)
    table_path.write_text(table, encoding="utf-8")
    print(tuning.format_table(measured), flush=True)

    # 2. the three arms at every bucket, from the medians of this run (benchmarks/tune_compare.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tune_compare

    tune_compare.main([str(table_path), "--out", str(options.out / "tune_h200")])
    if not options.retime:
        return 0

    # 3. optionally, re-time the arms through the op handles: the table loaded as a catalog file (validated as
    # one), against the best single backend called directly and the handle of the catalog without the table
    tuned_dir = plain_dir.parent / "with_table"
    shutil.copytree(plain_dir, tuned_dir)
    (tuned_dir / "tuned").mkdir()
    shutil.copy(table_path, tuned_dir / "tuned" / table_path.name)
    tuned = kcatalog.load_catalog(tuned_dir, cache=False)
    best_single = {}
    for op in ops:
        rows = [m for m in measured if m.op == op and m.medians_us]
        common = set.intersection(*(set(m.medians_us) for m in rows)) if rows else set()
        scores = {b: statistics.geometric_mean([m.medians_us[b] for m in rows]) for b in common}
        if scores:
            best_single[op] = min(scores, key=scores.__getitem__)
    records: list[dict[str, Any]] = []
    by_key = {(j.info.id, describe(j.sizes)): j for j in jobs}
    for m in measured:
        if m.op not in best_single:
            continue
        handle_tuned, handle_plain = tuned.op(m.op), plain.op(m.op)
        single = plain.kernel(m.op, backend=best_single[m.op])
        for shape in m.shapes:
            job = by_key[(m.op, shape)]
            arms = (("tuned", handle_tuned), ("best_single", single), ("default", handle_plain))
            times = {name: seconds(job, fn) * 1e6 for name, fn in arms}
            chosen_tuned = tuned.select(m.op, platform, dtype, tokens=m.tokens).chosen
            chosen_plain = plain.select(m.op, platform, dtype).chosen
            records.append(
                {
                    "op": m.op,
                    "tokens": m.tokens,
                    "shape": shape,
                    "tuned_backend": chosen_tuned.backend if chosen_tuned else None,
                    "best_single_backend": best_single[m.op],
                    "default_backend": chosen_plain.backend if chosen_plain else None,
                    "us": times,
                }
            )
        log(f"re-time: {m.op} T={m.tokens} done")

    lines = summarise(measured, records)
    text = "\n".join(lines)
    print(text, flush=True)
    (options.out / "tune_retimed.txt").write_text(
        table_note(torch, device) + "\n" + tuning.format_table(measured) + "\n\n" + text + "\n"
    )
    document = {
        "device": _device_name(torch, device),
        "platform": str(platform),
        "torch": torch.__version__,
        "commit": os.environ.get("KCATALOG_COMMIT"),
        "tune": [
            {
                "op": m.op,
                "dtype": m.dtype,
                "tokens": m.tokens,
                "shapes": m.shapes,
                "medians_us": m.medians_us,
                "errors": m.errors,
                "chosen": m.best,
            }
            for m in measured
        ],  # fmt: skip
        "notes": notes,
        "best_single": best_single,
        "compare": records,
        "seconds": time.perf_counter() - _T0,
    }
    (options.out / "tune_retimed.json").write_text(json.dumps(document, indent=1) + "\n")
    log(f"wrote {table_path}, tune_h200.md/json, tune_retimed.txt/json")
    return 0


def _device_name(torch: Any, device: str) -> str:
    return str(torch.cuda.get_device_name()) if device == "cuda" else device


def table_note(torch: Any, device: str) -> str:
    name = _device_name(torch, device)
    return f"{name}, torch {torch.__version__}: tuned selection vs best single backend vs default priority"


def summarise(measured: list[Any], records: list[dict[str, Any]]) -> list[str]:
    """Per op and bucket: each arm's geometric mean over the bucket's shapes, and the ratios."""
    from kcatalog.tools.formats import text_table

    rows = [
        ["op", "T", "tuned", "best single", "default", "tuned us", "single us", "default us", "x single", "x default"]
    ]
    worst_single, worst_default = float("inf"), float("inf")
    for m in measured:
        mine = [r for r in records if r["op"] == m.op and r["tokens"] == m.tokens]
        if not mine:
            continue
        g = {k: statistics.geometric_mean([r["us"][k] for r in mine]) for k in ("tuned", "best_single", "default")}
        x_single, x_default = g["best_single"] / g["tuned"], g["default"] / g["tuned"]
        worst_single, worst_default = min(worst_single, x_single), min(worst_default, x_default)
        first = mine[0]
        rows.append(
            [m.op, str(m.tokens), first["tuned_backend"] or "-", first["best_single_backend"],
             first["default_backend"] or "-", f"{g['tuned']:.2f}", f"{g['best_single']:.2f}",
             f"{g['default']:.2f}", f"{x_single:.3f}", f"{x_default:.3f}"]
        )  # fmt: skip
    lines = [text_table(rows)]
    lines.append(f"worst bucket: {worst_single:.3f}x the best single backend, {worst_default:.3f}x the default")
    return lines


if __name__ == "__main__":
    sys.exit(main())
