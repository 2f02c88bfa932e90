#!/usr/bin/env python3
"""What the static target checks cost on a real-sized tree: `kcatalog validate` with the targets' package
installed against the same catalog with it absent.

Run from the repository root, in the project's virtual environment::

    python benchmarks/target_checks.py            # 7 rounds
    python benchmarks/target_checks.py --quick    # 3 rounds: a smoke run, not for reporting

A package of 302 modules (about 3 MB of source, shaped like a serving engine's layers: kernels as functions
with bodies, classes whose methods come from base classes in other modules, `__all__`, re-exports through
sibling modules and star imports in every subpackage's `__init__`) is written under a temporary directory,
with a catalog of 250 ops x 3 backends (as benchmarks/synthetic_catalog.py writes them): 500 distinct targets
into the package (functions, inherited methods, names re-exported through a package's star imports and
through chains of modules) and 250 into a package that is not installed (KC303 warnings in both runs).

Each figure is a fresh process, `kcatalog validate DIR` of this tree's kcatalog (src/ first on PYTHONPATH), the
runs alternated round by round (A B C D A B C D ...), after one uncounted warm-up of each. Target checks keep
each module's index in the cache directory (cache/module_indexes.py), so each run is given one: "cold", a new
empty one for every run (the first validate of a tree), or "warm", one the warm-up filled (every later one):

(A)  the package on PYTHONPATH, byte-compiled as pip installs it (`compileall`), indexes cold: the bytecode
     vouches that every module compiles, so modules are parsed without their function bodies (skeleton.py);
(B)  the same package with no bytecode (a tree never imported), indexes cold: each module's syntax is also
     checked whole (its symbol table built);
(C)  the same, indexes warm: every module's index is read from the cache directory, nothing is parsed;
(D)  the package absent: every target into it is a KC303 warning (looked for, not found), nothing is read.

Reported: medians of wall time, CPU time and peak RSS (GNU time's %M: see load_time.run_process), and the
medians of the per-round ratios to (D). Targets: <= 1.5 in wall time, peak RSS <= 60 MB.
Results: benchmarks/results/target_checks.json and benchmarks/results/target_checks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))

import synthetic_catalog  # noqa: E402
from load_time import ENV, GNU_TIME, cli_command, context, summary  # noqa: E402

PACKAGE = "kcbench"
GROUPS = 10  # subpackages kcbench.layers.g0 ... g9
MODULES_PER_GROUP = 28  # + their __init__s, the base modules and the top-level package: 300 modules
BASE_MODULES = 9
OPS = 250
TARGETS = {"ratio": 1.5, "rss_mb": 60.0}

# -- the package ----------------------------------------------------------------------------------------------

BASE = '''\
"""Base classes of the synthetic layers ({b}): one forward per platform, as SGLang's CustomOp."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["CustomOp{b}", "Fused{b}"]


class CustomOp{b}:
    """Dispatches to the forward of the platform it runs on."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        self.hidden_size = hidden_size
        self.eps = eps
        self._forward = self.dispatch_forward()

    def dispatch_forward(self):
        # Chosen once: the platform does not change under a running process.
        if self.is_cuda():
            return self.forward_cuda
        if self.is_hip():
            return self.forward_hip
        return self.forward_native

    def is_cuda(self) -> bool:
        return False

    def is_hip(self) -> bool:
        return False

    def forward(self, *args, **kwargs):
        return self._forward(*args, **kwargs)

    def forward_native(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * (variance + self.eps).rsqrt() * weight

    def forward_cuda(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.forward_native(x, weight)

    def forward_hip(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.forward_native(x, weight)

    def forward_torch_compile(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.forward_native(x, weight)

    def extra_repr(self) -> str:
        return f"hidden_size={{self.hidden_size}}, eps={{self.eps}}"


class Fused{b}(CustomOp{b}):
    """Adds the residual before normalising, in one pass."""

    def forward_native(self, x, weight, residual=None):
        if residual is not None:
            x = x + residual
        scale = 1.0 / math.sqrt(self.hidden_size)
        return super().forward_native(x * scale, weight), x
'''

FUNCTION = '''

def {name}(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Kernel {name}: y = x * rsqrt(mean(x^2, -1) + eps) * weight, for rows of x.

    The reference is written for clarity, not speed: the fused kernels are checked against it. Inputs of
    any leading shape are accepted; the last dimension is normalised. Low-precision inputs are upcast to
    float32 for the reduction, as the fused kernels do, and the result is cast back to the input's dtype.
    """
    if x.shape[-1] != weight.shape[-1]:
        raise ValueError(f"hidden size mismatch: {{x.shape[-1]}} != {{weight.shape[-1]}}")
    orig_dtype = x.dtype
    x = x.float()
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    inv = (variance + eps).rsqrt()
    out = x * inv
    # Scale in float32, cast once at the end: matches the fused kernels' rounding.
    out = out * weight.float()
    for _ in range({k}):
        out = out.contiguous()
    return out.to(orig_dtype)
