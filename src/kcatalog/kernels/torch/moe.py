"""The fused experts of a mixture-of-experts layer, as pure torch (backend `torch`, the reference).

Written for clarity, not speed: a loop over the experts, float32 math throughout, one rounding at the end.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fused_experts(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> torch.Tensor:
    """``out[t] = sum_k w[t, k] * down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t]))`` with ``e = ids[t, k]``.

    hidden_states [T, H]; topk_ids [T, K] in [0, E); topk_weights [T, K]; gate_up_proj [E, 2I, H], its first
    I rows the gate, the next I the up projection (transformers' layout); down_proj [E, H, I]. Output [T, H]
    in hidden_states' dtype.
    """
    x = hidden_states.float()
    out = torch.zeros_like(x)
    inter = down_proj.shape[-1]
    for expert in range(gate_up_proj.shape[0]):
        token, slot = torch.nonzero(topk_ids == expert, as_tuple=True)
        if token.numel() == 0:  # an expert that receives no token contributes nothing
            continue
        gate_up = x[token] @ gate_up_proj[expert].float().T
        act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        y = act @ down_proj[expert].float().T
        out.index_add_(0, token, y * topk_weights[token, slot].float()[:, None])
    return out.to(hidden_states.dtype)


def fused_experts_fake(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> torch.Tensor:
    """torch.compile's fake: the output's shape and dtype (the reference's routing is data-dependent)."""
    return torch.empty_like(hidden_states)
