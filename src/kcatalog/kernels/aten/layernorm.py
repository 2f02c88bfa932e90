"""Normalisation layers through torch's fused ATen ops (F.rms_norm, F.layer_norm)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm via ``torch.nn.functional.rms_norm`` over the last dim; output in ``x.dtype``.

    A weight of another dtype (e.g. float32 weight, bfloat16 activations) would make ATen promote the
    output, so the result is cast back to ``x.dtype`` in that case.
    """
    y = F.rms_norm(x, (x.shape[-1],), weight, eps)
    return y if y.dtype == x.dtype else y.to(x.dtype)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm via ``torch.nn.functional.layer_norm`` over the last dim; output in ``x.dtype``."""
    if weight.dtype != x.dtype:
        weight = weight.to(x.dtype)
    if bias.dtype != x.dtype:
        bias = bias.to(x.dtype)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
