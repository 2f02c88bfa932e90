"""Rotary position embedding as a Triton kernel (backend `triton`), in place on query and key.

One program per token (split over a few programs per token only at decode sizes or for very
many heads): it loads all its q heads and k heads as [heads, rot_dim] tiles, reads the token's
position, loads that row's cos and sin once, in float32, and applies them to every head. Only
the rotated dims are read and written; a partial-rotary tail (rot_dim < head_size) is never
touched. NeoX style loads the two halves as two contiguous [heads, rot_dim / 2] tiles; GPT-J
style loads one contiguous [heads, rot_dim] tile and de-interleaves it in registers
(reshape + split), so both styles use wide, contiguous accesses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import triton
import triton.language as tl

from ..tracing import active, launch
from ._rows import Spread, Tunables, cdiv, next_power_of_2

if TYPE_CHECKING:
    from torch import Tensor


class RotaryConfig(NamedTuple):
    """A rotary launch: q and k heads per program, programs per token, warps, ptxas's register limit (0: none)."""

    block_hq: int
    block_hk: int
    n_split: int
    num_warps: int
    max_registers: int = 0


@dataclass(frozen=True)
class RotaryTuning(Spread):
    """The rotary kernel's tunables and launch configuration (:meth:`config`).

    `max_tile`: most rotated elements (both halves) of one tensor per program: 64 heads at rot_dim 128;
    `min_tile`: smallest q tile when the heads of a token are split across programs for small token counts;
    `values_per_thread`: rotated q elements per thread, which sets the warps (at most `max_warps`);
    `decode_values_per_thread`: the same when there are too few tokens to fill the GPU; `registers_per_value`:
    ptxas's register limit, per rotated q value of a thread, for launches that fill the GPU with at most 8 warps
    per program (0: none; measured at 8 warps only); `unmasked_tiles`: where every program's q (or k) tile holds
    only real heads and the rotated half is a power of two, load and store them without masks (the same values).

    Measured on an H200 (benchmarks/results/kernels_h200_gaps.md):
    - Left to itself, ptxas keeps an 8-warp program at 32 registers and issues its loads in four dependent waves
      (the position; q and half of cos/sin; the other half; k). At a limit of 48 (3 x 16 values) it issues them
      in two (offline SASS, benchmarks/load_waves.py). The Llama-3-8B prefill case (4,096 tokens, 32 q / 8 k
      heads, 8 warps) then took 0.97-0.99 of the time. The limit scales with the values per thread because a
      fixed 48 spills at 64 values per thread, which took 1.9-2.3x the time.
    - `unmasked_tiles` gained nothing beyond the spread there, so it stays off.
    - Decode (CUDA-graph replays, Llama-3-8B heads, bf16, 1-64 tokens): 1024-element q tiles of 8 warps (4 values
      per thread) took 0.86-0.89 of the time of 512-element tiles of 1 warp (16 values per thread). At 4,096
      tokens, 4 values per thread was 1.6x slower.
    """

    max_tile: int = 8192
    min_tile: int = 1024
    values_per_thread: int = 16
    decode_values_per_thread: int = 4
    max_warps: int = 16
    unmasked_tiles: bool = False
    registers_per_value: float = 3.0

    def config(self, n_tokens: int, n_q_heads: int, n_k_heads: int, half: int, sms: int) -> RotaryConfig:
        """The launch on `sms` SMs: pure, so it can be tuned or tested.

        Prefill: one program per token holding all its q heads and all its k heads (up to
        `max_tile` rotated elements each: 64 heads at rot_dim 128), cos/sin loaded once per token.
        Only bigger head counts split a token's heads over n_split programs (program s takes q tile s
        and k tile s), each loading cos/sin once. Decode (few tokens): heads are split further,
        halving the q tile down to ~`min_tile` elements, until there are `programs_per_sm` programs per
        SM. num_warps gives ~16 rotated q elements per thread (8 warps for a 4096-element q tile), or
        ~`decode_values_per_thread` when the tokens alone are too few for `programs_per_sm` programs per SM:
        there, each program's latency is the time, and more threads per program shorten it. The register
        limit applies to the launches that fill the GPU at up to 8 warps (see `registers_per_value`).
        """
        block_d = next_power_of_2(half)
        max_heads = max(1, self.max_tile // (2 * block_d))
        bhq = min(next_power_of_2(n_q_heads), max_heads)
        bhk = min(next_power_of_2(max(n_k_heads, 1)), max_heads)

        def n_split() -> int:
            return max(cdiv(n_q_heads, bhq), cdiv(n_k_heads, bhk))

        split = n_split()
        few = n_tokens * split < self.programs_per_sm * sms
        while n_tokens * split < self.programs_per_sm * sms and bhq > 1 and 2 * bhq * block_d > self.min_tile:
            bhq //= 2
            bhk = min(bhk, bhq)
            split = n_split()
        warps = (2 * bhq * block_d) // (32 * (self.decode_values_per_thread if few else self.values_per_thread))
        warps = max(1, min(self.max_warps, warps))
        limit = 0 if few or warps > 8 else int(self.registers_per_value * self.values_per_thread)
        return RotaryConfig(bhq, bhk, split, warps, limit)


#: The tunables in effect; ``with TUNING.override(programs_per_sm=0): ...`` changes them within a block.
TUNING = Tunables(__name__, RotaryTuning())


@triton.jit
def _load_heads(ptr, t, s, n_heads, stride_t, stride_h, IS_NEOX: tl.constexpr, HALF: tl.constexpr,
                BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr, WHOLE: tl.constexpr = False):  # fmt: skip
    """Load the rotated part of heads ``s * BLOCK_H ..`` of token `t`: (x1, x2, ptrs, mask).

    x1/x2 are float32 [BLOCK_H, BLOCK_D]: the two halves (NeoX) or the even/odd elements (GPT-J). WHOLE: the tile
    holds only real heads; with HALF == BLOCK_D the mask is then a constant true, which the compiler drops (the
    accesses are unpredicated).
    """
    base = ptr + t.to(tl.int64) * stride_t
    heads = s * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = (heads < n_heads)[:, None]
    if IS_NEOX:
        d = tl.arange(0, BLOCK_D)
        if WHOLE and HALF == BLOCK_D:
            mask = tl.full([BLOCK_H, BLOCK_D], 1, tl.int1)
        else:
            mask = hmask & (d < HALF)[None, :]
        ptrs = base + heads[:, None] * stride_h + d[None, :]
        x1 = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(ptrs + HALF, mask=mask, other=0.0).to(tl.float32)
    else:
        d2 = tl.arange(0, 2 * BLOCK_D)
        mask = hmask & (d2 < 2 * HALF)[None, :]
        ptrs = base + heads[:, None] * stride_h + d2[None, :]
        x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(x, [heads.shape[0], BLOCK_D, 2]))  # de-interleave in registers
    return x1, x2, ptrs, mask


