#!/usr/bin/env python3
"""Ranks agree: `catalog.check_consistent()` across N processes under torch.distributed, three cases in one group.

    python benchmarks/rank_consistency.py --backend gloo --world-size 4        # CPU (the test suite runs this)
    python benchmarks/rank_consistency.py --backend nccl --world-size 2        # 2 GPUs, one per rank
    torchrun --nproc-per-node 2 benchmarks/rank_consistency.py --backend nccl  # the same, started by torchrun

Each rank loads the same small catalog (one op, a 'triton' backend first by priority and a 'torch' fallback, both
plain Python so the workers stay light), then, in one process group:

1. every rank alike: check_consistent passes;
2. one rank (the last) loads with KCATALOG_OVERRIDES choosing 'torch': every rank raises, naming the op and rank;
3. on one rank (the last) the 'triton' kernel's import fails: it falls back to 'torch', and every rank raises,
   naming the fallback.

It also times check_consistent: the first call (on NCCL it sets up the communicator) and the median of 20 more;
and, as a sanity check, runs one shipped op (layernorm.rms_norm, the same seeded input) on every rank's device and
compares the outputs bit for bit. With one rank, cases 2 and 3 are not run (they need a second rank to differ).

Rank 0 gathers every rank's report, checks them, prints a summary and writes --json; every rank exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
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


def _timing(directory: Path, repeats: int = 20) -> dict[str, float]:
    """Seconds of check_consistent on a prepared catalog: the first call, then the median of `repeats`."""
    import kcatalog

    catalog = kcatalog.load_catalog(directory, cache=False)
    catalog.prepare()
    start = time.perf_counter()
    catalog.check_consistent()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        catalog.check_consistent()
        times.append(time.perf_counter() - start)
    return {"first_s": first, "median_s": statistics.median(times), "repeats": repeats}


def _shipped_op(backend: str) -> dict[str, Any]:
    """layernorm.rms_norm of the shipped catalog on this rank's device, the same seeded input on every rank: what
    it chose, and every rank's output gathered (rank 0 compares them bit for bit)."""
    import torch
    import torch.distributed as dist

    import kcatalog

    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator().manual_seed(20261201)
    x = torch.randn(64, 4096, generator=g).to(device, dtype)
    w = (torch.rand(4096, generator=g) + 0.5).to(device, dtype)
    catalog = kcatalog.load_catalog()
    chosen = catalog.select("layernorm.rms_norm", dtype=str(dtype).removeprefix("torch.")).require().backend
    out = catalog.op("layernorm.rms_norm")(x, w)
    outputs = [torch.empty_like(out) for _ in range(dist.get_world_size())]
    dist.all_gather(outputs, out)
    bits = [o.cpu().contiguous().view(torch.uint8) for o in outputs]
    same = all(torch.equal(bits[0], b) for b in bits)
    return {"device": str(device), "dtype": str(dtype), "backend": chosen, "bit_identical_to_every_rank": same}


def run_rank(directory: Path, backend: str) -> dict[str, Any]:
    """One rank's cases, timing and shipped-op check (the process group is up); every rank must call it."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    last = rank == world - 1
    seen: dict[str, Any] = {"rank": rank, "timing": _timing(directory)}
    seen["consistent"] = _case(directory, last, {})
    if world > 1:  # with one rank there is no other to differ from
        seen["override"] = _case(directory, last, {"KCATALOG_OVERRIDES": "norm.scale=torch"})
        seen["import_fails"] = _case(directory, last, {"RANK_FAIL_IMPORT": "1"})
    seen["shipped_op"] = _shipped_op(backend)
    return seen


def _gather_and_report(seen: dict[str, Any], backend: str, json_path: Path | None) -> int:
    """All ranks' reports to every rank; rank 0 prints and writes them. 1 where any case misbehaved."""
    import torch.distributed as dist

    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, seen)
    problems = check(ranks)
    if dist.get_rank() == 0:
        report(ranks, problems, backend, json_path)
    return 1 if problems else 0


