"""attention.prefill and attention.decode through FlexAttention (torch.nn.attention.flex_attention): the causal
and sliding-window masks as a block mask, so that fully masked blocks are skipped. On CUDA the function is
compiled on its first call (dynamic shapes after the first recompile, since a decode's key length grows each
step); on the CPU it runs unfused, materialising the scores (slow, and seconds for its first call)."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from ..torch.sdpa import attention_heads
from ._lazy import lazy_compile

_compiled = lazy_compile(flex_attention, dynamic=None)


@functools.lru_cache(maxsize=64)
def _block_mask(queries: int, keys: int, is_causal: bool, sliding_window: int, device: str) -> BlockMask:
    """The block mask of bottom-right aligned causal and window attention for one (T, S), kept for later calls.
    The mask's sizes are tensors, not ints: once a recompile makes shapes dynamic, the ints a mask_mod closes over
    become symbols, and Inductor's flex lowering fails on them (torch 2.11 and 2.13: "'ShapeAsConstantBuffer'
    object has no attribute 'dtype'"); tensors are data, so a new size needs no recompile either."""
    offset, total = (torch.tensor(size, dtype=torch.int32, device=device) for size in (keys - queries, keys))
    window, windowed = torch.tensor(sliding_window, dtype=torch.int32, device=device), sliding_window > 0

    def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        distance = q_idx + offset - kv_idx
        allowed = distance >= 0 if is_causal else distance > -total
        return allowed & (distance < window) if windowed else allowed

    return create_block_mask(mask_mod, None, None, queries, keys, device=device)


def flex(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> torch.Tensor:
    """FlexAttention with GQA (enable_gqa) and a block mask for the causal and window masks; no attn_mask (its
    gate refuses calls with one)."""
    if attn_mask is not None:
        raise ValueError("attention: the flex backend takes no attn_mask")
    batch, queries = attention_heads(query, key)
    heads, keys = query.shape[1], key.shape[2]
    q = query.view(batch, queries, heads, query.shape[2]).transpose(1, 2)
    causal = is_causal and queries > 1
    masked = causal or 0 < sliding_window < keys
    block = _block_mask(queries, keys, causal, sliding_window, str(query.device)) if masked else None
    run = _compiled if query.is_cuda else flex_attention
    out = run(q, key, value, block_mask=block, scale=scale, enable_gqa=heads != key.shape[1])
    return out.transpose(1, 2).reshape(batch * queries, heads, value.shape[-1]).contiguous()  # as the fake's


def flex_eligible(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> bool | str:
    """The flex backend's gate: no attn_mask (masks only as block masks it builds), head dims of at least 16."""
    if attn_mask is not None:
        return "flex takes no attn_mask (only the causal and window masks, as block masks)"
    if min(query.shape[-1], value.shape[-1]) < 16:
        return "flex needs head dims of at least 16"
    return True
