"""The fused experts through torch's grouped GEMM (``torch.nn.functional.grouped_mm``, else ``torch._grouped_mm``).

The (token, slot) pairs are sorted by expert; one grouped GEMM per projection runs every expert's rows at
once (the offsets mark where each expert's rows end), then SiLU-and-mul, the routing weights, and the sum
over each token's K rows. On CUDA the grouped GEMM takes bfloat16 only (CUTLASS, sm_80+ from torch 2.9).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    grouped = getattr(F, "grouped_mm", None) or torch._grouped_mm
    out: torch.Tensor = grouped(a, b, offs=offs)
    return out


def fused_experts(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
) -> torch.Tensor:
    """As the reference (kcatalog.kernels.torch.moe), with one grouped GEMM per projection."""
    tokens, top_k = topk_ids.shape
    experts, inter = gate_up_proj.shape[0], down_proj.shape[-1]
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(experts, dtype=torch.int32, device=flat.device)
    counts.scatter_add_(0, flat.long(), torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    x = hidden_states[order // top_k]
    gate_up = _grouped_mm(x, gate_up_proj.transpose(-2, -1), offs)  # [S, 2I]: weights read in place, transposed
    act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    y = _grouped_mm(act, down_proj.transpose(-2, -1), offs)  # [S, H]
    y = y.float() * topk_weights.reshape(-1)[order].float()[:, None]
    out = torch.zeros((tokens * top_k, y.shape[1]), dtype=torch.float32, device=y.device)
    out[order] = y
    return out.view(tokens, top_k, -1).sum(dim=1).to(hidden_states.dtype)
