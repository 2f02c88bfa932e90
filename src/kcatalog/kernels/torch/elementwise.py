"""Pure-torch references for elementwise/row-wise ops: upcast to float32, compute, cast back."""

from __future__ import annotations

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim with float32 accumulation: ``exp(x - max) / sum(exp(x - max))`` in ``x.dtype``."""
    xf = x.float()
    shifted = xf - xf.amax(dim=-1, keepdim=True)
    e = torch.exp(shifted)
    y = e / e.sum(dim=-1, keepdim=True)
    return y.to(x.dtype)
