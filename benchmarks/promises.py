#!/usr/bin/env python3
"""Measure which backends keep which promise of their outputs: for every op x backend x dtype that runs on the
device, declared or not, whether repeated runs are bitwise equal (deterministic) and whether each row computed
alone is bitwise equal to the same row inside the batch (batch_invariant), on the manifests' sample shapes.

The checks are those of `kcatalog test` (kcatalog.tools.promises), run for every backend instead of only the
promises declared: what the manifests may declare. Run from the repository root::

    PYTHONPATH=src python benchmarks/promises.py --device cpu --interpret --out benchmarks/results   # ~3 min
    # an H200, under 5 minutes in all (benchmarks/README.md): the eager backends, then torch.compile (a compile
    # per shape: fewer shapes, one dtype), each stopping by its --budget-s
    PYTHONPATH=src python benchmarks/promises.py --device cuda --backends torch,aten,triton --shapes test,decode \
        --sizes "T=2048 H=4096,32768 I=14336" --repeats 10 --budget-s 180 --tag h200 --detail --out "$OUT"
    PYTHONPATH=src python benchmarks/promises.py --device cuda --backends torch_compile --shapes decode \
        --sizes "T=2048 H=32768 I=14336" --dtypes bfloat16 --budget-s 75 --tag h200_compile --out "$OUT"

Each prints (and its .md ends with) the manifest lines that would declare what it measured, as a diff per backend
(`-` the lines it has, `+` those to put in their place, under the manifest's path and line).

Writes under ``--out`` (default: $OUT, or ./out) ``promises_<device>.json``: the machine, the versions, the commit,
and one line per op x backend x promise (the device kind checked, whether the manifest declares it, whether it held
in every check, the dtypes and size sets checked per pass, the broken checks' count and first few); and
``promises_<device>.md``: the same as a table, and the manifest lines that would declare what this run measured
(printed too: for a GPU, the YAML change to make). ``--detail`` also writes ``promises_<device>_detail.json``, every
check with its seed. ``--tag`` names the files otherwise (``--tag h200``). Exit status 1 when a promise a manifest
declares is broken. Benchmarks never assert a time: this one times nothing (it prints the seconds per backend).
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
    parser.add_argument("--dtypes", default="", help="only these dtypes, comma-separated (default: the op's)")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="start no check after this many seconds: the rest are left out, named in the results, and the "
        "backends they belong to get no declaration (default: no limit)",
    )
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--out", default=os.environ.get("OUT") or "out")
    parser.add_argument("--tag", default="", help="the results' name: promises_<tag>.* (default: the device)")
    parser.add_argument("--detail", action="store_true", help="also write every check: promises_<tag>_detail.json")
    args = parser.parse_args(argv)
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton

    import kcatalog
    from kcatalog.tools.conformance import select_ops
    from kcatalog.tools.inputs import describe
    from kcatalog.tools.promises import plan_promises, run_promises

    catalog = kcatalog.load_catalog(cache=False)
    ops = select_ops(catalog, [p for p in args.ops.split(",") if p])
    checks: list[dict[str, Any]] = []
    left_out: set[str] = set()  # 'op [backend]' with checks the budget left out
    seconds: dict[str, float] = defaultdict(float)
    began = time.perf_counter()
    passes: list[tuple[str, dict[str, tuple[Any, ...]] | None]] = [(s, None) for s in args.shapes.split(",") if s]
    if args.sizes:
        passes.append(("test", _sizes(args.sizes)))
    for shapes, sizes in passes:
        label = shapes if sizes is None else f"test with {args.sizes}"
        cases, notes = plan_promises(
            catalog,
            ops,
            device=args.device,
            backends=[b for b in args.backends.split(",") if b],
            dtypes=[d for d in args.dtypes.split(",") if d],
            base_seed=args.seed,
            interpret=args.interpret,
            every=True,
            shapes=shapes,
            sizes=sizes,
        )
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        # Cases of the same inputs next to each other: run_promises builds them once for all backends.
        cases.sort(key=lambda c: (c.info.id, c.dtype, c.seed, describe(c.sizes)))
        mark = time.perf_counter()
        if args.budget_s and mark - began > args.budget_s:
            left_out.update(f"{c.info.id} [{c.spec.backend}]" for c in cases)
            continue
        for index, (case, result) in enumerate(zip(cases, run_promises(cases, args.device, args.repeats))):
            now = time.perf_counter()
            seconds[case.spec.backend] += now - mark
            mark = now
            where = _device(case, args)
            declared = case.spec.keeps(case.promise, where)
            checks.append({**result.as_dict(), "shapes": label, "device": where, "declared": declared})
            if not result.passed:
                print(
                    f"{result.op} [{result.backend}] {result.promise} {result.dtype} {result.sizes}: {result.message}"
                )
            if args.budget_s and now - began > args.budget_s:
                left_out.update(f"{c.info.id} [{c.spec.backend}]" for c in cases[index + 1 :])
                break
        so_far = {name: round(s) for name, s in sorted(seconds.items())}
        print(f"pass {label}: {len(cases)} checks; {time.perf_counter() - began:.0f} s so far {so_far}", flush=True)
        rows = write_results(
            args, checks, seconds, began, catalog, left_out, final=False
        )  # a run cut short leaves its passes
    rows = write_results(args, checks, seconds, began, catalog, left_out, final=True)
    broken = [r for r in rows if r["declared"] and not r["held"]]
    for r in broken:
        print(
            f"DECLARED BUT BROKEN: {r['op']} [{r['backend']}] {r['promise']} on {r['device']}: {r['first_broken'][0]}"
        )
    return 1 if broken else 0


def write_results(
    args: argparse.Namespace,
    checks: list[dict[str, Any]],
    seconds: dict[str, float],
    began: float,
    catalog: Any,
    left_out: set[str],
    *,
    final: bool,
) -> list[dict[str, Any]]:
    """Write the summary (and with --detail every check) of the checks so far; at the end, print the declarations."""
    import torch

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
        "seconds_by_backend": {name: round(s, 1) for name, s in sorted(seconds.items())},
        "commit": os.environ.get("KCATALOG_COMMIT") or _git_head(),
        "argv": sys.argv[1:],
        "complete": final and not left_out,
        "left_out": sorted(left_out),  # checks the budget left out, of these backends
    }
    rows = summarise(checks)
    declarations = declare(catalog, rows, args.interpret, left_out)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"promises_{args.tag or args.device}"
    (out / f"{name}.json").write_text(compact_json(environment, rows))
    (out / f"{name}.md").write_text(markdown(rows, environment, declarations))
    if args.detail:
        (out / f"{name}_detail.json").write_text(json.dumps({"environment": environment, "checks": checks}) + "\n")
    if final:
        print(f"wrote {out / name}.json and .md{' and _detail.json' if args.detail else ''}")
        print(f"seconds by backend: {environment['seconds_by_backend']}")
        print("\n".join(declarations))
    return rows


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


FIRST_BROKEN = 3  # broken checks a summary row quotes (all are counted)


def summarise(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per op x backend x promise x device kind: held in every check or not, what was checked."""
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in checks:
        groups[c["op"], c["backend"], c["promise"], c["device"]].append(c)
    rows = []
    for (op, backend, promise, device), group in sorted(groups.items()):
        shapes: dict[str, list[str]] = {}
        for c in group:
            listed = shapes.setdefault(c["shapes"], [])
            if c["sizes"] not in listed:
                listed.append(c["sizes"])
        failed = [c for c in group if not c["passed"]]
        for listed in shapes.values():
            listed.sort(key=_natural)
        rows.append(
            {
                "op": op,
                "backend": backend,
                "promise": promise,
                "device": device,
                "declared": any(c["declared"] for c in group),
                "held": not failed,
                "checks": len(group),
                "dtypes": list(dict.fromkeys(c["dtype"] for c in group)),
                "broken": len(failed),
                "first_broken": [f"{c['dtype']} {c['sizes']}: {c['message']}" for c in failed[:FIRST_BROKEN]],
                "shapes": shapes,
            }
        )
    return rows


