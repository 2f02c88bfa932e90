"""Pure-torch references for the LM head's fused linear cross-entropy: the logits materialised, float32 math.

``fused_linear_cross_entropy(x [T, H], weight [V, H], target [T])`` is transformers' causal-LM loss on
``logits = x @ weight.T``: the mean over the rows whose target is not `ignore_index` of
``logsumexp(logits[t]) - logits[t, target[t]]``. When every target is ignored the loss is 0 and so are the
gradients (Liger-Kernel's answer; torch's mean over no rows is NaN, which an optimizer step would spread into
every weight). It also returns each row's logsumexp, which the backward reads instead of reducing the logits
again. Targets other than `ignore_index` must lie in [0, V).
"""

from __future__ import annotations

import torch


def check_inputs(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> None:
    """Raise ValueError, naming the shapes, unless x is [T, H], weight [V, H] and target [T] of integers."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(
            f"fused_linear_cross_entropy: x must be [T, H] and weight [V, H] with the same H, got x "
            f"{tuple(x.shape)} and weight {tuple(weight.shape)}"
        )
    if target.shape != (x.shape[0],) or target.dtype.is_floating_point or target.dtype == torch.bool:
        raise ValueError(
            f"fused_linear_cross_entropy: target must be [T] = [{x.shape[0]}] integers, got {tuple(target.shape)} "
            f"{target.dtype}"
        )


def math_dtype(x: torch.Tensor) -> torch.dtype:
    """float32, or float64 for float64 inputs (the gradient checks run the reference in float64)."""
    return torch.promote_types(x.dtype, torch.float32)


def valid_rows(target: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the rows whose target counts [T] bool, how many there are but at least 1 (a 0-dim tensor))."""
    valid = target != ignore_index
    return valid, valid.sum().clamp(min=1)


def fused_linear_cross_entropy(
    x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy of ``x @ weight.T`` against `target` over the rows not ignored, each row's logsumexp):
    a 0-dim loss and a [T] lse, float32 (float64 for float64 inputs); the lse carries no gradient."""
    check_inputs(x, weight, target)
    dt = math_dtype(x)
    logits = x.to(dt) @ weight.to(dt).T
    lse = torch.logsumexp(logits, dim=-1)
    valid, count = valid_rows(target, ignore_index)
    picked = logits.gather(1, torch.where(valid, target, 0).long()[:, None])[:, 0]
    loss = torch.where(valid, lse - picked, 0.0).sum() / count
    return loss, lse.detach()


def fused_linear_cross_entropy_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int,
    lse: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of the loss wrt x and weight, scaled by `grad`, in x's and weight's dtypes.

    ``g = (softmax(logits) - onehot(target)) * grad / n`` on the rows not ignored (0 elsewhere), the softmax
    from the forward's logsumexp `lse`; then ``grad_x = g @ weight`` and ``grad_weight = g.T @ x``.
    """
    check_inputs(x, weight, target)
    dt = math_dtype(x)
    xf, wf = x.to(dt), weight.to(dt)
    valid, count = valid_rows(target, ignore_index)
    g = torch.exp(xf @ wf.T - lse.to(dt)[:, None])
    rows = torch.arange(x.shape[0], device=x.device)
    g[rows, torch.where(valid, target, 0).long()] -= valid.to(dt)
    g = g * torch.where(valid, grad.to(dt) / count, 0.0)[:, None]
    return (g @ wf).to(x.dtype), (g.T @ xf).to(weight.dtype)
