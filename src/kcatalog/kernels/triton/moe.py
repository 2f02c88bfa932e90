"""The fused experts of a mixture-of-experts layer as Triton kernels (backend `triton` of moe.fused_experts).

Three steps, as vLLM's and SGLang's fused MoE (the design, not their code):

1. **Align** (moe_align.py: one Triton launch up to 1,024 pairs, two above; no host sync): the T x K (token,
   slot) pairs sorted by expert, each expert's run padded to a multiple of BLOCK_M with a sentinel pair
   (S = T * K), and the expert of each BLOCK_M block (E past the last one). At most
   ``cdiv(S, BLOCK_M) + min(E, S)`` blocks exist, so the grids are sized without reading the counts back: an
   expert with no token has no block and costs nothing.
2. **gate_up GEMM with SiLU-and-mul in its epilogue**: each program owns BLOCK_M pairs of one expert and
   BLOCK_N columns of the intermediate width; it gathers the pairs' token rows of x once per K step and
   multiplies them by both the gate and the up rows of that expert's weight (two fp32 accumulators), then
   writes ``silu(gate) * up`` rounded once to x's dtype: the 2I-wide product never reaches memory.
3. **down GEMM** of those rows by the expert's down weight, scaled by the pair's routing weight in fp32, one
   row per pair; the K rows of a token are then summed (fp32 accumulation, one rounding).

Programs are numbered in groups of GROUP_M block rows, column blocks within a group, so that the blocks of
one expert that run together share its weight tiles in L2. Weights are read in their transformers layout
(gate_up [E, 2I, H] with gate first, down [E, H, I]): no copies, no transposes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..tracing import launch
from ._rows import Spread, Tunables, cdiv
from .moe_align import align
from .moe_gemv import GemvConfig, fused_experts_gemv


class GemmConfig(NamedTuple):
    """One GEMM's launch: columns and reduction depth per program, pairs of programs per group, warps, stages."""

    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


class MoeConfig(NamedTuple):
    """Both GEMMs' launches; they share BLOCK_M, the padding of each expert's run of pairs."""

    block_m: int
    gate_up: GemmConfig
    down: GemmConfig


@dataclass(frozen=True)
class MoeTuning(Spread):
    """Launch configurations by shape class, chosen by the pairs each expert receives on average (S / E)
    (Spread's fields go unused: the alignment fixes the grids).

    `decode` (at most `decode_pairs` per expert): weight streaming dominates, so small BLOCK_M (16, the
    smallest tl.dot takes) and narrow columns spread the weight reads over many programs. `medium` (at most
    `medium_pairs`) and `prefill` grow BLOCK_M, the columns and the warps toward Hopper's tensor-core tile
    (8 warps, 3 stages in shared memory). Prefill takes 128 pairs per block for both GEMMs: on the H200 at 4,096
    tokens (benchmarks/results/moe_h200.txt) 5.44 ms against 7.23 ms with 64 (Mixtral-8x7B's shape, 0.74 of a
    dense bf16 GEMM of the same work against 0.56) and 1.05 against 1.28 ms (Qwen3-30B-A3B's).

    `gemv_tokens`: up to this many tokens, moe_gemv.py's two matrix-vector kernels instead (no alignment, the
    top-k sum in the down kernel: 2 launches instead of 4); off (0) until measured against the GEMMs on the GPU.
    """

    decode_pairs: int = 16
    medium_pairs: int = 96
    gemv_tokens: int = 0
    gemv: GemvConfig = GemvConfig()
    decode: MoeConfig = MoeConfig(16, GemmConfig(64, 128, 1, 4, 4), GemmConfig(64, 128, 1, 4, 4))
    medium: MoeConfig = MoeConfig(32, GemmConfig(64, 64, 4, 4, 4), GemmConfig(128, 64, 4, 4, 4))
    prefill: MoeConfig = MoeConfig(128, GemmConfig(128, 64, 8, 8, 3), GemmConfig(128, 64, 8, 8, 3))

    def config(self, pairs: int, experts: int) -> MoeConfig:
        """The configuration for `pairs` (token, expert) pairs over `experts` experts: pure, so it can be tested."""
        per_expert = pairs / max(experts, 1)
        if per_expert <= self.decode_pairs:
            return self.decode
        return self.medium if per_expert <= self.medium_pairs else self.prefill


_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # read once, as Triton does when a kernel is defined

#: The tunables in effect; ``with TUNING.override(prefill=...): ...`` changes them within a block.
TUNING = Tunables(__name__, MoeTuning())


