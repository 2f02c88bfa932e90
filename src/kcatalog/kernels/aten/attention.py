"""attention.prefill and attention.decode through torch's scaled_dot_product_attention, one SDPA kernel per
backend (flash, memory-efficient, cuDNN, math) pinned with torch.nn.attention.sdpa_kernel, and each backend's
per-call gate: what that kernel cannot take is refused at selection, with the reason, instead of failing in it."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..torch.sdpa import attention_heads, visible

_HALF = (torch.float16, torch.bfloat16)


def _sdpa(
    kernel: SDPBackend,
    gqa: bool,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    scale: float | None,
    is_causal: bool,
    sliding_window: int,
) -> torch.Tensor:
    """One SDPA call on [B, H, T, D] views of the ops' layout, the causal and window masks as SDPA can take them:
    `is_causal` where queries and keys line up (T == S), the last `sliding_window` keys for a single query, an
    explicit bool mask otherwise. `gqa`: the kernel takes Hk < Hq (enable_gqa), else the keys are repeated."""
    batch, queries = attention_heads(query, key)
    heads, keys = query.shape[1], key.shape[2]
    q = query.view(batch, queries, heads, query.shape[2]).transpose(1, 2)
    causal = is_causal and queries > 1  # one query, the last position, sees every key before it
    if sliding_window > 0 and queries == 1 and keys > sliding_window:
        key, value, keys = key[:, :, -sliding_window:], value[:, :, -sliding_window:], sliding_window
        if attn_mask is not None:
            attn_mask = attn_mask[..., -sliding_window:]
    windowed = 0 < sliding_window < keys
    if attn_mask is not None or windowed or (causal and queries != keys):
        allowed = visible(queries, keys, causal, sliding_window, query.device)
        if attn_mask is None:
            attn_mask = allowed
        elif attn_mask.dtype == torch.bool:
            attn_mask = attn_mask & allowed
        else:
            attn_mask = attn_mask.masked_fill(~allowed, float("-inf"))
        causal = False
    groups = heads // key.shape[1]
    if groups > 1 and not gqa:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    with sdpa_kernel([kernel]):
        out = F.scaled_dot_product_attention(
            q, key, value, attn_mask=attn_mask, is_causal=causal, scale=scale, enable_gqa=gqa and groups > 1
        )
    # Contiguous, as the reference (the op's fake) returns it: SDPA's output follows the query's strides, and a
    # torch op whose real output strides differ from its fake's fails under torch.compile.
    return out.transpose(1, 2).reshape(batch * queries, heads, value.shape[-1]).contiguous()


def flash(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> torch.Tensor:
    """SDPA's FlashAttention-2 kernel (CUDA sm80+ in float16/bfloat16, head_dim <= 256, no mask; torch's flash
    kernel on the CPU takes masks and float32); GQA without repeating the keys."""
    return _sdpa(SDPBackend.FLASH_ATTENTION, True, query, key, value, attn_mask, scale, is_causal, sliding_window)


def efficient(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> torch.Tensor:
    """SDPA's memory-efficient kernel (xFormers' cutlass; CUDA, takes masks); it has no GQA: keys repeated."""
    return _sdpa(SDPBackend.EFFICIENT_ATTENTION, False, query, key, value, attn_mask, scale, is_causal, sliding_window)


def cudnn(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> torch.Tensor:
    """SDPA's cuDNN kernel (CUDA sm90 here, float16/bfloat16, head_dim <= 256); keys repeated for GQA."""
    return _sdpa(SDPBackend.CUDNN_ATTENTION, False, query, key, value, attn_mask, scale, is_causal, sliding_window)


def math(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> torch.Tensor:
    """SDPA's math kernel: the composite of ATen ops, any device, dtype and mask."""
    return _sdpa(SDPBackend.MATH, True, query, key, value, attn_mask, scale, is_causal, sliding_window)


def _needs_mask(query: torch.Tensor, key: torch.Tensor, attn_mask: Any, is_causal: bool, sliding_window: int) -> bool:
    """Whether `_sdpa` passes SDPA an explicit mask for this call."""
    batch, queries = attention_heads(query, key)
    keys = key.shape[2]
    if sliding_window > 0 and queries == 1:
        keys = min(keys, sliding_window)
    return attn_mask is not None or 0 < sliding_window < keys or (is_causal and 1 < queries != keys)


def _head_dims(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, limit: int) -> str | None:
    dims = {query.shape[-1], key.shape[-1], value.shape[-1]}
    if len(dims) > 1 or max(dims) > limit or max(dims) % 8:
        return f"head dims {sorted(dims)}; this kernel takes one head dim, a multiple of 8, at most {limit}"
    return None


def flash_eligible(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> bool | str:
    """The flash backend's gate: on CUDA, float16/bfloat16, no mask (none given and none needed), head_dim <= 256."""
    if query.device.type != "cuda":
        return True
    if query.dtype not in _HALF:
        return f"flash on CUDA takes float16 and bfloat16, not {query.dtype}"
    if _needs_mask(query, key, attn_mask, is_causal, sliding_window):
        return "flash takes no mask: this call has one, or a window or a causal offset that needs one"
    return _head_dims(query, key, value, 256) or True


def efficient_eligible(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> bool | str:
    """The memory-efficient backend's gate: head dims a multiple of 8 (its alignment), at most 512 here."""
    return _head_dims(query, key, value, 512) or True


def cudnn_eligible(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> bool | str:
    """The cuDNN backend's gate: float16/bfloat16, head_dim <= 256 (cuDNN's Hopper limit)."""
    if query.dtype not in _HALF:
        return f"cuDNN attention takes float16 and bfloat16, not {query.dtype}"
    return _head_dims(query, key, value, 256) or True
