"""Gated activations of the MLP block, as pure torch (backend `torch`, the reference).

The input holds the gate and the up projection side by side on its last dim
(``x = [gate | up]``, as the fused gate_up GEMM of Llama-style MLPs writes it); the
output is ``act(gate) * up``, computed in float32 and rounded once to the input dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``x[..., 2d]`` into (gate, up) halves of width d, both upcast to float32."""
    d = x.shape[-1] // 2
    return x[..., :d].float(), x[..., d : 2 * d].float()


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU: ``silu(x[..., :d]) * x[..., d:]`` with ``d = x.shape[-1] // 2``; output in x.dtype."""
    gate, up = _split(x)
    return (F.silu(gate) * up).to(x.dtype)


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GeGLU: ``gelu(x[..., :d], approximate) * x[..., d:]``; approximate is "none" (erf) or "tanh"."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    gate, up = _split(x)
    return (F.gelu(gate, approximate=approximate) * up).to(x.dtype)
