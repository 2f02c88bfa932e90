"""Rotary position embedding in transformers' layout, as a function (backend `torch`, the reference).

``q [B, Hq, S, D]`` and ``k [B, Hk, S, D]`` are rotated by ``cos``/``sin`` of shape ``[B, S, D]`` (or ``[1, S, D]``,
shared by the batch), as Llama's rotary embedding builds them: ``x * cos + rotate_half(x) * sin``, rotate_half
being ``[-x2, x1]`` of the halves. New tensors; nothing changes in place, so the op has a backward: the adjoint
rotation ``g * cos + rotate_half^T(g * sin)`` of the outputs' gradients, which reads cos and sin alone (a rotation
by -sin where cos and sin repeat over the halves, as they do in every model). Math in float32 (float64 for float64
inputs), one rounding to each tensor's dtype.
"""

from __future__ import annotations

import torch


def check_shapes(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Raise ValueError unless q, k are [B, H, S, D] with D even and cos, sin are [B or 1, S, D] alike."""
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must be [batch, heads, seq, head_dim]")
    b, _, s, d = q.shape
    if (k.shape[0], k.shape[2], k.shape[3]) != (b, s, d):
        raise ValueError(f"k {tuple(k.shape)} must match q {tuple(q.shape)} but for its heads")
    if d % 2:
        raise ValueError(f"head_dim must be even (two rotated halves), got {d}")
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dim() != 3 or t.shape[0] not in (1, b) or tuple(t.shape[1:]) != (s, d):
            raise ValueError(f"{name} {tuple(t.shape)} must be [{b} or 1, {s}, {d}] for q {tuple(q.shape)}")


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` (or its adjoint, `inverse`), in the wider of x's dtype and float32."""
    wide = torch.promote_types(x.dtype, torch.float32)
    xw, c, s = x.to(wide), cos.to(wide).unsqueeze(1), sin.to(wide).unsqueeze(1)
    half = x.shape[-1] // 2
    x1, x2 = xw[..., :half], xw[..., half:]
    c1, c2, s1, s2 = c[..., :half], c[..., half:], s[..., :half], s[..., half:]
    if inverse:  # rotate_half^T(y) = [y2, -y1]
        out = torch.cat((x1 * c1 + x2 * s2, x2 * c2 - x1 * s1), dim=-1)
    else:
        out = torch.cat((x1 * c1 - x2 * s1, x2 * c2 + x1 * s2), dim=-1)
    return out.to(x.dtype)


def apply_rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``apply_rotary_pos_emb(q, k, cos, sin)``: new contiguous (q_embed, k_embed)."""
    check_shapes(q, k, cos, sin)
    return _rotate(q, cos, sin, False), _rotate(k, cos, sin, False)


def apply_rotary_backward(
    grad_q: torch.Tensor, grad_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk) of apply_rotary: the adjoint rotation of the incoming gradients (in their dtypes, q's and
    k's), from cos and sin alone: a rotation's adjoint reads no q or k, so autograd keeps neither."""
    check_shapes(grad_q, grad_k, cos, sin)
    return _rotate(grad_q, cos, sin, True), _rotate(grad_k, cos, sin, True)
