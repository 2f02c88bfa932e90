"""Pure-torch references for the gated activations' gradients (silu_and_mul, gelu_and_mul).

``x = [gate | up]``, ``y = act(gate) * up``: ``dx = [grad * up * act'(gate) | grad * act(gate)]``, in x's dtype.
Math in float32, or float64 for float64 inputs (so that ``torch.autograd.gradcheck`` can check them).
"""

from __future__ import annotations

import math

import torch


def _split(grad: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad, gate, up), widened to float32 (float64 stays); checks that grad has the output's shape."""
    if x.shape[-1] % 2:
        raise ValueError(f"last dim must be even (gate and up halves), got {x.shape[-1]}")
    d = x.shape[-1] // 2
    if grad.shape != (*x.shape[:-1], d):
        raise ValueError(f"grad {tuple(grad.shape)} must have the output's shape {(*x.shape[:-1], d)}")
    wide = torch.promote_types(x.dtype, torch.float32)
    return grad.to(wide), x[..., :d].to(wide), x[..., d:].to(wide)


def silu_and_mul_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Gradient wrt x of ``silu(gate) * up``: silu'(g) = s (1 + g (1 - s)), s = sigmoid(g)."""
    g, gate, up = _split(grad, x)
    s = torch.sigmoid(gate)
    return torch.cat((g * up * s * (1 + gate * (1 - s)), g * gate * s), dim=-1).to(x.dtype)


def gelu_and_mul_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """Gradient wrt x of ``gelu(gate, approximate) * up``; approximate is "none" (erf) or "tanh"."""
    g, gate, up = _split(grad, x)
    if approximate == "none":
        cdf = 0.5 * (1 + torch.erf(gate * math.sqrt(0.5)))
        act, dact = gate * cdf, cdf + gate * torch.exp(-0.5 * gate * gate) / math.sqrt(2 * math.pi)
    elif approximate == "tanh":
        c = math.sqrt(2 / math.pi)
        t = torch.tanh(c * (gate + 0.044715 * gate.pow(3)))
        act = 0.5 * gate * (1 + t)
        dact = 0.5 * (1 + t) + 0.5 * gate * (1 - t * t) * c * (1 + 3 * 0.044715 * gate * gate)
    else:
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return torch.cat((g * up * dact, g * act), dim=-1).to(x.dtype)
