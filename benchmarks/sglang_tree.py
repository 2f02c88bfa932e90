#!/usr/bin/env python3
"""The static target checks on SGLang's own tree: `kcatalog validate` of SGLang's registry, migrated by
`kcatalog import-registry`, against SGLang's source with the sglang-kernel it pins beside it, against the same
catalog with neither installed.

Run from the repository root, in the project's virtual environment (torch and msgspec importable: the migration
imports SGLang's `sglang.kernels`, as `import-registry` does)::

    python benchmarks/sglang_tree.py            # 7 rounds
    python benchmarks/sglang_tree.py --quick    # 3 rounds: a smoke run, not for reporting

SGLang 0.5.23's and sglang-kernel 0.4.10's wheels come from the package index (`pip download --no-deps`, by
tests/sglang_wheels.py, as the tests fetch them), unpacked into --cache (default: under the system's temporary
directory, kept for the next run): SGLang's `sglang/kernels` and `sgl_kernel`'s Python sources, its compiled
extension modules as empty files of their names (found as compiled, never loaded). The registry is migrated once
(510 specs); the tree is then laid out twice, byte-compiled as pip installs it and without bytecode, and validated
as benchmarks/target_checks.py validates its synthetic tree (the same variants: module indexes cold, a new cache
directory for every run, or warm, the one the warm-up filled; the runs alternated, medians of per-round ratios to
the run with the tree absent). Targets: <= 1.5 in wall time, peak RSS <= 60 MB.
Results: benchmarks/results/sglang_tree.json and benchmarks/results/sglang_tree.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

import sglang_wheels  # noqa: E402
import target_checks as checks  # noqa: E402
from load_time import cli_command, context  # noqa: E402


def lay_out(cache: Path, root: Path) -> tuple[Path, Path, Path]:
    """SGLang's kernels and sgl_kernel, unpacked (once) into `cache`; returns that SGLang site, and the two trees
    under `root` (both packages in one site directory): byte-compiled, and without bytecode."""
    sites = []
    for name, unpack in (
        (f"sglang-{sglang_wheels.SGLANG}", sglang_wheels.sglang_site),
        (f"sglang-kernel-{sglang_wheels.SGL_KERNEL}", sglang_wheels.sgl_kernel_site),
    ):
        (cache / name).mkdir(parents=True, exist_ok=True)
        sites.append(unpack(cache / name))
    compiled, source_only = root / "compiled", root / "source_only"
    for tree in (compiled, source_only):
        for site in sites:
            shutil.copytree(site, tree, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(compiled)], check=True, stdout=subprocess.DEVNULL)
    return sites[0], compiled, source_only


def migrate(sglang: Path, out: Path, scratch: Path) -> str:
    """`kcatalog import-registry sglang.kernels.registry:registry --out OUT`; the line saying what it wrote."""
    env = checks.env_with(sglang, scratch / "migrate")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    command = [*cli_command(), "import-registry", "sglang.kernels.registry:registry", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"import-registry failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return next((line for line in done.stdout.splitlines() if line.startswith("Wrote ")), done.stdout.strip())


# What each way of reading the modules a check reads costs, unprofiled: a TargetChecker finds which (every module it
# indexed, from source), then each pass over all of their sources is timed alone (CPU, best of 3; sources in memory).
FLOOR = r"""
import ast, gc, json, symtable, sys, time
from pathlib import Path
from kcatalog.pyresolve import TargetChecker
from kcatalog.pyresolve.index import index_module
from kcatalog.pyresolve.skeleton import without_bodies
targets = [t for path in sorted(Path(sys.argv[1]).glob("*.yaml")) for t in
           (line.split("target: ", 1)[1].strip().strip('"') for line in path.read_text().splitlines()
            if "target: " in line)]
checker = TargetChecker()
for target in targets:
    checker.check(target)
read = sorted({(name, m.located.location.origin, m.located.location.search is not None)
               for name, m in checker._reader._modules.items()
               if m.index is not None and m.located.location is not None
               and (m.located.location.origin or "").endswith(".py")})