def _natural(sizes: str) -> list[tuple[str, tuple[int, int | str]]]:
    """'T=7 H=1000' ordered as the samples list their sizes: numbers as numbers."""
    parts = (item.partition("=") for item in sizes.split())
    return [(name, (0, int(v)) if v.isdigit() else (1, v)) for name, _, v in parts]


def compact_json(environment: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The environment on one line, then one line per summary row: a file that diffs row by row."""
    lines = [f'{{"environment": {json.dumps(environment)},', ' "summary": [']
    lines += [f"  {json.dumps(row)}{',' if i < len(rows) - 1 else ''}" for i, row in enumerate(rows)]
    return "\n".join([*lines, " ]}", ""])


def markdown(rows: list[dict[str, Any]], environment: dict[str, Any], declarations: list[str]) -> str:
    """Per op and backend, each promise: held in every check, or the first check that broke it; then what the
    manifests would declare."""
    table: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        table[r["op"], r["backend"], r["device"]][r["promise"]] = r
    lines = [
        f"# Promises measured on {environment['device']}",
        "",
        f"{environment['date']}, commit {environment['commit']}, torch {environment['torch']} "
        f"({environment['torch_threads']} CPU threads), triton {environment['triton']}"
        f"{' (interpreter)' if environment['interpret'] else ''}; {environment['repeats']} runs per determinism "
        f"check; {environment['seconds']} s; written by "
        f"`python benchmarks/promises.py {' '.join(environment['argv'])}`"
        f"{'.' if environment['complete'] else ' (cut short: the checks done so far).'}",
        *([f"Left out by --budget-s: {', '.join(environment['left_out'])}."] if environment["left_out"] else []),
        *([f"The table is {environment['summarised']}."] if "summarised" in environment else []),
        "",
        "| op | backend | device | deterministic | batch_invariant |",
        "| --- | --- | --- | --- | --- |",
    ]
    for (op, backend, device), by_promise in sorted(table.items()):
        cells = [_cell(by_promise.get(p)) for p in ("deterministic", "batch_invariant")]
        lines.append(f"| {op} | {backend} | {device} | {cells[0]} | {cells[1]} |")
    lines += ["", "A cell: whether every check held (how many, over dtypes and size sets); else the first that did "
              "not; (declared) where the manifest promises it.", ""]  # fmt: skip
    lines += ["## Declarations", "", "What the manifests would declare from the shapes this run checked:", ""]
    lines += ["```", *declarations, "```", ""]
    return "\n".join(lines)


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    declared = " (declared)" if row["declared"] else ""
    if row["held"]:
        return f"holds ({row['checks']} checks){declared}"
    first = row["first_broken"][0]
    return f"**broken** in {row['broken']} of {row['checks']}{declared}: {first}".replace("|", "\\|")


def declare(catalog: Any, rows: list[dict[str, Any]], interpret: bool, left_out: set[str]) -> list[str]:
    """The manifest lines that declare what this run measured on its device kind, for each backend whose
    declaration differs: its manifest and line, the lines it has now and the lines to put in their place. Only as
    good as the shapes the run checked; none for a backend whose checks the budget cut short."""
    from kcatalog import Promise
    from kcatalog.read.files import display_path

    if interpret:
        return ["# under the Triton interpreter: numpy, not the GPU; declare nothing from this run"]
    held: dict[tuple[str, str, str], set[Promise]] = defaultdict(set)
    for r in rows:
        key = (r["op"], r["backend"], r["device"])
        held.setdefault(key, set())
        if r["held"]:
            held[key].add(Promise(r["promise"]))
    lines: list[str] = []
    for (op, backend, device), kept in sorted(held.items()):
        if f"{op} [{backend}]" in left_out:
            lines.append(f"# {op} [{backend}]: some checks left out (--budget-s): no declaration from this run")
            continue
        spec = catalog.info(op).backends[backend]
        where = f"{display_path(Path(spec.location.path))}:{spec.location.line}"
        measured = Promise.BATCH_INVARIANT if len(kept) == len(Promise) else Promise.DETERMINISTIC if kept else None
        now = {p.promise: p.devices for p in spec.promises}
        wanted = dict(now)
        for promise in Promise:
            devices = wanted.get(promise, ())
            if devices is None:  # `true`: every device kind
                if measured is None or not measured.implies(promise):
                    lines.append(
                        f"# {where}: {op} [{backend}] declares {promise.value}: true, which {device} "
                        "breaks: list the device kinds it holds on instead"
                    )
                continue
            keep = promise is measured
            changed = tuple(sorted({*devices, device} if keep else set(devices) - {device}))
            if changed:
                wanted[promise] = changed
            else:
                wanted.pop(promise, None)
        if wanted == now:
            continue
        lines.append(f"# {where}: {op} [{backend}] measured on {device}: {_text(measured)}")
        lines += [f"-        {line}" for line in _yaml(now)]
        lines += [f"+        {line}" for line in _yaml(wanted)]
    return lines or ["# every backend declares what this run measured: nothing to change"]


def _text(promise: Any) -> str:
    return "neither promise held" if promise is None else f"{promise.value} held"


def _yaml(declared: dict[Any, tuple[str, ...] | None]) -> list[str]:
    """A backend's promise lines as its manifest writes them, batch_invariant first."""
    ordered = sorted(declared.items(), key=lambda item: item[0].value)
    return [f"{p.value}: {'true' if d is None else '[' + ', '.join(d) + ']'}" for p, d in ordered]


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
