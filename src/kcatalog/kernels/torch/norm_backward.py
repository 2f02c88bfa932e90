"""Pure-torch references for the backward ops of the normalisation layers: the gradients in float32 math (float64
stays float64), each returned in its input's dtype.

Kept apart from the forward references (kernels/torch/layernorm.py): the shipped tuned table records the source
digest of every kernel module it timed, and a backward added there would make its entries stale.
"""

from __future__ import annotations

import torch


def upcast(t: torch.Tensor) -> torch.Tensor:
    """`t` in the dtype the references compute in: float32, or float64 for a float64 tensor (so that
    torch.autograd.gradcheck, which perturbs float64 inputs, sees float64 math)."""
    return t if t.dtype == torch.float64 else t.float()


def rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of :func:`rms_norm` with respect to ``x`` and ``weight``, given the gradient of its output.

    With ``r = rsqrt(mean(x^2) + eps)`` and ``x̂ = x * r`` per row: ``dx = r * (g*w - x̂ * mean(g*w*x̂))`` and
    ``dw = Σ_rows g * x̂``; float32 math, returned in ``x``'s and ``weight``'s dtypes.
    """
    xf, gf, wf = upcast(x), upcast(grad), upcast(weight)
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    xhat = xf * rstd
    gw = gf * wf
    dx = rstd * (gw - xhat * (gw * xhat).mean(dim=-1, keepdim=True))
    dw = (gf * xhat).reshape(-1, x.shape[-1]).sum(dim=0)
    return dx.to(x.dtype), dw.to(weight.dtype).reshape(weight.shape)
