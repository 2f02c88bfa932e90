"""Pure-torch reference for the functional residual add + RMSNorm (its own module: the tuned table records the
digest of layernorm's, which an edit there would change)."""

from __future__ import annotations

import torch

from .layernorm import rms_norm


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``summed = x + residual`` (rounded to the residual's dtype, as a model's residual stream stores it), then
    ``(rms_norm(summed, weight, eps), summed)``; neither input is changed."""
    summed = (x.float() + residual.float()).to(residual.dtype)
    return rms_norm(summed, weight, eps), summed
