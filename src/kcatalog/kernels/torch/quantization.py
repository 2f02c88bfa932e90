"""Activation quantization as pure torch (backend `torch`, the reference)."""

from __future__ import annotations

import torch

FP8_E4M3_MAX = 448.0
"""Largest finite float8_e4m3fn value."""

MIN_SCALE = 1.0 / (FP8_E4M3_MAX * 512.0)
"""vLLM's floor on a dynamic scale, so all-zero (or tiny) rows do not divide by zero."""


def per_token_quant_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token (per-row) FP8 quantization, as vLLM's ``dynamic_per_token_scaled_fp8_quant``.

    x: [T, H] float32/float16/bfloat16. Returns (q, scale): q float8_e4m3fn [T, H] and scale
    float32 [T, 1], with ``scale = max(absmax(row) / 448, 1 / (448 * 512))`` and
    ``q = clamp(x / scale, -448, 448)`` rounded to nearest even, so that ``q * scale ≈ x``.
    """
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    scale = torch.clamp(amax / FP8_E4M3_MAX, min=MIN_SCALE)
    q = torch.clamp(xf / scale, -FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale
