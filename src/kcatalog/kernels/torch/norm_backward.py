"""Pure-torch references for the normalisation layers' gradients (gemma_rms_norm, add_rms_norm, layer_norm).

Each takes the incoming gradient(s) then the forward's own arguments, recomputes the row statistics, and returns
the gradients in the dtypes of the inputs they belong to. Math in float32, or float64 for float64 inputs (so that
``torch.autograd.gradcheck`` can check them). A module of its own: the tuned table records the digests of the
forward modules, which an edit there would change.
"""

from __future__ import annotations

import torch


def _wide(t: torch.Tensor) -> torch.Tensor:
    """`t` in float32, or as it is where it is float64."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


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


def gemma_rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients (dx, dweight) of ``y = x * rsqrt(mean(x^2) + eps) * (1 + weight)``."""
    dx, dw = _rms_grads(_wide(grad), _wide(x), 1.0 + _wide(weight), eps)
    return dx.to(x.dtype), dw.to(weight.dtype).reshape(weight.shape)


def add_rms_norm_backward(
    grad_out: torch.Tensor,
    grad_summed: torch.Tensor,
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dx, dresidual, dweight) of add_rms_norm's ``(rms_norm(s) * weight, s)``, ``s = x + residual``
    rounded to the residual's dtype (recomputed here as the forward rounds it): dx and dresidual are both ds."""
    summed = (_wide(x) + _wide(residual)).to(residual.dtype)
    ds, dw = _rms_grads(_wide(grad_out), _wide(summed), _wide(weight), eps)
    ds = ds + _wide(grad_summed)
    # two tensors, never one twice: a torch op's outputs must not alias each other
    return ds.to(x.dtype), ds.to(residual.dtype, copy=True), dw.to(weight.dtype).reshape(weight.shape)


def layer_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dx, dweight, dbias) of ``y = (x - mean) * rsqrt(var + eps) * weight + bias`` (biased var)."""
    g, xw = _wide(grad), _wide(x)
    centered = xw - xw.mean(-1, keepdim=True)
    rstd = torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps)
    xhat = centered * rstd
    gw = g * _wide(weight)
    dx = rstd * (gw - gw.mean(-1, keepdim=True) - xhat * (gw * xhat).mean(-1, keepdim=True))
    dw, db = _column_sum(g * xhat), _column_sum(g)
    return dx.to(x.dtype), dw.to(weight.dtype).reshape(weight.shape), db.to(bias.dtype).reshape(bias.shape)
