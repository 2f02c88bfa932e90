"""Shared by the row-wise Triton wrappers: tensors as [rows, width] views."""

from __future__ import annotations

import torch


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """A 2-D ``[rows, width]`` view of `t` with a unit-stride last dim; copies only if no such view exists."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    if t.dim() == 2:
        return t
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return t.reshape(-1, t.shape[-1])
