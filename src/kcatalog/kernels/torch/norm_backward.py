"""Pure-torch references for the backward ops of the normalisation layers (rms_norm, gemma_rms_norm, add_rms_norm,
layer_norm): each takes the incoming gradient(s) then the forward's own arguments (add_rms_norm: its weight, eps and
its summed output), recomputes the row statistics, and returns the gradients in float32 math (float64 stays
float64), each in its input's dtype.

Kept apart from the forward references (kernels/torch/layernorm.py): the shipped tuned table records the source
digest of every kernel module it timed, and a backward added there would make its entries stale.
"""

from __future__ import annotations

import torch


def upcast(t: torch.Tensor) -> torch.Tensor:
    """`t` in the dtype the references compute in: float32, or float64 for a float64 tensor (so that
    torch.autograd.gradcheck, which perturbs float64 inputs, sees float64 math)."""
    return t if t.dtype == torch.float64 else t.float()


def _column_sum(t: torch.Tensor) -> torch.Tensor:
    """The sum over every row of `t` (all dims but the last)."""
    return t.reshape(-1, t.shape[-1]).sum(0)


def _rms_grads(
    grad: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dscale) of ``y = x * rsqrt(mean(x^2) + eps) * scale``, all wide (float32/float64)."""
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    xhat = x * rstd
    gs = grad * scale
    dx = rstd * (gs - xhat * (gs * xhat).mean(-1, keepdim=True))
    return dx, _column_sum(grad * xhat)


def rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of rms_norm with respect to ``x`` and ``weight``, given the gradient of its output.

    With ``r = rsqrt(mean(x^2) + eps)`` and ``x̂ = x * r`` per row: ``dx = r * (g*w - x̂ * mean(g*w*x̂))`` and
    ``dw = Σ_rows g * x̂``; float32 math, returned in ``x``'s and ``weight``'s dtypes.
    """
    dx, dw = _rms_grads(upcast(grad), upcast(x), upcast(weight), eps)
    return dx.to(x.dtype), dw.to(weight.dtype).reshape(weight.shape)


def gemma_rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients (dx, dweight) of ``y = x * rsqrt(mean(x^2) + eps) * (1 + weight)``."""
    dx, dw = _rms_grads(upcast(grad), upcast(x), 1.0 + upcast(weight), eps)
    return dx.to(x.dtype), dw.to(weight.dtype).reshape(weight.shape)


def add_rms_norm_backward(
    grad_out: torch.Tensor, grad_summed: torch.Tensor, weight: torch.Tensor, eps: float, summed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dx, dresidual, dweight) of add_rms_norm's ``(rms_norm(s) * weight, s)``, ``s = x + residual``,
    from ``s`` itself (the forward's second output, kept for backward instead of x and residual): dx and dresidual
    are both ``ds``, in grad_out's dtype (normed's, x's) and grad_summed's (summed's, the residual's)."""
    if not grad_out.shape == grad_summed.shape == summed.shape:
        raise ValueError(f"grad_out {tuple(grad_out.shape)}, grad_summed {tuple(grad_summed.shape)} and summed "
                         f"{tuple(summed.shape)} must have one shape")  # fmt: skip
    ds, dw = _rms_grads(upcast(grad_out), upcast(summed), upcast(weight), eps)
    ds = ds + upcast(grad_summed)
    # two tensors, never one twice: a torch op's outputs must not alias each other
    return ds.to(grad_out.dtype), ds.to(grad_summed.dtype, copy=True), dw.to(weight.dtype).reshape(weight.shape)


def layer_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dx, dweight, dbias) of ``y = (x - mean) * rsqrt(var + eps) * weight + bias`` (biased var)."""
    g, xw = upcast(grad), upcast(x)
    centered = xw - xw.mean(-1, keepdim=True)
    rstd = torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps)
    xhat = centered * rstd
    gw = g * upcast(weight)
    dx = rstd * (gw - gw.mean(-1, keepdim=True) - xhat * (gw * xhat).mean(-1, keepdim=True))
    dw, db = _column_sum(g * xhat), _column_sum(g)
    return dx.to(x.dtype), dw.to(weight.dtype).reshape(weight.shape), db.to(bias.dtype).reshape(bias.shape)
