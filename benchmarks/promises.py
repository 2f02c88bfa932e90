#!/usr/bin/env python3
"""Measure which backends keep which promise of their outputs: for every op x backend x dtype that runs on the
device, declared or not, whether repeated runs are bitwise equal (deterministic) and whether each row computed
alone is bitwise equal to the same row inside the batch (batch_invariant), on the manifests' sample shapes.

The checks are those of `kcatalog test` (kcatalog.tools.promises), run for every backend instead of only the
promises declared: what the manifests may declare. Run from the repository root::

    PYTHONPATH=src python benchmarks/promises.py --device cpu --interpret --out benchmarks/results   # ~3 min
    PYTHONPATH=src python benchmarks/promises.py --device cuda --repeats 10 --out "$OUT"             # an H200

Writes ``promises_<device>.json`` (every check, the machine, the versions, the commit) and ``promises_<device>.md``
(per op and backend: held, or the first difference found) under ``--out`` (default: $OUT, or ./out); ``--tag``
names the files otherwise (``--tag h200``). Exit status 1 when a promise a manifest declares is broken.
Benchmarks never assert a time: this one times nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--interpret", action="store_true", help="run the Triton kernels on the CPU (interpreter)")
    parser.add_argument(
        "--shapes", default="test,decode", help="the samples' shapes, comma-separated: test,decode,prefill"
    )
    parser.add_argument(
        "--sizes",
        default="",
        help="one more pass, over the test shapes with these sizes where an op declares them: 'T=8 H=40000,131072'",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs compared for `deterministic` (default 3)")
    parser.add_argument("--ops", default="", help="op ids or globs, comma-separated (default: every op)")
    parser.add_argument("--backends", default="", help="only these backends, comma-separated (default: every one)")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--out", default=os.environ.get("OUT") or "out")
    parser.add_argument("--tag", default="", help="the results' name: promises_<tag>.* (default: the device)")
    args = parser.parse_args(argv)
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton

    import torch

    import kcatalog
    from kcatalog.tools.conformance import select_ops
    from kcatalog.tools.promises import plan_promises, run_promises

    catalog = kcatalog.load_catalog(cache=False)
    ops = select_ops(catalog, [p for p in args.ops.split(",") if p])
    results: list[dict[str, Any]] = []
    began = time.perf_counter()
    passes: list[tuple[str, dict[str, tuple[Any, ...]] | None]] = [(s, None) for s in args.shapes.split(",") if s]
    if args.sizes:
        passes.append(("test", _sizes(args.sizes)))
    for shapes, sizes in passes:
        cases, notes = plan_promises(
            catalog,
            ops,
            device=args.device,
            backends=[b for b in args.backends.split(",") if b],
            base_seed=args.seed,
            interpret=args.interpret,
            every=True,
            shapes=shapes,
            sizes=sizes,
        )
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        for case, result in zip(cases, run_promises(cases, args.device, args.repeats)):
            declared = case.spec.keeps(case.promise, _device(case, args))
            label = shapes if sizes is None else f"test with {args.sizes}"
            results.append({**result.as_dict(), "shapes": label, "declared": declared})
            if not result.passed:
                print(
                    f"{result.op} [{result.backend}] {result.promise} {result.dtype} {result.sizes}: {result.message}"
                )
    environment = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "triton": _version("triton"),
        "interpret": args.interpret,
        "repeats": args.repeats,
        "seed": args.seed,
        "seconds": round(time.perf_counter() - began, 1),
        "commit": os.environ.get("KCATALOG_COMMIT") or _git_head(),
        "argv": sys.argv[1:],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"promises_{args.tag or args.device}"
    (out / f"{name}.json").write_text(json.dumps({"environment": environment, "results": results}, indent=1) + "\n")
    (out / f"{name}.md").write_text(summary(results, environment))
    print(f"wrote {out / name}.json and .md")
    broken = [r for r in results if r["declared"] and not r["passed"]]
    for r in broken:
        print(f"DECLARED BUT BROKEN: {r['op']} [{r['backend']}] {r['promise']} {r['dtype']} {r['sizes']}")
    return 1 if broken else 0


def _sizes(text: str) -> dict[str, tuple[Any, ...]]:
    """'T=8 H=40000,131072' as {'T': (8,), 'H': (40000, 131072)}; numbers as ints, anything else as text."""
    found = {}
    for item in text.split():
        name, _, values = item.partition("=")
        found[name] = tuple(int(v) if v.lstrip("-").isdigit() else v for v in values.split(","))
    return found


def _device(case: Any, args: argparse.Namespace) -> str:
    """The device kind whose promise the case checks (a Triton kernel under the interpreter: cuda's)."""
    from kcatalog.platform import Platform
    from kcatalog.tools.conformance import tested_as

    return tested_as(case.spec, Platform(args.device), case.dtype, args.interpret).device


def summary(results: list[dict[str, Any]], environment: dict[str, Any]) -> str:
    """Per op and backend, each promise: held in every check, or the first check that broke it."""
    table: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        table[r["op"], r["backend"]][r["promise"]].append(r)
    lines = [
        f"# Promises measured on {environment['device']}",
        "",
        f"{environment['date']}, commit {environment['commit']}, torch {environment['torch']} "
        f"({environment['torch_threads']} CPU threads), triton {environment['triton']}"
        f"{' (interpreter)' if environment['interpret'] else ''}; {environment['repeats']} runs per determinism "
        f"check; written by `python benchmarks/promises.py {' '.join(environment['argv'])}`.",
        "",
        "| op | backend | deterministic | batch_invariant |",
        "| --- | --- | --- | --- |",
    ]
    for (op, backend), by_promise in sorted(table.items()):
        cells = [_cell(by_promise.get(p, [])) for p in ("deterministic", "batch_invariant")]
        lines.append(f"| {op} | {backend} | {cells[0]} | {cells[1]} |")
    lines += ["", "A cell: whether every check held (how many, over dtypes and size sets); else the first that did "
              "not; (declared) where the manifest promises it.", ""]  # fmt: skip
    return "\n".join(lines)


def _cell(checks: list[dict[str, Any]]) -> str:
    if not checks:
        return "-"
    declared = " (declared)" if any(c["declared"] for c in checks) else ""
    failed = [c for c in checks if not c["passed"]]
    if not failed:
        return f"holds ({len(checks)} checks){declared}"
    first = failed[0]
    return (
        f"**broken** in {len(failed)} of {len(checks)}{declared}: {first['dtype']} {first['sizes']}: {first['message']}"
    ).replace("|", "\\|")


def _version(module: str) -> str | None:
    try:
        return str(__import__(module).__version__)
    except Exception:  # not installed here
        return None


def _git_head() -> str | None:
    try:
        found = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    except OSError:
        return None
    return found.stdout.strip() or None


if __name__ == "__main__":
    raise SystemExit(main())
