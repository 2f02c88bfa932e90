"""Pure-torch references for the normalisation layers: upcast to float32, compute, cast back."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim: ``y = x * rsqrt(mean(x^2, -1) + eps) * weight``, returned in ``x.dtype``."""
    xf = x.float()
    variance = xf.pow(2).mean(dim=-1, keepdim=True)
    y = xf * torch.rsqrt(variance + eps) * weight.float()
    return y.to(x.dtype)


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Gemma's RMSNorm: ``y = x * rsqrt(mean(x^2, -1) + eps) * (1 + weight)``, all in float32, cast once to
    ``x.dtype`` (Gemma's checkpoints store the weight as an offset from 1, initialised to zeros)."""
    xf = x.float()
    variance = xf.pow(2).mean(dim=-1, keepdim=True)
    y = xf * torch.rsqrt(variance + eps) * (1.0 + weight.float())
    return y.to(x.dtype)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
    """Residual add then RMSNorm, in place as in vLLM/SGLang.

    ``residual <- x + residual`` (the sum rounded to the residual's dtype, as engines store it), then
    ``x <- rms_norm(residual, weight, eps)``. Returns None; both ``x`` and ``residual`` are overwritten.
    """
    summed = (x.float() + residual.float()).to(residual.dtype)
    residual.copy_(summed)
    x.copy_(rms_norm(summed, weight, eps))


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim: ``(x - mean) * rsqrt(var + eps) * weight + bias`` (biased variance)."""
    xf = x.float()
    mean = xf.mean(dim=-1, keepdim=True)
    centered = xf - mean
    variance = centered.pow(2).mean(dim=-1, keepdim=True)
    y = centered * torch.rsqrt(variance + eps) * weight.float() + bias.float()
    return y.to(x.dtype)
