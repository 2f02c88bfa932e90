"""A causal LM's loss from its last hidden states through loss.fused_linear_cross_entropy: the logits never
materialised. Called from a CausalLM forward in place of ``lm_head`` + transformers' ``ForCausalLMLoss``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

Ops = Mapping[str, Callable[..., Any]]

OP = "loss.fused_linear_cross_entropy"


def causal_lm_loss(
    ops: Ops,
    hidden_states: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor | None = None,
    *,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    num_items_in_batch: torch.Tensor | int | None = None,
) -> torch.Tensor:
    """transformers' ForCausalLMLoss of ``hidden_states @ lm_head_weight.T``, through ``ops[OP]``.

    hidden_states [B, S, H] (or [S, H]); labels [B, S]: shifted as transformers shifts them (position s predicts
    label s + 1, the last position predicts nothing), unless `shift_labels` (already shifted, [B, S]) is given.
    The mean over the positions whose label is not ignore_index, or, with `num_items_in_batch` (gradient
    accumulation), their sum divided by it. A 0-dim float32 loss; 0 where every label is ignored
    (transformers gives NaN there without num_items_in_batch). `ops` maps OP to the op: the registered torch
    op for a gradient (its autograd runs the backward op), an op handle for the value alone. The LM head
    must have no bias.
    """
    if shift_labels is None:
        if labels is None:
            raise ValueError("causal_lm_loss: give labels or shift_labels")
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    if shift_labels.shape != hidden_states.shape[:-1]:
        raise ValueError(
            f"causal_lm_loss: labels {tuple(shift_labels.shape)} do not match hidden_states "
            f"{tuple(hidden_states.shape)} (one label per position)"
        )
    x = hidden_states.reshape(-1, hidden_states.shape[-1])
    target = shift_labels.reshape(-1).to(device=x.device)
    loss: torch.Tensor = ops[OP](x, lm_head_weight, target, ignore_index)[0]
    if num_items_in_batch is None:
        return loss
    counted = (target != ignore_index).sum()
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss * counted / num_items_in_batch
