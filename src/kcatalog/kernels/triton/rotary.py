"""Triton kernel for the functional rotary embedding in transformers' layout (attention.apply_rotary) and its
gradient (attention.apply_rotary_backward): one kernel, the gradient being the adjoint rotation.

``q [B, Hq, S, D]``, ``k [B, Hk, S, D]`` with any strides but a unit last one (the usual q is a transposed view of
the [B, S, H, D] projection); ``cos``, ``sin`` ``[B or 1, S, D]``. Each program owns ``BLOCK_S`` positions of one
sequence and a group of ``heads_per_program`` heads of q or of k: it loads the four halves of cos and sin for its
positions once and rotates each of its heads (both halves of x read once, both halves of the output written once,
float32 math). Every half of cos and sin is read, so tables whose halves differ are rotated exactly too.
Outputs are new contiguous tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..torch.rotary import check_shapes
from ..tracing import launch
from ._rows import Spread, Tunables, cdiv, next_power_of_2


@dataclass(frozen=True)
class RotaryTuning(Spread):
    """`tile`: half-row elements per program and head (BLOCK_S * next_power_of_2(D / 2)); `heads_per_program`:
    heads of q (or k) each program rotates with the cos/sin it loaded; `num_warps`. Not yet measured on a GPU."""

    tile: int = 2048
    heads_per_program: int = 8
    num_warps: int = 4


#: The tunables in effect; ``with TUNING.override(heads_per_program=1): ...`` changes them within a block.
TUNING = Tunables(__name__, RotaryTuning())


@triton.jit
def _rotate_heads(
    x_ptr, o_ptr, h0, n_heads, b, s0, seq, half, sxb, sxh, sxs, c1, c2, s1, s2,
    HEADS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, INVERSE: tl.constexpr,
):  # fmt: skip
    """Rotate heads h0 .. h0 + HEADS (those < n_heads) of positions s0 .. s0 + BLOCK_S of sequence b."""
    pos = s0 + tl.arange(0, BLOCK_S)
    dims = tl.arange(0, BLOCK_D)
    mask = (pos < seq)[:, None] & (dims < half)[None, :]
    x_offs = pos[:, None].to(tl.int64) * sxs + dims[None, :]
    o_offs = pos[:, None].to(tl.int64) * (2 * half) + dims[None, :]
    for i in range(HEADS):
        h = (h0 + i).to(tl.int64)  # h0 is a program id's multiple: a tensor, also under the interpreter
        if h < n_heads:
            xh = x_ptr + b.to(tl.int64) * sxb + h * sxh + x_offs
            x1 = tl.load(xh, mask=mask, other=0.0).to(tl.float32)
            x2 = tl.load(xh + half, mask=mask, other=0.0).to(tl.float32)
            if INVERSE:  # the adjoint: g cos + rotate_half^T(g sin), rotate_half^T(y) = [y2, -y1]
                y1 = x1 * c1 + x2 * s2
                y2 = x2 * c2 - x1 * s1
            else:
                y1 = x1 * c1 - x2 * s1
                y2 = x2 * c2 + x1 * s2
            oh = o_ptr + (b.to(tl.int64) * n_heads + h) * seq * (2 * half) + o_offs
            tl.store(oh, y1.to(o_ptr.dtype.element_ty), mask=mask)
            tl.store(oh + half, y2.to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr, n_q_heads, n_k_heads, seq, half,
    sqb, sqh, sqs, skb, skh, sks, scb, scs, ssb, sss,
    HEADS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, INVERSE: tl.constexpr,
):  # fmt: skip
    """Grid (position blocks, batch, head groups of q then of k). scb/ssb are 0 for tables shared by the batch."""
    s0 = tl.program_id(0) * BLOCK_S
    b = tl.program_id(1)
    group = tl.program_id(2)
    pos = s0 + tl.arange(0, BLOCK_S)
    dims = tl.arange(0, BLOCK_D)
    mask = (pos < seq)[:, None] & (dims < half)[None, :]
    c = cos_ptr + b.to(tl.int64) * scb + pos[:, None].to(tl.int64) * scs + dims[None, :]
    s = sin_ptr + b.to(tl.int64) * ssb + pos[:, None].to(tl.int64) * sss + dims[None, :]
    c1 = tl.load(c, mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(c + half, mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(s, mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(s + half, mask=mask, other=0.0).to(tl.float32)
    q_groups = tl.cdiv(n_q_heads, HEADS)
    if group < q_groups:
        _rotate_heads(q_ptr, qo_ptr, group * HEADS, n_q_heads, b, s0, seq, half, sqb, sqh, sqs, c1, c2, s1, s2,
                      HEADS, BLOCK_S, BLOCK_D, INVERSE)  # fmt: skip
    else:
        _rotate_heads(k_ptr, ko_ptr, (group - q_groups) * HEADS, n_k_heads, b, s0, seq, half, skb, skh, sks,
                      c1, c2, s1, s2, HEADS, BLOCK_S, BLOCK_D, INVERSE)  # fmt: skip


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    """`t`, copied only if its last dim is not unit-stride."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _rotary(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    inverse: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k (or their gradients, `inverse`) rotated into new contiguous tensors of their own dtypes."""
    check_shapes(q, k, cos, sin)
    qo = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    ko = torch.empty(k.shape, dtype=k.dtype, device=q.device)
    b, hq, seq, d = q.shape
    hk = k.shape[1]
    if qo.numel() == 0 and ko.numel() == 0:
        return qo, ko
    q, k, cos, sin = _unit_last(q), _unit_last(k), _unit_last(cos), _unit_last(sin)
    t = TUNING.get()
    half = d // 2
    block_d = next_power_of_2(half)
    block_s = max(1, min(next_power_of_2(seq), t.tile // block_d))
    heads = max(1, t.heads_per_program)
    grid = (cdiv(seq, block_s), b, cdiv(hq, heads) + cdiv(hk, heads))
    # a table shared by the batch ([1, S, D]) is read with batch stride 0
    scb = cos.stride(0) if cos.shape[0] > 1 else 0
    ssb = sin.stride(0) if sin.shape[0] > 1 else 0
    launch(_rotary_kernel, grid)(
        q, k, cos, sin, qo, ko, hq, hk, seq, half,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        scb, cos.stride(1), ssb, sin.stride(1),
        HEADS=heads, BLOCK_S=block_s, BLOCK_D=block_d, INVERSE=inverse, num_warps=t.num_warps,
    )  # fmt: skip
    return qo, ko


def apply_rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``apply_rotary_pos_emb(q, k, cos, sin)``: new contiguous (q_embed, k_embed)."""
    return _rotary(q, k, cos, sin, False)


def apply_rotary_backward(
    grad_q: torch.Tensor, grad_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk) of apply_rotary, in grad_q's and grad_k's dtypes (q's and k's): the adjoint rotation of
    grad_q and grad_k, from cos and sin alone."""
    return _rotary(grad_q, grad_k, cos, sin, True)
