"""torch.compile of the normalisation references, compiled lazily on first call (dynamic=False)."""

from __future__ import annotations

import functools

import torch

from kcatalog.kernels.compiled._lazy import lazy_compile
from kcatalog.kernels.torch import layernorm as _ref

rms_norm = lazy_compile(_ref.rms_norm)
layer_norm = lazy_compile(_ref.layer_norm)
gemma_rms_norm = lazy_compile(_ref.gemma_rms_norm)

# The in-place reference compiled whole: on GPUs inductor writes x and residual from one fused kernel.
_fused_add_rms_norm_in_place = lazy_compile(_ref.fused_add_rms_norm)


def _fused_add_rms_norm_values(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Functional core of the reference: ``(new_residual, new_x)`` without mutating anything."""
    summed = (x.float() + residual.float()).to(residual.dtype)
    return summed, _ref.rms_norm(summed, weight, eps)


# CPU only: inductor's C++ backend (seen with torch 2.13) fails to compile the in-place reference
# (KeyError 'bufN' in outer-loop fusion with a local buffer, raised from cpp.py), so on CPU the functional
# core is compiled and the results are copied back in eager mode.
_fused_add_rms_norm_values_compiled = lazy_compile(_fused_add_rms_norm_values)


@functools.wraps(_ref.fused_add_rms_norm)
def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
    """Residual add then RMSNorm in place (torch.compile of the reference; see the reference's docstring)."""
    if x.device.type != "cpu":
        _fused_add_rms_norm_in_place(x, residual, weight, eps)
        return
    new_residual, new_x = _fused_add_rms_norm_values_compiled(x, residual, weight, eps)
    residual.copy_(new_residual)
    x.copy_(new_x)


__all__ = ["rms_norm", "fused_add_rms_norm", "layer_norm", "gemma_rms_norm"]
