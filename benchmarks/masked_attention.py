"""On a GPU: attention.prefill/decode's backends on the calls transformers makes with a static cache, which carry
an explicit bool mask (the cache is longer than the keys written so far), so FlashAttention is gated out and the
choice falls to the priority order. Times each backend that takes a mask (median of triton's do_bench, ms) and
checks it against the reference. The peer `flash_on_written` is what the mask-taking backends could at best be:
FlashAttention over the written keys alone (a view, no mask), the time a cache that knew its length would take.

Run: python benchmarks/masked_attention.py OUT   (writes OUT/masked_attention.json; prints the table)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from kcatalog.kernels.aten import attention as sdpa
from kcatalog.kernels.torch.sdpa import decode as reference
from kcatalog.kernels.triton import decode_attention

BACKENDS = {
    "triton": decode_attention.decode,
    "sdpa_efficient": sdpa.efficient,
    "sdpa_cudnn": sdpa.cudnn,
    "sdpa_math": sdpa.math,
}


def case(batch: int, queries: int, written: int, cache: int, heads: int = 32, kv_heads: int = 8, dim: int = 128):
    """q [B*T, Hq, D], k/v [B, Hk, S, D] and the mask sdpa_mask builds: causal over the `written` keys, none past."""
    q = torch.randn(batch * queries, heads, dim, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(batch, kv_heads, cache, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    rows = torch.arange(written - queries, written, device="cuda")[:, None]
    mask = (torch.arange(cache, device="cuda")[None, :] <= rows)[None, None].expand(batch, 1, queries, cache)
    return q, k, v, mask.contiguous()


def main() -> None:
    import triton.testing

    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    cases = {"prefill T=4096 S=4160": (1, 4096, 4096, 4160)}
    cases.update({f"decode B={b} S=4160 at 1025": (b, 1, 1025, 4160) for b in (1, 16, 64)})
    results: dict[str, dict[str, float | str]] = {}
    for name, shape in cases.items():
        q, k, v, mask = case(*shape)
        want = reference(q, k, v, mask, None, False, 0).float()
        row: dict[str, float | str] = {}
        written = shape[2]
        kw, vw = k[:, :, :written], v[:, :, :written]
        causal = shape[1] > 1
        ideal = (q, kw, vw, None, None, causal, 0)
        row["flash_on_written"] = round(
            float(triton.testing.do_bench(lambda ideal=ideal: sdpa.flash(*ideal), warmup=25, rep=100)), 4
        )
        for backend, fn in BACKENDS.items():
            try:
                got = fn(q, k, v, mask, None, False, 0)
                err = float((got.float() - want).norm() / want.norm())
                call = (q, k, v, mask, None, False, 0)
                ms = triton.testing.do_bench(lambda fn=fn, call=call: fn(*call), warmup=25, rep=100)
                row[backend] = round(float(ms), 4)
                row[f"{backend} rel err"] = f"{err:.1e}"
            except Exception as exc:  # a backend that cannot take the call: recorded
                row[backend] = f"{type(exc).__name__}: {str(exc)[:120]}"
        results[name] = row
        print(name, row, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "masked_attention.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
