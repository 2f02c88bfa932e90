"""Where a prefill step's GPU time goes, eager and under torch.compile, for plain transformers and after
kcatalog.kernelize: the top kernels of one profiled step (2 layers of kernelize_gpu.py's Llama-3-8B-shaped model).

    python3 benchmarks/kernelize_prefill_probe.py      # on a GPU, about 50 s

Written to explain why compiled prefill is slower than eager prefill in kernelize_h200.md.
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernelize_gpu as kg  # noqa: E402

import kcatalog  # noqa: E402


def top(step: Callable[[], Any], label: str) -> None:
    """Print the step's kernel time and its 9 largest kernels (by name, summed)."""
    step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    per: collections.Counter[str] = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name[:70]] += e.device_time_total
    total = sum(per.values())
    print(f"== {label}: {total / 1e3:.2f} ms of kernels")
    for name, us in per.most_common(9):
        print(f"   {us / 1e3:7.3f} ms  {name}")


def main() -> None:
    args = argparse.Namespace(layers=2, quick=False, prefill=4096, decode_pos=1024, batches=[1])
    config = kg.llama_config(args)
    phases = kg.Phases(config, args, "cuda")
    with torch.no_grad():
        for kernelized in (False, True):
            model = kg.build(config, "cuda", torch.bfloat16, None)
            if kernelized:
                kcatalog.kernelize(model)
            name = "kcatalog" if kernelized else "plain"
            top(phases.prefill_fn(model, model), f"{name} eager")
            compiled = torch.compile(model, mode="default", fullgraph=True)
            top(phases.prefill_fn(compiled, model), f"{name} compiled")
            del model, compiled
            torch._dynamo.reset()


if __name__ == "__main__":
    main()
