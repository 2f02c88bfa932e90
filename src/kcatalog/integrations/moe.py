"""The routed experts of transformers' mixture-of-experts layers, on moe.fused_experts; the shipped MoE layers
file (transformers.moe.layers.yaml) maps them.

transformers (>= 5.17) keeps a MoE layer's experts in one module per layer (Qwen3MoeExperts, MixtralExperts,
...) whose forward is its experts interface: ``forward(hidden_states [T, H], top_k_index [T, K],
top_k_weights [T, K])`` dispatched on ``config._experts_implementation``. kernelize replaces that forward on
the instance with `experts_forward`, an implementation of the same interface; the router, the shared experts
and the weights (gate_up_proj [E, 2I, H], down_proj [E, H, I], read in place) stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

Ops = Mapping[str, Callable[..., Any]]
FUSED_EXPERTS = "moe.fused_experts"


def experts_forward(
    module: Any, ops: Ops, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """The experts of one MoE layer through moe.fused_experts. Calls whose weights are of another dtype than
    the hidden states (autocast) keep the class's own forward, which promotes as transformers does."""
    gate_up, down = module.gate_up_proj, module.down_proj
    if gate_up.dtype != hidden_states.dtype or down.dtype != hidden_states.dtype:
        return type(module).forward(module, hidden_states, top_k_index, top_k_weights)  # type: ignore[no-any-return]
    return ops[FUSED_EXPERTS](hidden_states, top_k_index, top_k_weights, gate_up, down)  # type: ignore[no-any-return]
