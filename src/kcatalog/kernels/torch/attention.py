"""Rotary position embedding (RoPE) as pure torch (backend `torch`, the reference).

Same contract as vLLM's ``rotary_embedding`` op: query and key are rotated in place,
per token, by the angles of that token's position read from ``cos_sin_cache``.
"""

from __future__ import annotations

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """Rotate the float32 ``x[T, H, rot_dim]`` by ``cos``/``sin`` of shape [T, 1, rot_dim // 2]."""
    if is_neox:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool = True,
) -> None:
    """Apply rotary embeddings to ``query`` and ``key`` in place (vLLM's ``rotary_embedding``).

    positions: [T] integer positions. query: [T, Hq * head_size] or [T, Hq, head_size];
    key: [T, Hk * head_size] or [T, Hk, head_size] (Hk may differ from Hq: GQA).
    cos_sin_cache: [max_pos, rot_dim], cos in the first rot_dim // 2 columns, sin in the rest;
    only the first rot_dim (<= head_size) dims of each head rotate, the rest pass through.
    is_neox: rotate the two halves (NeoX / Llama) rather than interleaved pairs (GPT-J).
    Math in float32, one rounding to the tensor's dtype on the way back.
    """
    num_tokens = positions.numel()
    rot_dim = cos_sin_cache.shape[-1]
    cos_sin = cos_sin_cache.index_select(0, positions.reshape(-1).long()).float()
    cos, sin = cos_sin.chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # [T, 1, rot_dim // 2], broadcast over heads
    for x in (query, key):
        heads = x.view(num_tokens, -1, head_size)
        rot = heads[..., :rot_dim]
        rot.copy_(_rotate(rot.float(), cos, sin, is_neox))
