"""Attention through transformers' own extension point: the catalog's attention.prefill and attention.decode
registered as the attention implementation 'kcatalog' in transformers' AttentionInterface (with sdpa's mask
function in its AttentionMaskInterface: the masks it builds are what the ops take) and set on the model's config.

The registered function is one for the process; the op handles it calls are the kernelized module's own (kept
on the instance by ``bind_attention``), so two models kernelized with two catalogs each call their catalog's,
and a module never kernelized goes to transformers' sdpa function. Nothing here imports transformers until a
mapping's prepare runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from .transformers import Ops, bind_rotary

IMPLEMENTATION = "kcatalog"  # the name registered in transformers' AttentionInterface and AttentionMaskInterface
PREFILL, DECODE = "attention.prefill", "attention.decode"
OPS = "_kcatalog_attention_ops"  # the instance attribute holding a kernelized attention module's op handles
# Keyword arguments of transformers' attention calls that change the computation in ways the ops do not take:
# logit soft-capping (Gemma 2), attention sinks (gpt-oss), a position bias (T5-like): those calls go to sdpa.
_UNTAKEN = ("softcap", "s_aux", "sinks", "position_bias")
_LOCK = threading.Lock()
# The implementations kernelize replaces: transformers' defaults, whose results the ops compute (and its own).
_REPLACED = ("sdpa", "eager", IMPLEMENTATION)


def attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention function contract, through attention.prefill (as many keys as queries) or
    attention.decode (a KV cache longer than the query): query [B, Hq, T, D], key and value [B, Hk, S, D],
    attention_mask as sdpa_mask builds it (None, or bool [B, 1, T, S] holding the causal and window masks);
    returns ([B, T, Hq, D], None). Calls the ops cannot take go to transformers' sdpa_attention_forward."""
    ops = module.__dict__.get(OPS)
    if ops is None or not _takes(module, query, key, value, dropout, kwargs):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    batch, heads, queries, dim = query.shape
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    causal = queries > 1 and attention_mask is None and causal  # a mask holds the causal part, as in sdpa
    if causal and key.shape[2] > queries:  # an empty static cache's prefill: the keys past the prompt are unused
        key, value = key[:, :, :queries], value[:, :, :queries]
    op = ops[PREFILL] if key.shape[2] == queries else ops[DECODE]
    flat = query.transpose(1, 2).reshape(batch * queries, heads, dim)  # a view of the projection's [B, T, Hq, D]
    # sliding_window stays 0: sdpa_mask puts any window that matters into the mask, and leaves none only where
    # the keys fit inside the window.
    out = op(flat, key, value, attention_mask, scaling, causal, 0)
    return out.view(batch, queries, heads, value.shape[-1]), None


def _takes(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    dropout: float,
    kwargs: dict[str, Any],
) -> bool:
    """Whether the ops compute this call as transformers' sdpa would: metadata only, so torch.compile guards on it."""
    if any(kwargs.get(name) is not None for name in _UNTAKEN) or kwargs.get("output_attentions"):
        return False
    if (dropout and module.training) or query.dim() != 4 or key.dim() != 4 or key.shape[0] != query.shape[0]:
        return False
    if not (query.dtype == key.dtype == value.dtype) or query.shape[1] % key.shape[1]:
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)))


def register() -> None:
    """Register the implementation with transformers, once per process: the function, and sdpa's mask function,
    whose masks (None where `is_causal` suffices, else bool) are what the ops take."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    with _LOCK:
        AttentionInterface.register(IMPLEMENTATION, attention)
        AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)


def bind_attention(module: Any, ops: Ops) -> Callable[[], None]:
    """A Llama-family or Gemma attention module's prepare: RoPE through attention.rotary_embedding (bind_rotary),
    and attention through the ops: the implementation registered with transformers, the module's op handles
    kept on the instance, and the model's config (shared by its layers) set to 'kcatalog'. Returns the undo,
    which puts back the implementation the config named before (undone in reverse order, the first layer's undo
    restores the model's original)."""
    config = getattr(module, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        raise ValueError("the module has no transformers config naming its attention implementation")
    previous = config._attn_implementation
    if previous not in _REPLACED:  # flash_attention_2, flex_attention, paged: the user's choice, with masks of its own
        raise ValueError(f"the model's attention implementation is {previous!r}, not one of {', '.join(_REPLACED)}")
    softcap = getattr(config, "attn_logit_softcapping", None)
    if softcap is not None:  # Gemma 2
        raise ValueError(f"attn_logit_softcapping is {softcap}: attention.prefill and attention.decode have none")
    undo_rotary = bind_rotary(module, ops)
    register()
    module.__dict__[OPS] = {PREFILL: ops[PREFILL], DECODE: ops[DECODE]}
    config._attn_implementation = IMPLEMENTATION

    def undo() -> None:
        module.__dict__.pop(OPS, None)
        config._attn_implementation = previous
        undo_rotary()

    return undo
