"""The fused experts for a few tokens as two matrix-vector Triton kernels (moe.py's small-batch path): no
alignment, no sum over top-k launched apart.

1. **gate_up**: a program per (pair, column block) reads its pair's expert id, multiplies the token's row by
   that block of the expert's gate and up rows (fp32), and writes ``silu(gate) * up`` in x's dtype.
2. **down**: a program per (token, column block) runs over the token's K pairs in slot order, multiplies each
   pair's activation by its expert's down rows and adds it scaled by its routing weight (fp32): the sum over
   top-k happens in a fixed order in registers, deterministic without atomics, rounded once.

Each pair reads its expert's weights itself, so experts that several tokens share are read once per token:
the path pays where a batch is a token or a few (grids follow the shapes; no host sync).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..tracing import launch
from ._rows import cdiv


class GemvConfig(NamedTuple):
    """Columns per program of each kernel, the reduction step, and warps."""

    gate_up_n: int = 32
    down_n: int = 16
    block_k: int = 128
    num_warps: int = 4


@triton.jit
def _gate_up_kernel(
    x_ptr,
    ids_ptr,
    w_ptr,
    out_ptr,
    top_k,
    hidden,
    inter,
    stride_x,
    stride_we,
    stride_wn,
    stride_out,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """out[pair, n] = silu(x[token] . gate[e, n]) * (x[token] . up[e, n]), e = ids[pair], in x's dtype."""
    pair = tl.program_id(0)
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < inter
    ks = tl.arange(0, BLOCK_K)
    x_row = x_ptr + (pair // top_k).to(tl.int64) * stride_x
    g_ptrs = w_ptr + expert * stride_we + cols[:, None].to(tl.int64) * stride_wn + ks[None, :]
    acc_g = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k in range(0, hidden, BLOCK_K):
        k_ok = ks < hidden - k
        a = tl.load(x_row + k + ks, mask=k_ok, other=0.0).to(tl.float32)
        w_ok = col_ok[:, None] & k_ok[None, :]
        acc_g += tl.load(g_ptrs + k, mask=w_ok, other=0.0).to(tl.float32) * a[None, :]
        acc_u += tl.load(g_ptrs + inter * stride_wn + k, mask=w_ok, other=0.0).to(tl.float32) * a[None, :]
    gate = tl.sum(acc_g, axis=1)
    act = gate * tl.sigmoid(gate) * tl.sum(acc_u, axis=1)
    tl.store(out_ptr + pair * stride_out + cols, act.to(out_ptr.dtype.element_ty), mask=col_ok)


@triton.jit
def _down_kernel(
    a_ptr,
    ids_ptr,
    route_ptr,
    w_ptr,
    out_ptr,
    top_k,
    hidden,
    inter,
    stride_a,
    stride_we,
    stride_wn,
    stride_out,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """out[t, n] = sum over k, in order, of route[t, k] * (a[t * K + k] . down[e, n]), fp32, one rounding."""
    token = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < hidden
    ks = tl.arange(0, BLOCK_K)
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for slot in range(0, top_k):
        pair = token * top_k + slot
        expert = tl.load(ids_ptr + pair).to(tl.int64)
        a_row = a_ptr + pair.to(tl.int64) * stride_a
        w_ptrs = w_ptr + expert * stride_we + cols[:, None].to(tl.int64) * stride_wn + ks[None, :]
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k in range(0, inter, BLOCK_K):
            k_ok = ks < inter - k
            a = tl.load(a_row + k + ks, mask=k_ok, other=0.0).to(tl.float32)
            w = tl.load(w_ptrs + k, mask=col_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
            acc += w * a[None, :]
        total += tl.load(route_ptr + pair).to(tl.float32) * tl.sum(acc, axis=1)
    tl.store(out_ptr + token * stride_out + cols, total.to(out_ptr.dtype.element_ty), mask=col_ok)


def fused_experts_gemv(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    route: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    cfg: GemvConfig,
) -> torch.Tensor:
    """moe.py's fused_experts for checked arguments with unit-stride rows, `route` the flat routing weights."""
    tokens, hidden = x.shape
    top_k = topk_ids.shape[1]
    inter = down_proj.shape[2]
    ids = topk_ids.reshape(-1)
    act = torch.empty((tokens * top_k, inter), dtype=x.dtype, device=x.device)
    launch(_gate_up_kernel, (tokens * top_k, cdiv(inter, cfg.gate_up_n)))(
        x, ids, gate_up_proj, act, top_k, hidden, inter,
        x.stride(0), gate_up_proj.stride(0), gate_up_proj.stride(1), act.stride(0),
        BLOCK_N=cfg.gate_up_n, BLOCK_K=min(cfg.block_k, triton.next_power_of_2(hidden)), num_warps=cfg.num_warps,
    )  # fmt: skip
    out = torch.empty_like(x)
    launch(_down_kernel, (tokens, cdiv(hidden, cfg.down_n)))(
        act, ids, route, down_proj, out, top_k, hidden, inter,
        act.stride(0), down_proj.stride(0), down_proj.stride(1), out.stride(0),
        BLOCK_N=cfg.down_n, BLOCK_K=min(cfg.block_k, triton.next_power_of_2(inter)), num_warps=cfg.num_warps,
    )  # fmt: skip
    return out
