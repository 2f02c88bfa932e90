"""attention.decode as a Triton split-KV kernel (backend `triton`): a few queries per sequence against a long KV
cache, the key heads read once for every query head of their group (GQA in place, no repeated keys), and
key tiles that no query may see skipped before they are read.

Why a kernel of our own: a static KV cache is as long as the longest sequence it may hold, and transformers
hands attention the whole cache with a bool mask of the slots written so far. SDPA's flash kernel takes no mask,
and its mask-taking kernels (memory-efficient, cuDNN) read every slot and need the keys repeated per query head
(benchmarks/results/masked_attention_h200.json: 1.4 ms a layer at batch 16, 4,160 slots). Here the mask is read
first, a tile at a time, and a tile that no query row may see costs only that read.

Two launches (flash-decoding):

1. **Partial**: program (sequence b, key head h, split s) owns the G * T query rows of h's group (G = Hq / Hk
   query heads, T queries each) and the split's run of keys; per key tile it builds the allowed set (the
   split's range, the causal and window masks, attn_mask), skips the tile if nothing is allowed, else scores
   the rows against the tile on the tensor cores and folds it into a running softmax (fp32). A split writes
   its unnormalised output, running max and sum.
2. **Combine**: the splits of each row merged (rescaled to a common max); a row that saw no key gets zeros, as
   SDPA gives. With one split the first launch writes the output itself.

The split count makes about two programs per SM over (B * Hk) sequences-heads; the combine reads
splits x rows x Dv floats, little against the cache.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..torch.sdpa import attention_heads
from ..tracing import launch
from ._rows import Spread, Tunables, cdiv, next_power_of_2

_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # read once, as Triton does when a kernel is defined
_HALF_OR_FLOAT = (torch.float16, torch.bfloat16, torch.float32)
MAX_ROWS = 64  # query rows per key head (G * T) one program holds; more is a prefill's job
MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class DecodeTuning(Spread):
    """`block_s` keys per tile; the keys split so that about `programs_per_sm` programs run on each SM."""

    block_s: int = 64


#: The tunables in effect; ``with TUNING.override(sms=...): ...`` changes them within a block.
TUNING = Tunables(__name__, DecodeTuning())


@triton.jit
def _dot(a, b, UPCAST: tl.constexpr):
    """a @ b in fp32 (half inputs on the tensor cores; float32 in IEEE float32, not TF32; UPCAST: the
    interpreter's dot multiplies bfloat16 tiles wrongly, triton 3.9)."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    if a.dtype == tl.float32:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _partial_kernel(
    q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, acc_ptr, stat_ptr,
    kv_heads, groups, queries, keys, keys_per_split, scale, window,
    s_qn, s_qh, s_kb, s_kh, s_ks, s_vb, s_vh, s_vs,
    s_mb, s_mh, s_mt, s_ms, s_on, s_oh,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    CAUSAL: tl.constexpr, WINDOWED: tl.constexpr, MASK: tl.constexpr, BOOL_MASK: tl.constexpr, DIRECT: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    """One split of one (sequence, key head): the running softmax over its keys, for its G * T query rows."""
    bh = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    b = bh // kv_heads
    hk = bh % kv_heads
    rows = tl.arange(0, BLOCK_R)
    g = rows // queries
    t = rows % queries
    row_ok = rows < groups * queries
    hq = hk * groups + g  # the query head of each row
    n = b * queries + t  # the row's query in the [B * T, Hq, D] layout
    position = keys - queries + t  # bottom-right aligned: the last T positions of the S keys
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    q = tl.load(
        q_ptr + n[:, None] * s_qn + hq[:, None] * s_qh + d[None, :], mask=row_ok[:, None] & (d[None, :] < D), other=0.0
    )
    k_base = k_ptr + b * s_kb + hk * s_kh
    v_base = v_ptr + b * s_vb + hk * s_vh
    m_base = mask_ptr + b * s_mb + hq * s_mh + t * s_mt
    m_i = tl.full((BLOCK_R,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_R,), tl.float32)
    acc = tl.zeros((BLOCK_R, BLOCK_DV), tl.float32)
    start = split * keys_per_split
    end = tl.minimum(start + keys_per_split, keys)
    for s in range(start, end, BLOCK_S):
        cols = s + tl.arange(0, BLOCK_S)
        allowed = row_ok[:, None] & (cols < end)[None, :]
        if CAUSAL:
            allowed &= cols[None, :] <= position[:, None]
        if WINDOWED:
            allowed &= position[:, None] - cols[None, :] < window
        if MASK:
            given = tl.load(m_base[:, None] + cols[None, :] * s_ms, mask=allowed, other=0)
            if BOOL_MASK:
                allowed &= given != 0
            else:
                bias = given.to(tl.float32)
                allowed &= bias > float("-inf")
        if tl.max(allowed.to(tl.int32)) > 0:  # some row sees a key of this tile: read it
            col_ok = cols < end
            k = tl.load(k_base + cols[:, None] * s_ks + d[None, :], mask=col_ok[:, None] & (d[None, :] < D), other=0.0)
            scores = _dot(q, tl.trans(k), UPCAST) * scale
            if MASK:
                if not BOOL_MASK:
                    scores += bias
            scores = tl.where(allowed, scores, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, axis=1))
            base = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing yet stays at zero
            alpha = tl.exp(m_i - base)
            p = tl.exp(scores - base[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(
                v_base + cols[:, None] * s_vs + dv[None, :], mask=col_ok[:, None] & (dv[None, :] < DV), other=0.0
            )
            acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, UPCAST)
            m_i = m_new
    if DIRECT:  # one split: the output itself
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(
            out_ptr + n[:, None] * s_on + hq[:, None] * s_oh + dv[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=row_ok[:, None] & (dv[None, :] < DV),
        )
    else:
        slot = bh * tl.num_programs(1) + split
        tl.store(acc_ptr + (slot * BLOCK_R + rows)[:, None] * BLOCK_DV + dv[None, :], acc)
        tl.store(stat_ptr + (slot * BLOCK_R + rows) * 2, m_i)
        tl.store(stat_ptr + (slot * BLOCK_R + rows) * 2 + 1, l_i)


@triton.jit
def _combine_kernel(
    acc_ptr, stat_ptr, out_ptr, kv_heads, groups, queries, splits, s_on, s_oh,
    DV: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """The splits of one (sequence, key head) merged: sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // kv_heads
    hk = bh % kv_heads
    rows = tl.arange(0, BLOCK_R)
    dv = tl.arange(0, BLOCK_DV)
    g = rows // queries
    t = rows % queries
    row_ok = rows < groups * queries
    big = tl.full((BLOCK_R,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_R,), tl.float32)
    out = tl.zeros((BLOCK_R, BLOCK_DV), tl.float32)
    for split in range(0, splits):
        slot = bh * splits + split
        m_s = tl.load(stat_ptr + (slot * BLOCK_R + rows) * 2)
        l_s = tl.load(stat_ptr + (slot * BLOCK_R + rows) * 2 + 1)
        acc_s = tl.load(acc_ptr + (slot * BLOCK_R + rows)[:, None] * BLOCK_DV + dv[None, :])
        m_new = tl.maximum(big, m_s)
        base = tl.where(m_new == float("-inf"), 0.0, m_new)
        old = tl.exp(big - base)
        new = tl.exp(m_s - base)
        total = total * old + l_s * new
        out = out * old[:, None] + acc_s * new[:, None]
        big = m_new
    out = out / tl.where(total > 0, total, 1.0)[:, None]
    hq = hk * groups + g
    n = b * queries + t
    tl.store(
        out_ptr + n[:, None] * s_on + hq[:, None] * s_oh + dv[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=row_ok[:, None] & (dv[None, :] < DV),
    )


def _splits(programs: int, tiles: int, tuning: DecodeTuning, device: torch.device) -> int:
    """Splits of the keys so that about `programs_per_sm` programs run per SM (at least one tile each)."""
    return max(1, min(tiles, cdiv(tuning.programs_per_sm * tuning.device_sms(device), programs)))


def decode(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> torch.Tensor:
    """attention.decode: query [B * T, Hq, D], key and value [B, Hk, S, D] (any strides but a unit last one),
    attn_mask broadcastable to [B, Hq, T, S], bool or additive; returns [B * T, Hq, Dv] in query's dtype."""
    reason = decode_eligible(query, key, value, attn_mask, scale, is_causal, sliding_window)
    if reason is not True:
        raise ValueError(f"attention.decode (triton): {reason}")
    batch, queries = attention_heads(query, key)
    heads, dim = query.shape[1], query.shape[2]
    kv_heads, keys, dim_v = key.shape[1], key.shape[2], value.shape[3]
    groups = heads // kv_heads
    out = torch.empty((batch * queries, heads, dim_v), dtype=query.dtype, device=query.device)
    if out.numel() == 0:
        return out
    block_r = max(16, next_power_of_2(groups * queries))
    block_dv = max(16, next_power_of_2(dim_v))
    tuning = TUNING.get()
    block_s = tuning.block_s
    splits = _splits(batch * kv_heads, cdiv(keys, block_s), tuning, query.device)
    keys_per_split = cdiv(cdiv(keys, splits), block_s) * block_s
    splits = cdiv(keys, keys_per_split)  # no empty split
    strides: tuple[int, ...] = (0, 0, 0, 0)
    if attn_mask is None:
        mask, bool_mask = query, True  # never read (MASK=False)
    else:
        expanded = attn_mask.expand(batch, heads, queries, keys)
        bool_mask = attn_mask.dtype == torch.bool
        mask = expanded.view(torch.uint8) if bool_mask else expanded
        strides = expanded.stride()
    direct = splits == 1
    acc = stat = out  # unused with one split
    if not direct:
        acc = torch.empty((batch * kv_heads * splits * block_r * block_dv,), dtype=torch.float32, device=query.device)
        stat = torch.empty((batch * kv_heads * splits * block_r * 2,), dtype=torch.float32, device=query.device)
    launch(_partial_kernel, (batch * kv_heads, splits))(
        query, key, value, mask, out, acc, stat,
        kv_heads, groups, queries, keys, keys_per_split, dim**-0.5 if scale is None else scale, sliding_window,
        query.stride(0), query.stride(1), key.stride(0), key.stride(1), key.stride(2),
        value.stride(0), value.stride(1), value.stride(2), *strides, out.stride(0), out.stride(1),
        D=dim, DV=dim_v, BLOCK_R=block_r, BLOCK_S=block_s, BLOCK_D=max(16, next_power_of_2(dim)),
        BLOCK_DV=block_dv, CAUSAL=is_causal and queries > 1, WINDOWED=sliding_window > 0,
        MASK=attn_mask is not None, BOOL_MASK=bool_mask,
        DIRECT=direct, UPCAST=_INTERPRETED, num_warps=4, num_stages=2,
    )  # fmt: skip
    if not direct:
        launch(_combine_kernel, (batch * kv_heads,))(
            acc, stat, out, kv_heads, groups, queries, splits, out.stride(0), out.stride(1),
            DV=dim_v, BLOCK_R=block_r, BLOCK_DV=block_dv, num_warps=4,
        )  # fmt: skip
    return out


def decode_eligible(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> bool | str:
    """The triton backend's gate: a few query rows per key head, one head dim for q and k, unit last strides."""
    batch, queries = attention_heads(query, key)
    heads, kv_heads = query.shape[1], key.shape[1]
    if heads % kv_heads:
        return f"{heads} query heads are not a multiple of {kv_heads} key heads"
    if (heads // kv_heads) * queries > MAX_ROWS:
        return (
            f"{heads // kv_heads} query heads per key head x {queries} queries = "
            f"{heads // kv_heads * queries} rows; this kernel holds at most {MAX_ROWS} (a prefill's shape)"
        )
    if query.dtype not in _HALF_OR_FLOAT or key.dtype != query.dtype or value.dtype != query.dtype:
        return f"takes float16, bfloat16 or float32 query, key and value of one dtype, not {query.dtype}"
    if query.shape[-1] != key.shape[-1] or max(query.shape[-1], value.shape[-1]) > MAX_HEAD_DIM:
        return f"query and key need one head dim, at most {MAX_HEAD_DIM} (value's too)"
    if query.stride(-1) != 1 or key.stride(-1) != 1 or value.stride(-1) != 1:
        return "query, key and value need a unit stride in their last dim"
    if attn_mask is not None and not (attn_mask.dtype == torch.bool or attn_mask.is_floating_point()):
        return f"attn_mask must be bool or floating point, not {attn_mask.dtype}"
    return True
