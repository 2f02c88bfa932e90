"""Forwards for Hugging Face transformers layers, built on catalog ops; the shipped layers file maps them.

Each forward is called as ``forward(module, ops, *args)`` with `ops` mapping the op ids its mapping declares
to op handles (the registered torch ops while torch.compile traces them). Nothing here imports transformers:
the forwards read only the attributes the mapped classes define (``weight``, ``variance_epsilon`` or ``eps``,
``gate_proj``/``up_proj``/``down_proj``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

Ops = Mapping[str, Callable[..., Any]]


def rms_norm_forward(module: Any, ops: Ops, hidden_states: torch.Tensor) -> torch.Tensor:
    """LlamaRMSNorm and its copies (Mistral, Qwen2, Qwen3 and its per-head q_norm/k_norm): layernorm.rms_norm.

    Llama rounds the normalised value to the input dtype before the weight multiply; the kernel rounds once,
    at the end (within the op's tolerance). A weight of another dtype than the input makes Llama's output
    that promoted dtype: such calls keep the class's own forward.
    """
    if module.weight.dtype != hidden_states.dtype:
        return type(module).forward(module, hidden_states)  # type: ignore[no-any-return]
    return ops["layernorm.rms_norm"](hidden_states, module.weight, module.variance_epsilon)  # type: ignore[no-any-return]


def gemma_rms_norm_forward(module: Any, ops: Ops, x: torch.Tensor) -> torch.Tensor:
    """GemmaRMSNorm (Gemma, Gemma 2, Gemma 3): ``x * rsqrt(mean(x^2) + eps) * (1 + weight)``, float32 math, cast
    once to x's dtype, as the class computes it: layernorm.gemma_rms_norm."""
    return ops["layernorm.gemma_rms_norm"](x, module.weight, module.eps)  # type: ignore[no-any-return]


GATE_UP = "kcatalog_gate_up"  # the non-persistent buffer fuse_gate_up registers: [gate | up] as one matrix


def silu_mlp_forward(module: Any, ops: Ops, x: torch.Tensor) -> torch.Tensor:
    """A gated SiLU MLP, ``down(silu(gate(x)) * up(x))``: one GEMM into [gate | up], then activation.silu_and_mul."""
    return module.down_proj(ops["activation.silu_and_mul"](F.linear(x, getattr(module, GATE_UP))))  # type: ignore[no-any-return]


def gelu_tanh_mlp_forward(module: Any, ops: Ops, x: torch.Tensor) -> torch.Tensor:
    """A gated GELU (tanh approximation) MLP (Gemma's GeGLU): one GEMM into [gate | up], then
    activation.gelu_and_mul with approximate='tanh'."""
    return module.down_proj(ops["activation.gelu_and_mul"](F.linear(x, getattr(module, GATE_UP)), "tanh"))  # type: ignore[no-any-return]


def fuse_gate_up(module: Any) -> Callable[[], None]:
    """Lay gate_proj's and up_proj's weights out one after the other in one buffer, so that one GEMM computes
    both: the buffer is registered on the module, non-persistent (`kcatalog_gate_up`: not in state_dict), and
    the two Parameters become views of its halves. They stay the same objects with the same values (state_dict
    keys and parameter identity unchanged, load_state_dict writes through), and the old storages are freed once
    nothing else holds them, so the weights take no more memory than before (one layer's gate and up more,
    briefly, while copying). Moving the model afterwards (`.to()`) copies the buffer and the two weights apart:
    still correct, but twice the memory; kernelize on the device the model runs on.

    Returns the undo (the buffer removed, each weight copied back into a storage of its own); raises
    ValueError, naming the reason, when the two weights cannot be one matrix.
    """
    gate, up = module.gate_proj.weight, module.up_proj.weight
    if gate.shape != up.shape or gate.dtype != up.dtype or gate.device != up.device:
        raise ValueError(
            f"gate_proj and up_proj weights differ ({tuple(gate.shape)} {gate.dtype} {gate.device} vs "
            f"{tuple(up.shape)} {up.dtype} {up.device}): they cannot be one GEMM"
        )
    rows = gate.shape[0]
    with torch.no_grad():
        fused = torch.empty((2 * rows, gate.shape[1]), dtype=gate.dtype, device=gate.device)
        fused[:rows].copy_(gate)
        fused[rows:].copy_(up)
        gate.data = fused[:rows]
        up.data = fused[rows:]
    module.register_buffer(GATE_UP, fused, persistent=False)

    def undo() -> None:
        module._buffers.pop(GATE_UP, None)
        with torch.no_grad():
            gate.data = gate.data.clone()
            up.data = up.data.clone()

    return undo
