"""The fused experts through transformers' own implementations (its experts interface, transformers >= 5.17).

transformers' experts functions take the experts module as ``self`` and read only its weights and a few
layout flags; `_Experts` is that module for the layout this op declares (gate and up concatenated, gate
first, not transposed, no bias, SiLU), so the functions run as they do inside a model.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


class _Experts:
    """What transformers' experts functions read from an experts module, for this op's weights."""

    has_gate = True
    has_bias = False
    is_transposed = False
    is_concatenated = True
    has_post_expert_norm = False
    _is_expert_parallel = False

    def __init__(self, gate_up_proj: torch.Tensor, down_proj: torch.Tensor) -> None:
        self.gate_up_proj = gate_up_proj
        self.down_proj = down_proj
        self.num_experts = gate_up_proj.shape[0]
        self.hidden_dim = gate_up_proj.shape[2]
        self.intermediate_dim = down_proj.shape[2]
        self.act_fn = F.silu

    def _apply_gate(self, gate_up_out: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up_out.chunk(2, dim=-1)
        return self.act_fn(gate) * up


@functools.cache
def _interface(name: str) -> Callable[..., torch.Tensor]:
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    return ALL_EXPERTS_FUNCTIONS[name]  # type: ignore[no-any-return]


@functools.cache
def _eager() -> Callable[..., torch.Tensor]:
    # The experts classes' own forward (the 'eager' implementation): the interface's decorator keeps it
    # as __wrapped__. Mixtral's is Qwen3-MoE's, line for line.
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    forward: Any = MixtralExperts.forward
    return getattr(forward, "__wrapped__", forward)  # type: ignore[no-any-return]


def _call(
    fn: Callable[..., torch.Tensor],
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> torch.Tensor:
    return fn(_Experts(gate_up_proj, down_proj), hidden_states, topk_ids, topk_weights)


def eager(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> torch.Tensor:
    """transformers' 'eager' experts: a loop over the experts that receive tokens, one GEMM pair each."""
    return _call(_eager(), hidden_states, topk_ids, topk_weights, gate_up_proj, down_proj)


def batched_mm(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> torch.Tensor:
    """transformers' 'batched_mm' experts: every pair's expert weights gathered, then one bmm per projection
    (memory grows with T * K * 3 * I * H: for decode only)."""
    return _call(_interface("batched_mm"), hidden_states, topk_ids, topk_weights, gate_up_proj, down_proj)


BATCHED_MM_BYTES = 1 << 30  # the most batched_mm may gather: a decode batch's experts, never a prefill's


def batched_mm_fits(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> bool | str:
    """batched_mm's gate: the expert weights it gathers (one copy per token and expert) within BATCHED_MM_BYTES."""
    gathered = topk_ids.numel() * (gate_up_proj[0].numel() + down_proj[0].numel()) * gate_up_proj.element_size()
    if gathered > BATCHED_MM_BYTES:
        return (
            f"batched_mm would gather {gathered / 2**30:.1f} GiB of expert weights (at most {BATCHED_MM_BYTES >> 30})"
        )
    return True


def grouped_mm(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> torch.Tensor:
    """transformers' 'grouped_mm' experts (its default): pairs sorted by expert, torch's grouped GEMM where it
    can run, else transformers' own fallback op."""
    return _call(_interface("grouped_mm"), hidden_states, topk_ids, topk_weights, gate_up_proj, down_proj)
