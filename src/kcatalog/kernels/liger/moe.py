"""The fused experts through Liger-Kernel's fused MoE (``liger_kernel.ops.fused_moe``, Liger-Kernel >= 0.8).

Liger's kernel takes transformers' layout (gate_up [E, 2I, H], down [E, H, I]) and int32 routing indices;
it reads the number of tiles back to the host once per call (not CUDA-graph safe). Its GEMMs autotune on
first use unless LIGER_FUSED_MOE_AUTOTUNE=0 was set before it was imported.
"""

from __future__ import annotations

import torch


def fused_experts(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> torch.Tensor:
    """Liger's LigerFusedMoEFunction (forward only here)."""
    from liger_kernel.ops.fused_moe import LigerFusedMoEFunction

    out: torch.Tensor = LigerFusedMoEFunction.apply(
        hidden_states, gate_up_proj, down_proj, topk_ids.to(torch.int32), topk_weights
    )
    return out
