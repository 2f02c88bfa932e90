"""q, k and v of a Llama-family attention module in one GEMM, under the class's own forward.

The forward (whatever the installed transformers writes) calls ``self.q_proj(x)``, ``self.k_proj(x)`` and
``self.v_proj(x)`` in turn on the same x. `bind_fused_qkv` lays the three weights (and biases) out as the rows of
one buffer, as fuse_gate_up does for the MLP, and gives each projection an instance forward: q_proj's runs the one
GEMM into [q | k | v] and keeps it, with its input, for the two calls that follow; k_proj and v_proj return their
column slices of it when called on that same input (v_proj then lets it go), and run their own GEMM otherwise
(and with autograd: the buffer carries no gradient to the Parameters).
The slices are views with strided token rows, which attention.rotary_embedding rotates where they lie.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .attention import bind_attention
from .transformers import Ops, fuse_rows

PROJECTIONS = ("q_proj", "k_proj", "v_proj")  # in the order the Llama-family forwards call them
WEIGHT, BIAS = "kcatalog_qkv", "kcatalog_qkv_bias"  # the attention module's non-persistent buffers


class _Fused:
    """One attention module's fused projection: the [q | k | v] of the last q_proj call, until v_proj takes it."""

    def __init__(self, module: Any) -> None:
        self.module = module
        widths = [getattr(module, name).out_features for name in PROJECTIONS]
        self.bounds = ((0, widths[0]), (widths[0], widths[0] + widths[1]), (widths[0] + widths[1], sum(widths)))
        self.pending: list[torch.Tensor] = []  # [input, its q|k|v] between q_proj's call and v_proj's

    def query(self, x: torch.Tensor) -> torch.Tensor:
        projection = self.module.q_proj
        if torch.is_grad_enabled() and (x.requires_grad or projection.weight.requires_grad):
            self.pending.clear()  # the buffer carries no gradient to the Parameters: three GEMMs, as the class
            return F.linear(x, projection.weight, projection.bias)
        qkv = F.linear(x, self.module._buffers[WEIGHT], self.module._buffers.get(BIAS))
        self.pending[:] = [x, qkv]
        return qkv[..., : self.bounds[0][1]]

    def key(self, x: torch.Tensor) -> torch.Tensor:
        return self._slice(1, x)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        out = self._slice(2, x)
        self.pending.clear()
        return out

    def _slice(self, index: int, x: torch.Tensor) -> torch.Tensor:
        if self.pending and self.pending[0] is x:
            start, stop = self.bounds[index]
            return self.pending[1][..., start:stop]
        projection = getattr(self.module, PROJECTIONS[index])  # called on another input: its own GEMM
        return F.linear(x, projection.weight, projection.bias)


def bind_fused_qkv(module: Any, ops: Ops) -> Callable[[], None]:
    """A Llama-family attention module's prepare: bind_attention (RoPE and attention through the ops), and q/k/v
    in one GEMM. The weights take no more memory (they become views of the buffer; one layer's q, k and v twice,
    briefly, while copying). Returns the undo: the projections' forwards, the weights' own storages and the
    attention binding put back, the buffers freed. Raises ValueError, naming the reason, where the projections
    are not three plain nn.Linear of one dtype and device with all or no biases, or share weights."""
    _check(module)
    undo_attention = bind_attention(module, ops)
    undos = [fuse_rows(module, PROJECTIONS, "weight", WEIGHT)]
    if module.q_proj.bias is not None:
        undos.append(fuse_rows(module, PROJECTIONS, "bias", BIAS))
    fused = _Fused(module)
    for name, forward in zip(PROJECTIONS, (fused.query, fused.key, fused.value), strict=True):
        getattr(module, name).__dict__["forward"] = forward

    def undo() -> None:
        for name in PROJECTIONS:
            getattr(module, name).__dict__.pop("forward", None)
        for step in reversed(undos):
            step()
        undo_attention()

    return undo


def _check(module: Any) -> None:
    """ValueError, with the reason, where the three projections cannot be one GEMM."""
    projections = [getattr(module, name, None) for name in PROJECTIONS]
    for name, projection in zip(PROJECTIONS, projections, strict=True):
        if type(projection) is not torch.nn.Linear:  # a quantized or adapter layer computes something else
            raise ValueError(f"{name} is {type(projection).__name__}, not torch.nn.Linear")
        if "forward" in vars(projection):
            raise ValueError(f"{name} has a forward of its own on the instance")
    weights = [projection.weight for projection in projections]  # type: ignore[union-attr]
    first = weights[0]
    if any(w.dtype != first.dtype or w.device != first.device or w.shape[1] != first.shape[1] for w in weights):
        shown = ", ".join(f"{tuple(w.shape)} {w.dtype} {w.device}" for w in weights)
        raise ValueError(f"q_proj, k_proj and v_proj weights differ ({shown}): they cannot be one GEMM")
    if len({id(w) for w in weights}) != len(weights):
        raise ValueError("q_proj, k_proj and v_proj share a weight (tied): they cannot be views of one buffer")
    if not first.is_floating_point():
        raise ValueError(f"the projection weights are {first.dtype}, not floating point")
    biases = [projection.bias for projection in projections]  # type: ignore[union-attr]
    if any(b is None for b in biases) and any(b is not None for b in biases):
        raise ValueError("some of q_proj, k_proj and v_proj have biases and some not")
    if any(b is not None and (b.dtype != first.dtype or b.device != first.device) for b in biases):
        raise ValueError("the projection biases differ from the weights in dtype or device")
    for name, tensor in zip(PROJECTIONS * 2, weights + [b for b in biases if b is not None], strict=False):
        if tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size():
            # tied to (or a view of) another tensor: laying it out anew would untie it
            raise ValueError(f"{name}'s {'weight' if tensor.dim() == 2 else 'bias'} shares its storage")
