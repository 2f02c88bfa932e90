"""Forwards for Hugging Face transformers layers in kernelize's training mode (the layers file's `modes:
[training]` mappings), where `ops` are the catalog's registered torch ops: their autograd runs each op's
backward op, so gradients flow through the catalog's kernels.

They differ from the inference forwards (transformers.py) where those rely on something without autograd: the
gated MLPs' [gate | up] buffer, whose Parameters are views of it (no gradient reaches them), and the in-place
rotary kernel. The RMSNorms and the residual add + RMSNorm fusion need no other forward: theirs call functional
ops, whichever the `ops` are.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .loss import causal_lm_loss
from .transformers import Ops, bind_rope, rotary_call_fits

SILU_AND_MUL, GELU_AND_MUL = "activation.silu_and_mul", "activation.gelu_and_mul"
APPLY_ROTARY = "attention.apply_rotary"


class _GateUp(torch.autograd.Function):
    """x @ [gate | up].T in one GEMM, with the gradients of x, gate and up.

    The concatenated weight is made for the forward's GEMM and dropped after it (only x, gate and up are saved:
    no weight-sized tensor is kept per layer until the backward); the backward computes both weights' gradients
    in one GEMM (views of its halves) and x's in two accumulating ones on the halves of the output's gradient."""

    @staticmethod
    def forward(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.linear(x, torch.cat((gate, up)))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, gate, up = ctx.saved_tensors
        width = gate.shape[0]
        rows = grad.reshape(-1, grad.shape[-1])
        grad_x = grad_gate = grad_up = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.mm(rows[:, :width], gate).addmm_(rows[:, width:], up).view_as(x)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            grad_w = rows.t().mm(x.reshape(-1, x.shape[-1]))
            grad_gate, grad_up = grad_w[:width], grad_w[width:]
        return grad_x, grad_gate, grad_up


def gate_up(module: Any, x: torch.Tensor) -> torch.Tensor:
    """[gate(x) | up(x)] of a gated MLP with bias-free gate_proj and up_proj, in one GEMM, autograd-correct."""
    return _GateUp.apply(x, module.gate_proj.weight, module.up_proj.weight)  # type: ignore[no-any-return,no-untyped-call]


def silu_mlp_forward(module: Any, ops: Ops, x: torch.Tensor) -> torch.Tensor:
    """A gated SiLU MLP, ``down(silu(gate(x)) * up(x))``: gate and up in one GEMM (gate_up), then
    activation.silu_and_mul; the weights stay the module's own (no buffer)."""
    return module.down_proj(ops[SILU_AND_MUL](gate_up(module, x)))  # type: ignore[no-any-return]


def gelu_tanh_mlp_forward(module: Any, ops: Ops, x: torch.Tensor) -> torch.Tensor:
    """A gated GELU (tanh approximation) MLP (Gemma's GeGLU): gate and up in one GEMM (gate_up), then
    activation.gelu_and_mul with approximate='tanh'."""
    return module.down_proj(ops[GELU_AND_MUL](gate_up(module, x), "tanh"))  # type: ignore[no-any-return]


def bind_rotary(module: Any, ops: Ops) -> Callable[[], None]:
    """A Llama-family or Gemma attention module's prepare in training: store on the instance a copy of its class's
    forward whose global `apply_rotary_pos_emb` is rotary_pos_emb bound to attention.apply_rotary (functional, with
    a backward) and to the original, for the calls the op does not take; attention_forward runs it. Attention
    itself stays the implementation the config names (sdpa): attention.prefill and attention.decode have no
    backward. Returns the undo; raises ValueError, with the reason, where the forward cannot be copied so."""
    return bind_rope(module, rotary_pos_emb, ops[APPLY_ROTARY])


def rotary_pos_emb(
    rotary: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    original: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *rest: Any,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` through attention.apply_rotary
    (new q and k, autograd through its backward op) where the op computes the call as transformers does: q [B, Hq,
    S, D], k [B, Hk, S, D], cos and sin [B or 1, S, D] (full rotary), unsqueeze_dim 1, one dtype and device. Every
    other call goes to `original`. Metadata only, so torch.compile guards on it."""
    if not rotary_call_fits(q, k, cos, sin, rest, kwargs):
        return original(q, k, cos, sin, *rest, **kwargs)
    return rotary(q, k, cos, sin)


# ---------------------------------------------------------------- the LM head and the loss in one op


def check_causal_lm(module: Any, ops: Ops) -> None:
    """causal_lm_forward's prepare: ValueError, with the reason, unless the module has the `model` and bias-free
    nn.Linear `lm_head` of transformers' *ForCausalLM classes and a forward taking `labels`."""
    head = getattr(module, "lm_head", None)
    if type(head) is not torch.nn.Linear or head.bias is not None:
        shown = "a torch.nn.Linear with a bias" if type(head) is torch.nn.Linear else type(head).__name__
        raise ValueError(f"lm_head is {shown}, not a bias-free torch.nn.Linear")
    if not isinstance(getattr(module, "model", None), torch.nn.Module):
        raise ValueError("the module has no `model` (the decoder whose last hidden state the LM head reads)")
    if "labels" not in inspect.signature(inspect.unwrap(type(module).forward)).parameters:
        raise ValueError("its forward takes no `labels`")


def causal_lm_forward(module: Any, ops: Ops, *args: Any, **kwargs: Any) -> Any:
    """A *ForCausalLM's forward in training with labels: the decoder (`module.model`), then the LM head's matmul
    and transformers' causal-LM loss in one op (loss.fused_linear_cross_entropy), so the logits [tokens, vocab]
    are never materialised; the output's `logits` is None. The loss is transformers' (ForCausalLMLoss): labels
    shifted by one (or `shift_labels` as given), `ignore_index` (-100) left out, the mean over the rest, or their
    sum over `num_items_in_batch` where given. Every other call (no labels, eval mode, return_dict=False,
    logits_to_keep) is the class's own forward: logits as transformers computes them."""
    signature = inspect.signature(inspect.unwrap(type(module).forward))
    bound = signature.bind(module, *args, **kwargs)
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(signature.parameters)))  # self
    extra: dict[str, Any] = next(
        (arguments.pop(p.name, {}) for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD), {}
    )
    labels = arguments.pop("labels", None)
    keep = arguments.pop("logits_to_keep", 0)
    shift_labels = extra.get("shift_labels")
    if (
        not module.training
        or (labels is None and shift_labels is None)
        or extra.get("return_dict") is False
        or not (isinstance(keep, int) and keep == 0)
    ):
        return type(module).forward(module, *args, **kwargs)
    outputs = module.model(**arguments, **extra)
    loss = causal_lm_loss(
        ops,
        outputs.last_hidden_state,
        module.lm_head.weight,
        labels,
        ignore_index=extra.get("ignore_index", -100),
        shift_labels=shift_labels,
        num_items_in_batch=extra.get("num_items_in_batch"),
    )
    from transformers.modeling_outputs import CausalLMOutputWithPast

    rest = {name: value for name, value in outputs.items() if name != "last_hidden_state"}
    return CausalLMOutputWithPast(loss=loss, logits=None, **rest)
