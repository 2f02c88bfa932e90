#!/usr/bin/env python3
"""Why tune and tune --check disagreed at 4,096 tokens: the Triton and ATen norms timed four ways in one process.

Run on a GPU machine, three fresh processes::

    for i in 1 2 3; do PYTHONPATH=src python3 benchmarks/timing_method.py > run_$i.json; done

Keys: `NAME:flush` do_bench (CUDA events, L2 flushed before each call, 5 interleaved rounds); `NAME_rot:flush` the
same with 4 input sets per call; `NAME:loop` 50 calls back to back between two events. Results on the H200
(2026-12-02): benchmarks/results/timing_method_h200/ln_diag_{1,2,3}.json, discussed in docs/how-to/tune-and-plan.md.
"""

import json

import torch
from triton.testing import do_bench

from kcatalog import load_catalog

cat = load_catalog()
out = {}
torch.manual_seed(0)
for op in ("layernorm.layer_norm", "layernorm.rms_norm"):
    for H in (4096, 8192):
        x = torch.randn(4096, H, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(H, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(H, device="cuda", dtype=torch.bfloat16)
        xs = [torch.randn_like(x) for _ in range(4)]
        fns = {}
        for be in ("triton", "aten"):
            k = cat.kernel(op, be)
            args = (w, b) if op.endswith("layer_norm") else (w,)
            fns[be] = lambda k=k, args=args, x=x: k(x, *args)
            fns[be + "_rot"] = lambda k=k, args=args, xs=xs: [k(xi, *args) for xi in xs]
            fns[be]()
        torch.cuda.synchronize()
        res = {}
        order = list(fns)
        for r in range(5):
            for name in order if r % 2 == 0 else order[::-1]:
                res.setdefault(name + ":flush", []).append(do_bench(fns[name], warmup=10, rep=40) * 1e3)
        # no flush: back-to-back in a graph-free loop with events
        for name in order:
            f = fns[name]
            for _ in range(5):
                f()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(True), torch.cuda.Event(True)
            s.record()
            for _ in range(50):
                f()
            e.record()
            torch.cuda.synchronize()
            res[name + ":loop"] = [s.elapsed_time(e) * 1e3 / 50]
        out[f"{op} H={H}"] = {k: [round(v, 1) for v in vs] for k, vs in res.items()}
print(json.dumps(out))
