#!/usr/bin/env python3
"""Ranks agree: `catalog.check_consistent()` across N processes under torch.distributed, three cases in one spawn.

    python benchmarks/rank_consistency.py --backend gloo --world-size 4        # CPU (the test suite runs this)
    python benchmarks/rank_consistency.py --backend nccl --world-size 2        # 2 GPUs, one per rank

Each rank loads the same small catalog (one op, a 'triton' backend first by priority and a 'torch' fallback, both
plain Python so the workers stay light), then, in one process group:

1. every rank alike: check_consistent passes;
2. one rank (the last) loads with KCATALOG_OVERRIDES choosing 'torch': every rank raises, naming the op and rank;
3. on one rank (the last) the 'triton' kernel's import fails: it falls back to 'torch', and every rank raises,
   naming the fallback.

Each rank prints one JSON line with what it saw; the parent checks them and prints a summary (exit 1 on a miss).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

SETTINGS = """\
kcatalog: 1
backends:
  torch: {description: reference}
  triton: {description: fused kernels}
priority: [triton, torch]
"""
MANIFEST = """\
kcatalog: 1
group: norm
ops:
  scale:
    description: y = 2 x
    signature: "(x: Tensor) -> Tensor"
    reference: torch
    dtypes: [float32]
    backends:
      torch:
        target: rank_kernels_ref:scale
      triton:
        target: rank_kernels_fast:scale
"""
REFERENCE = "def scale(x):\n    return x * 2\n"
# Stands in for a Triton kernel module whose `import triton` fails on one rank.
FAST = (
    "import os\n"
    "if os.environ.get('RANK_FAIL_IMPORT') == '1':\n"
    "    raise ImportError('libtriton.so: cannot open shared object file')\n"
    "def scale(x):\n    return x + x\n"
)


def write_catalog(directory: Path) -> None:
    """The one-op catalog and its two kernel modules."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kcatalog.yaml").write_text(SETTINGS)
    (directory / "norm.yaml").write_text(MANIFEST)
    (directory / "rank_kernels_ref.py").write_text(REFERENCE)
    (directory / "rank_kernels_fast.py").write_text(FAST)


def _case(directory: Path, odd_rank: bool, env: dict[str, str]) -> dict[str, Any]:
    import kcatalog

    saved = {key: os.environ.get(key) for key in env}
    if odd_rank:
        os.environ.update(env)
    for module in ("rank_kernels_fast", "rank_kernels_ref"):
        sys.modules.pop(module, None)
    try:
        catalog = kcatalog.load_catalog(directory, cache=False)
        catalog.prepare(group=True)
        return {"raised": None}
    except kcatalog.CatalogError as exc:
        return {"raised": type(exc).__name__, "message": str(exc)}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def worker(rank: int, world: int, backend: str, port: int, directory: str, results: str) -> None:
    """One rank: join the group, run the three cases, write what it saw."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "nccl":
        import torch

        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    sys.path.insert(0, directory)
    last = rank == world - 1
    seen = {
        "consistent": _case(Path(directory), last, {}),
        "override": _case(Path(directory), last, {"KCATALOG_OVERRIDES": "norm.scale=torch"}),
        "import_fails": _case(Path(directory), last, {"RANK_FAIL_IMPORT": "1"}),
    }
    Path(results, f"rank{rank}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


def check(seen: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the ranks' reports (empty: all three cases behaved)."""
    last = len(seen) - 1
    problems = []
    for rank, cases in enumerate(seen):
        if cases["consistent"]["raised"] is not None:
            problems.append(f"rank {rank}: consistent case raised: {cases['consistent']}")
        for case, must in (("override", "KCATALOG_OVERRIDES"), ("import_fails", "import failed")):
            got = cases[case]
            message = got.get("message", "")
            if got["raised"] != "InconsistentSelectionError" or "norm.scale" not in message:
                problems.append(f"rank {rank}: {case} case did not raise naming norm.scale: {got}")
            elif f"rank {last}: " not in message or must not in message:
                problems.append(f"rank {rank}: {case} message names neither rank {last} nor '{must}': {message}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--json", type=Path, help="write every rank's report here")
    options = parser.parse_args(argv)
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        directory, results = Path(tmp, "catalog"), Path(tmp, "results")
        write_catalog(directory)
        results.mkdir()
        with socket.socket() as probe:  # a free port for the rendezvous
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        args = (options.world_size, options.backend, port, str(directory), str(results))
        mp.spawn(worker, args=args, nprocs=options.world_size, join=True)
        seen = [json.loads(Path(results, f"rank{r}.json").read_text()) for r in range(options.world_size)]
    problems = check(seen)
    if options.json:
        options.json.write_text(json.dumps({"backend": options.backend, "ranks": seen, "problems": problems}, indent=1))
    for rank, cases in enumerate(seen):
        print(f"rank {rank}: " + ", ".join(f"{case} -> {got['raised'] or 'passed'}" for case, got in cases.items()))
    print(seen[0]["override"].get("message", ""))
    print(seen[0]["import_fails"].get("message", ""))
    for problem in problems:
        print(f"problem: {problem}")
    print("all three cases behaved" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