def worker(rank: int, world: int, backend: str, port: int, directory: str, json_path: str, codes: str) -> None:
    """A spawned rank: join the group on a local port, run, report; its exit code goes to `codes`."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "nccl":
        import torch

        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    sys.path.insert(0, directory)
    code = _gather_and_report(run_rank(Path(directory), backend), backend, Path(json_path) if json_path else None)
    Path(codes, f"rank{rank}").write_text(str(code))
    dist.destroy_process_group()


def check(seen: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the ranks' reports (empty: every case behaved)."""
    last = len(seen) - 1
    problems = []
    for rank, cases in enumerate(seen):
        if cases["consistent"]["raised"] is not None:
            problems.append(f"rank {rank}: consistent case raised: {cases['consistent']}")
        for case, must in (("override", "KCATALOG_OVERRIDES"), ("import_fails", "import failed")):
            if case not in cases:
                continue  # one rank: not run
            got = cases[case]
            message = got.get("message", "")
            if got["raised"] != "InconsistentSelectionError" or "norm.scale" not in message:
                problems.append(f"rank {rank}: {case} case did not raise naming norm.scale: {got}")
            elif f"rank {last}: " not in message or must not in message:
                problems.append(f"rank {rank}: {case} message names neither rank {last} nor '{must}': {message}")
        op = cases["shipped_op"]
        if not op["bit_identical_to_every_rank"] or op["backend"] != seen[0]["shipped_op"]["backend"]:
            problems.append(f"rank {rank}: layernorm.rms_norm differs from rank 0's: {op}")
    return problems


def environment() -> dict[str, Any]:
    """When, where and with what the report was made."""
    import datetime
    import platform
    import subprocess

    import torch

    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False)
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpus": gpus,
        "commit": commit.stdout.strip() or "unknown (not a git checkout)",
    }


def report(ranks: list[dict[str, Any]], problems: list[str], backend: str, json_path: Path | None) -> None:
    """The summary, and every rank's report as JSON."""
    if json_path:
        data = {"environment": environment(), "backend": backend, "ranks": ranks, "problems": problems}
        json_path.write_text(json.dumps(data, indent=1))
    cases = ("consistent", "override", "import_fails")
    for rank, seen in enumerate(ranks):
        outcomes = ", ".join(f"{c} -> {seen[c]['raised'] or 'passed'}" for c in cases if c in seen)
        t, op = seen["timing"], seen["shipped_op"]
        print(
            f"rank {rank}: {outcomes}; check_consistent first {t['first_s'] * 1e3:.2f} ms, then median "
            f"{t['median_s'] * 1e3:.3f} ms; rms_norm on {op['device']} ({op['backend']}, {op['dtype']}): "
            f"{'bit-identical on every rank' if op['bit_identical_to_every_rank'] else 'DIFFERS'}"
        )
    for case in ("override", "import_fails"):
        print(ranks[0][case].get("message", "") if case in ranks[0] else f"{case}: not run (one rank)")
    for problem in problems:
        print(f"problem: {problem}")
    print("every case behaved" if not problems else f"{len(problems)} problems")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    parser.add_argument("--world-size", type=int, default=4, help="ranks to spawn (ignored under torchrun)")
    parser.add_argument("--json", type=Path, help="write every rank's report here")
    options = parser.parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun: this process is one rank
        return _torchrun_rank(options)
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        directory, codes = Path(tmp, "catalog"), Path(tmp, "codes")
        write_catalog(directory)
        codes.mkdir()
        with socket.socket() as probe:  # a free port for the rendezvous
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        json_path = str(options.json or "")
        mp.spawn(worker, args=(options.world_size, options.backend, port, str(directory), json_path, str(codes)),
                 nprocs=options.world_size, join=True)  # fmt: skip
        return max(int(Path(codes, f"rank{r}").read_text()) for r in range(options.world_size))


def _torchrun_rank(options: argparse.Namespace) -> int:
    """One rank started by torchrun (env:// rendezvous); each rank writes its own copy of the catalog."""
    import torch.distributed as dist

    if options.backend == "nccl":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))
    dist.init_process_group(options.backend)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp, "catalog")
        write_catalog(directory)
        sys.path.insert(0, str(directory))
        code = _gather_and_report(run_rank(directory, options.backend), options.backend, options.json)
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
