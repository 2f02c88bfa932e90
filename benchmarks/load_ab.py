"""A whole-process load of the 480-op catalog by this tree against another revision, taking turns.

The machine's speed varies by 2x within a day here (`import torch` took 1.6 s one morning and 3.4 s that
evening), so a refactor's effect on load time is the ratio against the revision before it, measured in the same
run: A B A B ..., warm (from each tree's own load cache) and cold (cache=False), medians of per-round ratios.
Run: python benchmarks/load_ab.py --against 625c383   (writes benchmarks/results/load_ab.json)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synthetic_catalog import write_catalog  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "load_ab.json"
OPS = 480


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _load_seconds(src: Path, catalog: Path, cache: Path | None) -> float:
    """Wall time of a fresh interpreter that imports kcatalog from `src` and loads `catalog`."""
    env = dict(os.environ, PYTHONPATH=str(src), KCATALOG_CACHE_DIR=str(cache or "/nonexistent"))
    code = f"import kcatalog; kcatalog.load_catalog([{str(catalog)!r}], cache={cache is not None})"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="the revision to compare with (a commit)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        other = work / "other"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(other), args.against], cwd=ROOT, check=True)
        try:
            trees = {args.against: other / "src", "this tree": ROOT / "src"}
            catalog = work / "catalog"
            write_catalog(catalog, OPS)
            caches = {name: work / f"cache-{index}" for index, name in enumerate(trees)}
            for name, src in trees.items():  # each tree writes its own cache entry first
                _load_seconds(src, catalog, caches[name])
            times: dict[str, dict[str, list[float]]] = {mode: {name: [] for name in trees} for mode in ("warm", "cold")}
            for _ in range(args.rounds):
                for mode in ("warm", "cold"):
                    for name, src in trees.items():
                        cache = caches[name] if mode == "warm" else None
                        times[mode][name].append(_load_seconds(src, catalog, cache))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, check=False)
    result: dict[str, object] = {
        "benchmark": "load_ab",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} nproc={os.cpu_count()}",
        "python": platform.python_version(),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "against": args.against,
        "ops": OPS,
        "rounds": args.rounds,
        "reproduce": f"python benchmarks/load_ab.py --against {args.against}",
    }
    for mode, by_tree in times.items():
        ratios = [new / old for new, old in zip(by_tree["this tree"], by_tree[args.against])]
        result[mode] = {
            **{f"{name} median s": round(statistics.median(xs), 4) for name, xs in by_tree.items()},
            "this tree / against (median of per-round ratios)": round(statistics.median(ratios), 3),
        }
        print(f"{mode}: " + ", ".join(f"{k} {v}" for k, v in result[mode].items()))  # type: ignore[attr-defined]
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