@triton.jit
def _rotate_store(x1, x2, ptrs, mask, cos, sin, IS_NEOX: tl.constexpr, HALF: tl.constexpr):
    """Rotate (x1, x2) by cos/sin ([1, BLOCK_D], float32) and store back where _load_heads read them."""
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if IS_NEOX:
        tl.store(ptrs, o1.to(ptrs.dtype.element_ty), mask=mask)
        tl.store(ptrs + HALF, o2.to(ptrs.dtype.element_ty), mask=mask)
    else:
        o = tl.reshape(tl.join(o1, o2), [o1.shape[0], 2 * o1.shape[1]])  # re-interleave
        tl.store(ptrs, o.to(ptrs.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(
    pos_ptr,
    q_ptr,
    k_ptr,
    cache_ptr,
    n_q_heads,
    n_k_heads,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_cache,
    IS_NEOX: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    WHOLE_Q: tl.constexpr = False,
    WHOLE_K: tl.constexpr = False,
):
    # Program (t, s): token t, q heads [s * BLOCK_HQ, (s + 1) * BLOCK_HQ) and the same-numbered
    # k head tile (empty - fully masked, no traffic - once past the last k head).
    t = tl.program_id(0)
    s = tl.program_id(1)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    # No loops and no branches: the q and k loads are independent of the position, so they are
    # in flight together with the pos -> cos/sin chain instead of after it.
    q1, q2, q_ptrs, q_mask = _load_heads(
        q_ptr, t, s, n_q_heads, stride_qt, stride_qh, IS_NEOX, HALF, BLOCK_D, BLOCK_HQ, WHOLE_Q
    )
    k1, k2, k_ptrs, k_mask = _load_heads(
        k_ptr, t, s, n_k_heads, stride_kt, stride_kh, IS_NEOX, HALF, BLOCK_D, BLOCK_HK, WHOLE_K
    )
    d = tl.arange(0, BLOCK_D)
    cs = cache_ptr + pos * stride_cache
    cos = tl.load(cs + d, mask=d < HALF, other=0.0).to(tl.float32)[None, :]  # once per program,
    sin = tl.load(cs + HALF + d, mask=d < HALF, other=0.0).to(tl.float32)[None, :]  # all its heads
    _rotate_store(q1, q2, q_ptrs, q_mask, cos, sin, IS_NEOX, HALF)
    _rotate_store(k1, k2, k_ptrs, k_mask, cos, sin, IS_NEOX, HALF)


def _heads_view(x: Tensor, num_tokens: int, head_size: int, name: str) -> tuple[int, int, int]:
    """(n_heads, token stride, head stride) of a [T, H * head_size] or [T, H, head_size] tensor."""
    if x.shape[0] != num_tokens:
        raise ValueError(f"{name} has {x.shape[0]} tokens, positions has {num_tokens}")
    if x.stride(-1) != 1:
        raise ValueError(f"{name} must have a unit-stride last dim (it is rotated in place)")
    if x.dim() == 2:
        if x.shape[1] % head_size:
            raise ValueError(f"{name} width {x.shape[1]} is not a multiple of head_size {head_size}")
        return x.shape[1] // head_size, x.stride(0), head_size
    if x.dim() == 3 and x.shape[2] == head_size:
        return x.shape[1], x.stride(0), x.stride(1)
    raise ValueError(f"{name} must be [T, H * head_size] or [T, H, head_size], got {tuple(x.shape)}")


def rotary_embedding(
    positions: Tensor, query: Tensor, key: Tensor, head_size: int, cos_sin_cache: Tensor, is_neox: bool = True
) -> None:
    """Rotary embeddings on ``query`` and ``key`` in place, in one Triton kernel; the contract (shapes, GQA,
    partial rotary, NeoX or GPT-J style) is the reference's, ``kcatalog.kernels.torch.attention``.

    Beyond it: token rows may be strided (views into a fused qkv tensor) and are rotated where they lie; the
    cache may be float32 or the activations' dtype; only the rotated dims are read and written.
    """
    num_tokens = positions.numel()
    rot_dim = cos_sin_cache.shape[-1]
    if rot_dim % 2 or rot_dim > head_size:
        raise ValueError(f"rot_dim {rot_dim} must be even and <= head_size {head_size}")
    n_q, stride_qt, stride_qh = _heads_view(query, num_tokens, head_size, "query")
    n_k, stride_kt, stride_kh = _heads_view(key, num_tokens, head_size, "key")
    if num_tokens == 0 or (n_q == 0 and n_k == 0):
        return
    if positions.dim() != 1 or positions.stride(0) != 1:
        positions = positions.reshape(-1).contiguous()
    if cos_sin_cache.stride(-1) != 1:
        cos_sin_cache = cos_sin_cache.contiguous()
    half = rot_dim // 2
    t = TUNING.get()
    bhq, bhk, split, num_warps, max_registers = t.config(num_tokens, n_q, n_k, half, t.device_sms(query.device))
    launch(_rotary_kernel, (num_tokens, split))(
        positions,
        query,
        key,
        cos_sin_cache,
        n_q,
        n_k,
        stride_qt,
        stride_qh,
        stride_kt,
        stride_kh,
        cos_sin_cache.stride(0),
        IS_NEOX=bool(is_neox),
        HALF=half,
        BLOCK_D=next_power_of_2(half),
        BLOCK_HQ=bhq,
        BLOCK_HK=bhk,
        WHOLE_Q=t.unmasked_tiles and n_q == bhq * split,
        WHOLE_K=t.unmasked_tiles and n_k == bhk * split,
        num_warps=num_warps,
        # torch's wrap_triton takes no register limit (only num_warps, num_stages and the like): traced, none
        **({"maxnreg": max_registers} if max_registers and not active() else {}),
    )