@triton.jit
def _tile(pid, m_blocks, n_cols, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(block row, column block) of program `pid`: GROUP_M block rows at a time, column blocks within them."""
    n_blocks = tl.cdiv(n_cols, BLOCK_N)
    per_group = GROUP_M * n_blocks
    first = (pid // per_group) * GROUP_M
    rows_here = tl.minimum(m_blocks - first, GROUP_M)
    return first + (pid % per_group) % rows_here, (pid % per_group) // rows_here


@triton.jit
def _block_pairs(sorted_ptr, block_expert_ptr, pid_m, BLOCK_M: tl.constexpr):
    """The block's expert (int64) and its pairs: indices, and which are real (not padding)."""
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    pairs = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    return expert, pairs


@triton.jit
def _dot(a, b, acc, UPCAST: tl.constexpr):
    """acc + a @ b on the tensor cores (half inputs, fp32 accumulation); UPCAST: in fp32 (the interpreter's
    dot multiplies bfloat16 tiles wrongly, triton 3.9). Float32 tiles multiply in IEEE float32, not TF32 (Triton's
    default on CUDA, 2e-3 off the reference): a float32 caller asked for float32."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    if a.dtype == tl.float32:
        return tl.dot(a, b, acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _gate_up_kernel(
    x_ptr,
    w_ptr,
    out_ptr,
    sorted_ptr,
    block_expert_ptr,
    m_blocks,
    n_pairs,
    top_k,
    experts,
    hidden,
    inter,
    stride_x,
    stride_we,
    stride_wn,
    stride_out,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """out[pair, n] = silu(x[token] . gate[e, n]) * (x[token] . up[e, n]) for the block's pairs, in x's dtype."""
    pid_m, pid_n = _tile(tl.program_id(0), m_blocks, inter, BLOCK_N, GROUP_M)
    expert, pairs = _block_pairs(sorted_ptr, block_expert_ptr, pid_m, BLOCK_M)
    if expert >= experts:
        return
    real = pairs < n_pairs
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < inter
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = x_ptr + (pairs // top_k)[:, None] * stride_x + ks[None, :]
    # [BLOCK_K, BLOCK_N] views of the gate and up rows (the weight's last dim is contiguous).
    g_ptrs = w_ptr + expert * stride_we + cols[None, :].to(tl.int64) * stride_wn + ks[:, None]
    u_ptrs = g_ptrs + inter * stride_wn
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(hidden, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=real[:, None], other=0.0)
            if EVEN_N:
                wg = tl.load(g_ptrs)
                wu = tl.load(u_ptrs)
            else:
                wg = tl.load(g_ptrs, mask=col_ok[None, :], other=0.0)
                wu = tl.load(u_ptrs, mask=col_ok[None, :], other=0.0)
        else:
            k_ok = ks < hidden - k * BLOCK_K
            a = tl.load(a_ptrs, mask=real[:, None] & k_ok[None, :], other=0.0)
            wg = tl.load(g_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            wu = tl.load(u_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc_g = _dot(a, wg, acc_g, UPCAST)
        acc_u = _dot(a, wu, acc_u, UPCAST)
        a_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K
    act = acc_g * tl.sigmoid(acc_g) * acc_u
    out_ptrs = out_ptr + pairs[:, None] * stride_out + cols[None, :]
    tl.store(out_ptrs, act.to(out_ptr.dtype.element_ty), mask=real[:, None] & col_ok[None, :])


@triton.jit
def _down_kernel(
    a_ptr,
    w_ptr,
    route_ptr,
    out_ptr,
    sorted_ptr,
    block_expert_ptr,
    m_blocks,
    n_pairs,
    experts,
    hidden,
    inter,
    stride_a,
    stride_we,
    stride_wn,
    stride_out,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """out[pair, n] = route[pair] * (a[pair] . down[e, n]) for the block's pairs, fp32 math, one rounding."""
    pid_m, pid_n = _tile(tl.program_id(0), m_blocks, hidden, BLOCK_N, GROUP_M)
    expert, pairs = _block_pairs(sorted_ptr, block_expert_ptr, pid_m, BLOCK_M)
    if expert >= experts:
        return
    real = pairs < n_pairs
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < hidden
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + pairs[:, None] * stride_a + ks[None, :]
    w_ptrs = w_ptr + expert * stride_we + cols[None, :].to(tl.int64) * stride_wn + ks[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(inter, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=real[:, None], other=0.0)
            if EVEN_N:
                w = tl.load(w_ptrs)
            else:
                w = tl.load(w_ptrs, mask=col_ok[None, :], other=0.0)
        else:
            k_ok = ks < inter - k * BLOCK_K
            a = tl.load(a_ptrs, mask=real[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = _dot(a, w, acc, UPCAST)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    route = tl.load(route_ptr + pairs, mask=real, other=0.0).to(tl.float32)
    acc = acc * route[:, None]
    out_ptrs = out_ptr + pairs[:, None] * stride_out + cols[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=real[:, None] & col_ok[None, :])


def _check(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> None:
    tokens, hidden = hidden_states.shape
    experts, two_inter, w_hidden = gate_up_proj.shape
    if topk_ids.dim() != 2 or topk_ids.shape[0] != tokens or topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"topk_ids {tuple(topk_ids.shape)} and topk_weights {tuple(topk_weights.shape)} must both be "
            f"[T, K] with T = {tokens}"
        )
    if w_hidden != hidden or two_inter % 2 or down_proj.shape != (experts, hidden, two_inter // 2):
        raise ValueError(
            f"gate_up_proj {tuple(gate_up_proj.shape)} must be [E, 2I, H] and down_proj {tuple(down_proj.shape)} "
            f"[E, H, I] with H = {hidden}"
        )
    if gate_up_proj.dtype != hidden_states.dtype or down_proj.dtype != hidden_states.dtype:
        raise ValueError(
            f"weights ({gate_up_proj.dtype}, {down_proj.dtype}) must be of hidden_states' dtype {hidden_states.dtype}"
        )


def _contiguous_rows(t: torch.Tensor) -> torch.Tensor:
    """`t` with a contiguous last dimension (the kernels step along it by one)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def fused_experts(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> torch.Tensor:
    """sum_k topk_weights[t, k] * down[e] . (silu(gate[e] . x[t]) * (up[e] . x[t])), e = topk_ids[t, k].

    hidden_states [T, H]; topk_ids [T, K] (any integer dtype, values in [0, E)); topk_weights [T, K] (any
    float dtype); gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I], both of x's dtype.
    """
    _check(hidden_states, topk_ids, topk_weights, gate_up_proj, down_proj)
    tokens, hidden = hidden_states.shape
    top_k = topk_ids.shape[1]
    experts, inter = gate_up_proj.shape[0], down_proj.shape[2]
    pairs = tokens * top_k
    if pairs == 0:
        return torch.zeros_like(hidden_states)
    x = _contiguous_rows(hidden_states)
    w1, w2 = _contiguous_rows(gate_up_proj), _contiguous_rows(down_proj)
    route = topk_weights.reshape(-1).contiguous()
    tuning = TUNING.get()
    if tokens <= tuning.gemv_tokens:
        return fused_experts_gemv(x, topk_ids, route, w1, w2, tuning.gemv)
    cfg = tuning.config(pairs, experts)
    bm = cfg.block_m
    aligned = align(topk_ids, experts, bm)
    m_blocks = aligned.block_expert.numel()
    act = torch.empty((pairs, inter), dtype=x.dtype, device=x.device)
    g1 = cfg.gate_up
    launch(_gate_up_kernel, (m_blocks * cdiv(inter, g1.block_n),))(
        x, w1, act, aligned.sorted_pairs, aligned.block_expert,
        m_blocks, pairs, top_k, experts, hidden, inter,
        x.stride(0), w1.stride(0), w1.stride(1), act.stride(0),
        BLOCK_M=bm, BLOCK_N=g1.block_n, BLOCK_K=g1.block_k, GROUP_M=g1.group_m,
        EVEN_K=hidden % g1.block_k == 0, EVEN_N=inter % g1.block_n == 0, UPCAST=_INTERPRETED,
        num_warps=g1.num_warps, num_stages=g1.num_stages,
    )  # fmt: skip
    per_pair = torch.empty((pairs, hidden), dtype=x.dtype, device=x.device)
    g2 = cfg.down
    launch(_down_kernel, (m_blocks * cdiv(hidden, g2.block_n),))(
        act, w2, route, per_pair, aligned.sorted_pairs, aligned.block_expert,
        m_blocks, pairs, experts, hidden, inter,
        act.stride(0), w2.stride(0), w2.stride(1), per_pair.stride(0),
        BLOCK_M=bm, BLOCK_N=g2.block_n, BLOCK_K=g2.block_k, GROUP_M=g2.group_m,
        EVEN_K=inter % g2.block_k == 0, EVEN_N=hidden % g2.block_n == 0, UPCAST=_INTERPRETED,
        num_warps=g2.num_warps, num_stages=g2.num_stages,
    )  # fmt: skip
    if top_k == 1:
        return per_pair
    return per_pair.view(tokens, top_k, hidden).sum(dim=1)
