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
        *checks.breakdown_table(m),
        "",
        *checks.targets_table(results),
    ]
    return "\n".join(lines) + "\n"


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
