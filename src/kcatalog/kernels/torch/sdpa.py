"""Scaled dot-product attention as pure torch (backend `torch`, the reference of attention.prefill and
attention.decode): explicit float32 softmax(Q K^T * scale + mask) V, GQA by repeating the key heads."""

from __future__ import annotations

import torch


def attention_heads(query: torch.Tensor, key: torch.Tensor) -> tuple[int, int]:
    """(batch, queries per sequence) of the attention ops' layout: query [B * T, Hq, D], key [B, Hk, S, D]."""
    batch = key.shape[0]
    if key.dim() != 4 or query.dim() != 3 or query.shape[0] % batch:
        raise ValueError(
            f"attention: query must be [B * T, Hq, D] and key [B, Hk, S, D]; got query {tuple(query.shape)}, "
            f"key {tuple(key.shape)}"
        )
    return batch, query.shape[0] // batch


def visible(queries: int, keys: int, is_causal: bool, sliding_window: int, device: torch.device) -> torch.Tensor:
    """The [T, S] bool mask of causal and sliding-window attention, the T queries being the last T positions of
    the S keys (bottom-right aligned, as a KV cache has them): query i sits at position S - T + i, sees the keys
    at or before it when causal, and with a window only those fewer than `sliding_window` positions back."""
    position = torch.arange(queries, device=device)[:, None] + (keys - queries)
    distance = position - torch.arange(keys, device=device)[None, :]
    allowed = torch.ones(queries, keys, dtype=torch.bool, device=device)
    if is_causal:
        allowed &= distance >= 0
    if sliding_window > 0:
        allowed &= distance < sliding_window
    return allowed


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> torch.Tensor:
    """softmax(Q K^T * scale + mask) V in float32, written out: the reference of attention.prefill and
    attention.decode.

    query [B * T, Hq, D] (token-major: a free view of a model's [B, T, Hq, D] projection), key and value
    [B, Hk, S, D] (a KV cache's layout), Hq a multiple of Hk (GQA: each group of Hq // Hk query heads reads one
    key head). attn_mask, broadcastable to [B, Hq, T, S], is bool (True: attend) or added to the scores; the
    causal and sliding-window masks of `visible` apply on top of it. scale defaults to 1 / sqrt(D). Returns
    [B * T, Hq, D] in query's dtype.
    """
    batch, queries = attention_heads(query, key)
    heads, dim = query.shape[1], query.shape[2]
    q = query.reshape(batch, queries, heads, dim).transpose(1, 2).float()  # [B, Hq, T, D]
    groups = heads // key.shape[1]
    k = key.float().repeat_interleave(groups, dim=1)  # [B, Hq, S, D]
    v = value.float().repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-1, -2) * (dim**-0.5 if scale is None else scale)  # [B, Hq, T, S]
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.float()
    allowed = visible(queries, key.shape[2], is_causal, sliding_window, query.device)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    # A query that sees no key (a padded position's) gets zeros, as torch's SDPA gives, rather than NaN.
    weights = torch.where(torch.isinf(scores).all(dim=-1, keepdim=True), 0.0, weights)
    out = weights @ v  # [B, Hq, T, Dv]
    # contiguous in every case (a view for one sequence otherwise): the backends return what the fake does
    return out.transpose(1, 2).reshape(batch * queries, heads, v.shape[-1]).to(query.dtype).contiguous()


def prefill(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> torch.Tensor:
    """attention.prefill's reference: `attention` with as many keys as queries per sequence (S == T)."""
    if key.shape[2] * key.shape[0] != query.shape[0]:
        raise ValueError(f"attention.prefill: {key.shape[2]} keys per sequence for {query.shape[0]} queries in all")
    return attention(query, key, value, attn_mask, scale, is_causal, sliding_window)


def decode(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = True,
    sliding_window: int = 0,
) -> torch.Tensor:
    """attention.decode's reference: `attention` of T new queries per sequence against S >= T cached keys."""
    return attention(query, key, value, attn_mask, scale, is_causal, sliding_window)
