#!/usr/bin/env python3
"""How long migrating a Python kernel registry takes, and how fast the catalog it writes loads.

Run from the repository root::

    python benchmarks/import_registry.py           # 7 rounds
    python benchmarks/import_registry.py --quick   # 3 rounds: a smoke run, not for reporting

The registry is tests/registry_builder.py's throwaway one (enum backends and devices, (major, minor) arch
tuples, dotted Class.method targets, shared priority tuples), sized to at least 500 specs, written under a
temporary directory. Every figure is a fresh process, the peers of one figure alternated round by round
(A B C A B C ...; benchmarks/BENCH_METHOD.md), after one uncounted warm-up of each (which also writes .pyc):

(a) `kcatalog import-registry MODULE:OBJECT --out DIR --force`, the whole command (interpreter start, importing
    the registry, converting, writing), against `python -c pass` and `import` of the registry module alone
    (the registry's own startup). Target: <= 1 s.
(b) A warm load of the imported catalog: `python -c "import kcatalog; kcatalog.load_catalog([DIR])"`, its
    cache entry written by an earlier process (the command asserts the hit), against a cold load
    (`cache=False`: every file parsed and validated) and the registry module's import. Target: <= 0.2 s.

Results: benchmarks/results/import_registry.json and benchmarks/results/import_registry.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
sys.path[:0] = [str(HERE), str(REPO / "tests")]

from load_time import alternate, context, paired_ratio, summary  # noqa: E402
from registry_builder import write_registry  # noqa: E402

PY = sys.executable
TARGETS = {"import_s": 1.0, "warm_load_s": 0.2}
SPECS = 500
WARM = r"""
import sys, kcatalog
catalog = kcatalog.load_catalog([sys.argv[1]])
assert catalog.cache_status.outcome.value == "hit", catalog.cache_status
assert len(catalog.specs()) == int(sys.argv[2])
"""
COLD = r"""
import sys, kcatalog
assert len(kcatalog.load_catalog([sys.argv[1]], cache=False).specs()) == int(sys.argv[2])
"""


def run_process(cmd: Sequence[str], env: dict[str, str]) -> dict[str, float]:
    """Wall and CPU (user + system) seconds of one fresh process, reaped with os.wait4."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} exited {code}:\n{err.read().decode(errors='replace')}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime}


def registry_of(root: Path, specs: int) -> tuple[str, str, int]:
    """The smallest throwaway registry with at least `specs` specs: (reference, module, its spec count)."""
    env = _env(root, root / "cache")
    for ops_per_group in range(20, 200):
        files = write_registry(root, ops_per_group=ops_per_group, package="kcbench_reg")
        count = subprocess.run(
            # -B: no .pyc, which a rewrite within the same second would not invalidate
            [PY, "-B", "-c", f"import {files.package}.registry as r; print(len(r.REGISTRY.all_specs()))"],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout
        if int(count) >= specs:
            return files.reference, f"{files.package}.registry", int(count)
    raise RuntimeError("no registry size reached the spec count")


def _env(root: Path, cache: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    for name in ("KCATALOG_OVERRIDES", "KCATALOG_BACKEND", "KCATALOG_NO_CACHE"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(root)])
    env["KCATALOG_CACHE_DIR"] = str(cache)
    return env


def measure(root: Path, rounds: int) -> dict[str, Any]:
    reference, module, count = registry_of(root, SPECS)
    env = _env(root, root / "cache")
    out = root / "imported"
    imported = [PY, "-m", "kcatalog", "import-registry", reference, "--out", str(out), "--force"]
    printed = subprocess.run(imported, check=True, env=env, cwd=REPO, capture_output=True, text=True).stdout
    ops = int(re.search(r": (\d+) ops?, ", printed).group(1))  # type: ignore[union-attr]
    # An earlier process writes the load cache's entry, which (b)'s warm load then reads.
    subprocess.run([PY, "-c", COLD.replace("cache=False", "cache=True"), str(out), str(count)], check=True, env=env)
    peers_a = {
        "import the registry module": [PY, "-c", f"import {module}"],
        "python -c pass": [PY, "-c", "pass"],
        "kcatalog import-registry": imported,
    }
    peers_b = {
        "import the registry module": [PY, "-c", f"import {module}"],
        "kcatalog load, cold": [PY, "-c", COLD, str(out), str(count)],
        "kcatalog load, warm": [PY, "-c", WARM, str(out), str(count)],
    }
    results: dict[str, Any] = {"specs": count, "ops": ops, "rounds": rounds, "figures": {}}
    for figure, peers in (("a", peers_a), ("b", peers_b)):
        samples = alternate(peers, lambda cmd: run_process(cmd, env), rounds)
        results["figures"][figure] = {
            name: {"wall": summary(s["wall"]), "cpu": summary(s["cpu"]), "wall_samples": s["wall"]}
            for name, s in samples.items()
        }
        first = next(iter(peers))
        last = list(peers)[-1]
        results["figures"][figure]["ratio"] = {
            "of": last,
            "to": first,
            "wall": paired_ratio(samples[last]["wall"], samples[first]["wall"]),
        }
    return results


def markdown(results: dict[str, Any], ctx: dict[str, Any]) -> str:
    a, b = results["figures"]["a"], results["figures"]["b"]
    lines = [
        "# Migrating a registry: import time and the imported catalog's load time",
        "",
        f"{ctx['date']} · `{ctx['machine']}` · nproc {ctx['nproc']} · Python {ctx['python']} · commit "
        f"`{ctx['commit'][:12]}`{' (dirty tree)' if ctx['dirty'] else ''} · load average at start "
        f"{', '.join(f'{x:.1f}' for x in ctx['loadavg_start'])}",
        "",
        f"A throwaway registry of the real shape (tests/registry_builder.py): {results['specs']} specs over "
        f"{results['ops']} ops in 5 groups. Medians of {results['rounds']} fresh processes per figure, peers "
        "alternated in the same run, after one uncounted warm-up each. Reproduce: "
        "`python benchmarks/import_registry.py`.",
        "",
    ]
    for title, figure, target in (
        ("(a) `kcatalog import-registry MODULE:OBJECT --out DIR` (whole process)", a, TARGETS["import_s"]),
        ("(b) Loading the imported catalog in a fresh process", b, TARGETS["warm_load_s"]),
    ):
        lines += [
            f"## {title}",
            "",
            "| command | wall s (median) | min–max s | CPU s (median) |",
            "|---|---:|---:|---:|",
        ]
        for name, stats in figure.items():
            if name == "ratio":
                continue
            w, c = stats["wall"], stats["cpu"]
            lines.append(f"| {name} | {w['median']:.3f} | {w['min']:.3f}–{w['max']:.3f} | {c['median']:.3f} |")
        ratio = figure["ratio"]
        measured = figure[ratio["of"]]["wall"]["median"]
        verdict = "met" if measured <= target else "MISSED"
        lines += [
            "",
            f"{ratio['of']} / {ratio['to']} (median of per-round ratios): {ratio['wall']:.2f}. "
            f"Target <= {target} s: {verdict} ({measured:.3f} s).",
            "",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--quick", action="store_true", help="3 rounds (smoke run, not for reporting)")
    options = parser.parse_args(argv)
    rounds = 3 if options.quick else 7
    ctx = context()
    with tempfile.TemporaryDirectory(prefix="kcatalog-import-bench-") as tmp:
        results = measure(Path(tmp), rounds)
    text = markdown(results, ctx)
    print(text)
    if not options.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "import_registry.json").write_text(json.dumps({"context": ctx, **results}, indent=2) + "\n")
        (RESULTS / "import_registry.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