'''

CLASS = '''

class {name}({base}):
    """Layer {name}: the norm of one decoder block, as a module with per-platform forwards."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, *, group_size: int = {k}) -> None:
        super().__init__(hidden_size, eps)
        self.group_size = group_size
        self.weight_shape = (hidden_size,)
        self.buffers = {{"scale": None, "zero": None}}

    def forward_cuda(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        groups = x.shape[-1] // self.group_size
        view = x.view(*x.shape[:-1], groups, self.group_size)
        variance = view.pow(2).mean(-1, keepdim=True)
        normed = view * (variance + self.eps).rsqrt()
        return normed.view_as(x) * weight

    def extra_repr(self) -> str:
        return f"{{super().extra_repr()}}, group_size={{self.group_size}}"
'''


def module_source(group: int, index: int) -> tuple[str, list[str]]:
    """A layers module: 8 kernels, 3 layer classes on base classes from another module, a re-export."""
    base = (group * MODULES_PER_GROUP + index) % BASE_MODULES
    functions = [f"kernel_{group}_{index}_{k}" for k in range(8)]
    classes = [f"Layer_{group}_{index}_{c}" for c in range(3)]
    lines = [
        f'"""Synthetic kernels of group {group}, module {index}: generated by benchmarks/target_checks.py."""',
        "",
        "from __future__ import annotations",
        "",
        "import math",
        "from typing import TYPE_CHECKING",
        "",
        f"from {PACKAGE}.base.ops_{base} import CustomOp{base}",
        f"from {PACKAGE}.base import ops_{(base + 1) % BASE_MODULES} as other_base",
    ]
    if index > 0:  # a chain of re-exports through the siblings: mod_i re-exports mod_{i-1}'s first kernel
        lines.append(f"from .mod_{index - 1} import chained_{group} as chained_{group}")
    lines += ["", "if TYPE_CHECKING:", "    import torch", ""]
    names = [*functions, *classes, f"chained_{group}"]
    lines.append(f"__all__ = {names!r}")
    body = "\n".join(lines) + "\n"
    if index == 0:
        body += f"\n\ndef chained_{group}(x, weight, eps=1e-6):\n    return x\n"
    for k, name in enumerate(functions):
        body += FUNCTION.format(name=name, k=k + 1)
    for c, name in enumerate(classes):
        base_expr = f"CustomOp{base}" if c != 1 else f"other_base.Fused{(base + 1) % BASE_MODULES}"
        body += CLASS.format(name=name, base=base_expr, k=16 * (c + 1))
    return body, names


def write_package(root: Path) -> tuple[list[str], int, int]:
    """The package under root; the targets it offers, its module count and its bytes of source."""
    package = root / PACKAGE
    (package / "base").mkdir(parents=True)
    (package / "layers").mkdir()
    files: dict[Path, str] = {
        package / "__init__.py": '"""A synthetic package of kernels."""\n\nfrom .layers import g0 as first_group\n',
        package / "base" / "__init__.py": '"""Base classes."""\n',
        package / "layers" / "__init__.py": '"""The layers, one subpackage per group."""\n',
    }
    for b in range(BASE_MODULES):
        files[package / "base" / f"ops_{b}.py"] = BASE.format(b=b)
    targets: list[str] = []
    for group in range(GROUPS):
        directory = package / "layers" / f"g{group}"
        directory.mkdir()
        stars = "".join(f"from .mod_{i} import *\n" for i in range(MODULES_PER_GROUP))
        files[directory / "__init__.py"] = f'"""Group {group}: every module\'s kernels, re-exported."""\n\n{stars}'
        for index in range(MODULES_PER_GROUP):
            source, names = module_source(group, index)
            files[directory / f"mod_{index}.py"] = source
            module = f"{PACKAGE}.layers.g{group}.mod_{index}"
            targets += [
                f"{module}:{names[index % 8]}",  # a function
                f"{module}:{names[8 + index % 3]}.forward_torch_compile",  # inherited from another module
                f"{PACKAGE}.layers.g{group}:{names[(index + 3) % 8]}",  # through the package's star imports
                f"{module}:chained_{group}",  # through a chain of re-exports
                f"{PACKAGE}.layers.g{group}:{names[8 + (index + 1) % 3]}.forward_native",  # star import + base
            ]
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    return targets, len(files), sum(len(text.encode()) for text in files.values())