sources = [(name, origin, package, open(origin, "rb").read()) for name, origin, package in read]
hollow = {origin: without_bodies(source, origin) or ast.parse(source) for _, origin, _, source in sources}
passes = {
    "symbol table (the syntax check without bytecode)": lambda n, o, p, s: symtable.symtable(s, o, "exec"),
    "compile to bytecode (every compile-time error)": lambda n, o, p, s: compile(s, o, "exec", dont_inherit=True),
    "ast.parse whole": lambda n, o, p, s: ast.parse(s, o),
    "function bodies left out (scan and parse)": lambda n, o, p, s: without_bodies(s, o),
    "index (of the tree without bodies)": lambda n, o, p, s: index_module(hollow[o], n, p, s),
}
def best(fn):
    times = []
    for _ in range(3):
        gc.collect()
        start = time.process_time()
        for item in sources:
            fn(*item)
        times.append(time.process_time() - start)
    return min(times)
print(json.dumps({"modules": len(sources), "source_bytes": sum(len(s) for *_, s in sources),
                  "passes_s": {name: best(fn) for name, fn in passes.items()}}))
"""


def floor(catalog: Path, site: Path, scratch: Path) -> dict[str, Any]:
    env = checks.env_with(site, scratch / "floor")
    out = subprocess.run([sys.executable, "-c", FLOOR, str(catalog)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return dict(json.loads(out.stdout))


def measure(cache: Path, root: Path, rounds: int) -> dict[str, Any]:
    sglang, compiled, source_only = lay_out(cache, root)
    catalog = root / "catalog"
    migrated = migrate(sglang, catalog, root / "caches")
    validate = [*cli_command(), "validate", str(catalog)]
    variants = {
        checks.INSTALLED: checks.Variant(compiled),
        checks.SOURCE_COLD: checks.Variant(source_only),
        checks.SOURCE_WARM: checks.Variant(source_only, checks.WARM),
        checks.ABSENT: checks.Variant(None),
    }
    measured = checks.alternate(validate, variants, rounds, root / "caches")
    assert not list(source_only.rglob("__pycache__")), "the tree without bytecode got some"
    files = [path for path in source_only.rglob("*.py")]
    targets = sum(text.count("target: ") for text in (p.read_text() for p in catalog.glob("*.yaml")))
    return {
        "tree": {
            "sglang": sglang_wheels.SGLANG,
            "sglang_kernel": sglang_wheels.SGL_KERNEL,
            "python_files": len(files),
            "source_bytes": sum(path.stat().st_size for path in files),
            "targets": targets,
            "import_registry_said": migrated,
        },
        **measured,
        "floor": floor(catalog, source_only, root / "caches"),
        "breakdown": {
            name: checks.breakdown(catalog, site, root / "caches")
            for name, site in ((checks.INSTALLED, compiled), (checks.SOURCE_COLD, source_only))
        },
    }


def markdown(results: dict[str, Any]) -> str:
    ctx, m = results["context"], results["measured"]
    tree = m["tree"]
    fresh = m["breakdown"][checks.SOURCE_COLD]
    syntax = fresh["parts_s"]["syntax check without bytecode (symbol table)"] / fresh["profiled_s"]
    lines = [
        "# Static target checks on SGLang's own tree",
        "",
        checks.context_line(ctx),
        "",
        f"`kcatalog validate DIR` in fresh processes, medians of {results['rounds']} rounds, the runs alternated; "
        "ratios are medians of per-round ratios. Reproduce: `python benchmarks/sglang_tree.py`.",
        "",
        f"The catalog: SGLang {tree['sglang']}'s registry as `kcatalog import-registry "
        f"sglang.kernels.registry:registry` writes it ({tree['import_registry_said']}), {tree['targets']} targets. "
        f"The tree: SGLang's `sglang/kernels` and sglang-kernel {tree['sglang_kernel']}'s `sgl_kernel`, "
        f"{tree['python_files']} Python files, {tree['source_bytes'] / 1e6:.1f} MB of source (the checks read the "
        "modules the targets name and what those re-export). With the tree, validate finds one error, "
        "`sgl_kernel:dsv3_fused_a_gemm` (absent from that sglang-kernel), and warnings for the methods of instances "
        "that only running SGLang makes (`register_fused_op(...)`); without it, every target is KC303.",
        "",
        *checks.variants_list(),
        "",
        f"Peak RSS from {ctx['peak_rss_source']}; wall time includes spawning the process.",
        "",
        *checks.runs_table(m),
        "",
        "The first validate of a tree without bytecode parses every module it reads whole, for its syntax (CPython's "
        f"parser, building the symbol table: {syntax:.0%} of a fresh check's time there, below); no cheaper check "
        "finds every syntax error. Validating the tree again parses nothing. In CI, keeping the cache directory "
        "between runs (KCATALOG_CACHE_DIR in the CI's cache) keeps validate warm.",
        "",
        *floor_table(m, results["targets"]["ratio"]),
        "",
        *checks.breakdown_table(m),
        "",
        *checks.targets_table(results),
    ]
    return "\n".join(lines) + "\n"


def floor_table(m: dict[str, Any], ratio: float) -> list[str]:
    """What one pass over the sources a check reads costs, unprofiled, against what the target leaves for them."""
    floor = m["floor"]
    absent = m["cpu_s"][checks.ABSENT]["median"]
    allowed = (ratio - 1) * absent
    passes = floor["passes_s"]
    syntax = passes["symbol table (the syntax check without bytecode)"]
    rest = passes["function bodies left out (scan and parse)"] + passes["index (of the tree without bodies)"]
    lines = [
        "## What bounds a first check without bytecode",
        "",
        f"Each pass over the {floor['modules']} modules a check of this catalog reads "
        f"({floor['source_bytes'] / 1e6:.1f} MB of source, already in memory), alone, unprofiled, in CPU seconds (best "
        "of 3):",
        "",
        "| pass | CPU s | / allowed |",
        "|---|---:|---:|",
        *(f"| {name} | {value:.3f} | {value / allowed:.2f} |" for name, value in passes.items()),
        "",
        f"The target allows a validate with the tree {ratio - 1:.0%} more than the run without it: {allowed:.3f} s "
        f"of CPU here (the absent run's median, {absent:.3f} s, times {ratio - 1:.1f}). The syntax check alone takes "
        f"{syntax:.3f} s, {syntax / allowed:.1f}x that: a first check without bytecode reaches at best "
        f"{1 + syntax / absent:.2f}x the run without the tree, and {1 + (syntax + rest) / absent:.2f}x with the "
        "bodies left out and the index, before locating and reading a file or writing an index. The symbol table "
        "is the cheapest whole check CPython offers (its parser, building no Python object per node, as ast.parse "
        "does); it finds what the parser and the symbol table reject, but not the few syntax errors only the "
        "compiler raises (`return` or `await` outside a function, `break` outside a loop), which compiling to "
        "bytecode finds, at the cost above. Split "
        f"perfectly over two idle cores, the syntax check, the bodies left out and the index would take "
        f"{(syntax + rest) / 2:.3f} s of wall time ({1 + (syntax + rest) / 2 / absent:.2f}x, counted as above), "
        "before locating, reading or writing anything; kcatalog does not split them (the machines measured here have "
        "two cores, shared).",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds: a smoke run")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the runs (default 7)")
    default_cache = Path(tempfile.gettempdir()) / "kcatalog-sglang-tree"
    parser.add_argument("--cache", type=Path, default=default_cache, help="where the wheels are unpacked (kept)")
    parser.add_argument("--keep", type=Path, default=None, help="lay the trees and the catalog out here and keep them")
    options = parser.parse_args(argv)
    rounds = options.rounds or (3 if options.quick else 7)
    start = time.perf_counter()
    results: dict[str, Any] = {"context": context(), "rounds": rounds, "quick": options.quick}
    results["targets"] = checks.TARGETS
    root = options.keep or Path(tempfile.mkdtemp(prefix="kcatalog-sglang-bench-"))
    try:
        results["measured"] = measure(options.cache, root, rounds)
    except BaseException as exc:  # pytest's skip and fail outcomes, raised by sglang_wheels outside pytest
        if type(exc).__module__.startswith("_pytest"):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
    finally:
        if options.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    results["context"]["loadavg_end"] = os.getloadavg()
    results["elapsed_s"] = time.perf_counter() - start
    results["verdicts"] = checks.verdicts(results["measured"])
    checks.report(results, "sglang_tree", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