def write_catalog(directory: Path, targets: Sequence[str]) -> Path:
    """250 ops x 3 backends: torch and triton into the package (500 distinct targets), aot not installed."""
    # Spread over every module: each module offers 5 kinds of target; take two kinds of each, in rotation.
    per_module = [targets[i : i + 5] for i in range(0, len(targets), 5)]
    spread = [kinds[(m + j) % 5] for j in (0, 2) for m, kinds in enumerate(per_module)]
    chosen = list(dict.fromkeys(spread))[: 2 * OPS]
    assert len(chosen) == 2 * OPS, f"only {len(chosen)} distinct targets"
    return synthetic_catalog.write_catalog(
        directory, OPS, targets=lambda i: (chosen[2 * i], chosen[2 * i + 1]), settings=synthetic_catalog.BACKENDS
    )


# -- measuring ----------------------------------------------------------------------------------------------

COLD, WARM = "cold", "warm"


@dataclass(frozen=True)
class Variant:
    """One way of running `kcatalog validate`: the tree it checks against, and the cache of module indexes."""

    site: Path | None  # on PYTHONPATH after this tree's src/ (None: the package absent)
    indexes: str = COLD  # COLD: a new empty cache directory for every run; WARM: one the warm-up filled


def env_with(path: Path | None, cache: Path) -> dict[str, str]:
    """The measured processes' environment (load_time.ENV: bytecode cached): this tree's kcatalog first on
    PYTHONPATH, then the package's site; `cache` as the cache directory (the user's is never touched)."""
    env = {k: v for k, v in ENV.items() if k not in ("PYTHONPATH", "KCATALOG_NO_CACHE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *([str(path)] if path is not None else [])])
    env["KCATALOG_CACHE_DIR"] = str(cache)
    return env


def run_process(cmd: Sequence[str], env: dict[str, str]) -> dict[str, float]:
    """Wall and CPU seconds and peak RSS (MiB) of one fresh process, as load_time.run_process measures them."""
    with tempfile.NamedTemporaryFile("r") as rss_file:
        wrapped = [GNU_TIME, "-f", "%M", "-o", rss_file.name, *cmd] if GNU_TIME else list(cmd)
        start = time.perf_counter()
        proc = subprocess.Popen(wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) not in (0, 1):  # 1: diagnostics; anything else is a failure
            raise RuntimeError(f"{' '.join(cmd)} exited {os.waitstatus_to_exitcode(status)}")
        rss_kib = int(rss_file.read().split()[-1]) if GNU_TIME else usage.ru_maxrss
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": rss_kib / 1024}


def output_of(cmd: Sequence[str], env: dict[str, str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env).stdout


def alternate(command: Sequence[str], variants: dict[str, Variant], rounds: int, scratch: Path) -> dict[str, Any]:
    """Each variant run `rounds` times, taking turns, after one warm-up each (kcatalog's own bytecode, and the warm
    variants' indexes); their medians, and the medians of the per-round ratios to the last variant (the peer)."""
    runs = iter(range(1 << 30))

    def env(name: str, variant: Variant) -> dict[str, str]:
        cache = scratch / (f"warm-{name}" if variant.indexes == WARM else f"cold-{next(runs)}")
        return env_with(variant.site, cache)

    summaries = {name: output_of(command, env(name, variant)).splitlines()[-1] for name, variant in variants.items()}
    for name, variant in variants.items():
        run_process(command, env(name, variant))
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
    for _ in range(rounds):
        for name, variant in variants.items():
            for metric, value in run_process(command, env(name, variant)).items():
                samples[name].setdefault(metric, []).append(value)
    peer = samples[list(variants)[-1]]
    return {
        "validate_summary_line": summaries,
        "wall_s": {name: summary(m["wall"]) for name, m in samples.items()},
        "cpu_s": {name: summary(m["cpu"]) for name, m in samples.items()},
        "peak_rss_mib": {name: summary(m["rss_mib"]) for name, m in samples.items()},
        "ratio_to_absent": {
            name: {
                metric: statistics.median(a / b for a, b in zip(samples[name][metric], peer[metric]))
                for metric in ("wall", "cpu", "rss_mib")
            }
            for name in list(variants)[:-1]
        },
        "samples": samples,
    }


INSTALLED = "installed (byte-compiled), indexes cold"
SOURCE_COLD = "installed, no bytecode, indexes cold"
SOURCE_WARM = "installed, no bytecode, indexes warm"
ABSENT = "package absent"


# Where a fresh check's time goes: one TargetChecker over the catalog's targets in a fresh process, its module
# indexes kept in a new directory, under cProfile, by the functions that do each part (cumulative time, profiler
# overhead included: shares, not absolutes; CPU time, so that waiting for a busy machine or the disk does not count).
BREAKDOWN = r"""
import cProfile, json, pstats, sys, time
from pathlib import Path
from kcatalog.cache.module_indexes import ModuleIndexes
from kcatalog.pyresolve import TargetChecker
targets = [t for path in sorted(Path(sys.argv[1]).glob("*.yaml")) for t in
           (line.split("target: ", 1)[1].strip().strip('"') for line in path.read_text().splitlines()
            if "target: " in line)]
checker = TargetChecker(ModuleIndexes(Path(sys.argv[2])))  # a new cache directory, as a first validate has
start = time.process_time()
profile = cProfile.Profile(time.process_time)  # CPU time, as `total`: shares of it, whatever the load
profile.enable()
for target in targets:
    checker.check(target)
profile.disable()
total = time.process_time() - start
parts = {
    "locate modules (walk of sys.path)": ("finder.py", "locate"),
    "read sources and bytecode headers": [("finder.py", "read_source"), ("skeleton.py", "_compiles")],
    "syntax check without bytecode (symbol table)": ("symtable.py", "symtable"),
    "leave function bodies out (scan)": ("skeleton.py", "_hollow"),
    "parse what is left (ast)": ("parsing.py", "parse"),
    "index": ("index.py", "index_module"),
    "keep the indexes (cache directory)": ("module_indexes.py", "put"),
}
stats = pstats.Stats(profile).stats
def cumulative(keys):
    keys = keys if isinstance(keys, list) else [keys]
    return sum(v[3] for (f, _, name), v in stats.items() for file, fn in keys if f.endswith(file) and name == fn)
parts_s = {part: cumulative(keys) for part, keys in parts.items()}
print(json.dumps({"profiled_s": total, "targets": len(targets), "parts_s": parts_s}))
"""


def breakdown(catalog: Path, site: Path, scratch: Path) -> dict[str, Any]:
    env = env_with(site, scratch / "breakdown")
    indexes = scratch / f"breakdown-indexes-{site.name}"  # one per tree: the same sources have the same keys
    shutil.rmtree(indexes, ignore_errors=True)
    command = [sys.executable, "-c", BREAKDOWN, str(catalog), str(indexes)]
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return dict(json.loads(out.stdout))


def measure(root: Path, rounds: int) -> dict[str, Any]:
    compiled, source_only = root / "site", root / "source_only"
    targets, modules, size = write_package(compiled)
    write_package(source_only)
    # As pip installs a package: its bytecode compiled (`python -m compileall`), which tells the checks that
    # every module compiles, so that function bodies need not be parsed. A tree nothing ever imported has none.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(compiled)], check=True, stdout=subprocess.DEVNULL)
    catalog = write_catalog(root / "catalog", targets)
    validate = [*cli_command(), "validate", str(catalog)]
    variants = {
        INSTALLED: Variant(compiled),
        SOURCE_COLD: Variant(source_only),
        SOURCE_WARM: Variant(source_only, WARM),
        ABSENT: Variant(None),
    }
    measured = alternate(validate, variants, rounds, root / "caches")
    assert not list(source_only.rglob("__pycache__")), "the tree without bytecode got some"
    return {
        "package": {"modules": modules, "source_bytes": size, "targets_into_it": 2 * OPS, "ops": OPS},
        **measured,
        "breakdown": {
            name: breakdown(catalog, site, root / "caches")
            for name, site in ((INSTALLED, compiled), (SOURCE_COLD, source_only))
        },
    }


def verdicts(measured: dict[str, Any]) -> dict[str, bool]:
    ratio, rss = measured["ratio_to_absent"], measured["peak_rss_mib"]
    out = {}
    for name in ratio:
        out[f"{name} / absent <= {TARGETS['ratio']} (wall)"] = ratio[name]["wall"] <= TARGETS["ratio"]
        out[f"{name}: peak RSS <= {TARGETS['rss_mb']} MB"] = rss[name]["median"] * 1.048576 <= TARGETS["rss_mb"]
    return out


def context_line(ctx: dict[str, Any]) -> str:
    dirty = f" (dirty tree; src/kcatalog sha256 {ctx['src_sha256']})" if ctx["dirty"] else ""
    return (
        f"{ctx['date']} · `{ctx['machine']}` · nproc {ctx['nproc']} · Python {ctx['python']} · "
        f"commit `{ctx['commit'][:12]}`{dirty} · load average at start "
        f"{', '.join(f'{x:.1f}' for x in ctx['loadavg_start'])}"
    )


def runs_table(m: dict[str, Any]) -> list[str]:
    """The runs' medians and their ratios to the peer, one row each."""
    lines = [
        "| run | wall s (median) | min–max s | CPU s | peak RSS MiB | / absent, wall | / absent, CPU | validate says |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, wall in m["wall_s"].items():
        ratio = m["ratio_to_absent"].get(name)
        wall_ratio = f"{ratio['wall']:.2f}" if ratio else ""
        cpu_ratio = f"{ratio['cpu']:.2f}" if ratio else ""
        lines.append(
            f"| {name} | {wall['median']:.3f} | {wall['min']:.3f}–{wall['max']:.3f} | {m['cpu_s'][name]['median']:.3f} "
            f"| {m['peak_rss_mib'][name]['median']:.1f} | {wall_ratio} | {cpu_ratio} "
            f"| {m['validate_summary_line'][name]} |"
        )
    return lines


def breakdown_table(m: dict[str, Any]) -> list[str]:
    lines = [
        "## Where a fresh check's time goes",
        "",
        "One TargetChecker over the catalog's targets in a fresh process, keeping its module indexes in a new cache "
        "directory as a first validate does, under cProfile "
        "(cumulative CPU time of the functions doing each part, waiting for the disk not counted; the profiler's "
        "overhead inflates every figure, so read them as shares):",
        "",
        "| part | " + " | ".join(m["breakdown"]) + " |",
        "|---|" + "---:|" * len(m["breakdown"]),
    ]
    first = next(iter(m["breakdown"].values()))
    for part in first["parts_s"]:
        lines.append(
            f"| {part} | " + " | ".join(f"{b['parts_s'][part] * 1e3:.0f} ms" for b in m["breakdown"].values()) + " |"
        )
    lines.append(
        "| all target checks | " + " | ".join(f"{b['profiled_s'] * 1e3:.0f} ms" for b in m["breakdown"].values()) + " |"
    )
    return lines


def variants_list() -> list[str]:
    return [
        f"- **{INSTALLED}**: as pip installs it, with its bytecode compiled; the bytecode shows every module "
        "compiles, so function bodies are left out of parsing (pyresolve/skeleton.py); a new cache directory for "
        "every run, so no module index is kept from an earlier one.",
        f"- **{SOURCE_COLD}**: the same tree with no bytecode (never imported), validated for the first time: "
        "every module's syntax is checked whole (its symbol table built), so that a syntax error anywhere in it is "
        "found (KC306).",
        f"- **{SOURCE_WARM}**: the same, validated again: every module's index, kept in the cache directory by the "
        "earlier run and keyed by the source's exact bytes (cache/module_indexes.py), is read instead; nothing is "
        "parsed.",
        f"- **{ABSENT}**: the catalog's targets into it are KC303 warnings; nothing is read.",
    ]


def markdown(results: dict[str, Any]) -> str:
    ctx, m = results["context"], results["measured"]
    pkg = m["package"]
    lines = [
        "# Static target checks on a real-sized tree",
        "",
        context_line(ctx),
        "",
        f"`kcatalog validate DIR` in fresh processes, medians of {results['rounds']} rounds, the runs alternated; "
        "ratios are medians of per-round ratios. Reproduce: `python benchmarks/target_checks.py`. The same on "
        "SGLang's own tree: `results/sglang_tree.md`.",
        "",
        f"The package: {pkg['modules']} modules, {pkg['source_bytes'] / 1e6:.2f} MB of source; the catalog: "
        f"{pkg['ops']} ops x 3 backends, {pkg['targets_into_it']} distinct targets into the package "
        "(functions, methods inherited from bases in other modules, names re-exported through star imports "
        f"and chains of modules) and {pkg['ops']} into a package not installed (KC303 in every run).",
        "",
        *variants_list(),
        "",
        f"Peak RSS from {ctx['peak_rss_source']}; wall time includes spawning the process.",
        "",
        *runs_table(m),
        "",
        *breakdown_table(m),
        "",
        *targets_table(results),
    ]
    return "\n".join(lines) + "\n"


def targets_table(results: dict[str, Any]) -> list[str]:
    """The report's closing lines: each target and whether it was met, then the whole run's time."""
    rows = [f"| {name} | {'yes' if ok else '**no**'} |" for name, ok in results["verdicts"].items()]
    return ["## Targets", "", "| target | met |", "|---|---|", *rows, f"\nWhole run: {results['elapsed_s']:.0f} s."]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds: a smoke run")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the runs (default 7)")
    parser.add_argument("--keep", type=Path, default=None, help="write the package and catalog here and keep them")
    options = parser.parse_args(argv)
    rounds = options.rounds or (3 if options.quick else 7)
    start = time.perf_counter()
    results: dict[str, Any] = {"context": context(), "rounds": rounds, "quick": options.quick, "targets": TARGETS}
    root = options.keep or Path(tempfile.mkdtemp(prefix="kcatalog-targets-bench-"))
    try:
        results["measured"] = measure(root, rounds)
    finally:
        if options.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    results["context"]["loadavg_end"] = os.getloadavg()
    results["elapsed_s"] = time.perf_counter() - start
    results["verdicts"] = verdicts(results["measured"])
    report(results, "target_checks", markdown)
    return 0


def report(results: dict[str, Any], stem: str, markdown_of: Any) -> None:
    """Print the runs and the verdicts; write results/<stem>.json and results/<stem>.md."""
    m = results["measured"]
    width = max(map(len, m["wall_s"]))
    print(f"\n{'run':<{width}} {'wall s':>8} {'CPU s':>8} {'RSS MiB':>8} {'/absent':>8}")
    for name, wall in m["wall_s"].items():
        ratio = m["ratio_to_absent"].get(name, {}).get("wall")
        shown = f"{ratio:.2f}" if ratio else ""
        print(
            f"{name:<{width}} {wall['median']:>8.3f} {m['cpu_s'][name]['median']:>8.3f} "
            f"{m['peak_rss_mib'][name]['median']:>8.1f} {shown:>8}"
        )
    for name, ok in results["verdicts"].items():
        print(f"{'met ' if ok else 'MISS'}  {name}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown_of(results))
    print(f"\nwrote {RESULTS / f'{stem}.json'} and {RESULTS / f'{stem}.md'} ({results['elapsed_s']:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
