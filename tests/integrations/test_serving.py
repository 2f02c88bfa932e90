"""Kernelized models under torch.inference_mode, as serving code runs them (every activation an inference tensor,
which keeps no version counter). Tiny random-weight Llama, Qwen3 and Gemma give the plain model's greedy tokens
there (dynamic and static cache), and no kernelized path reads a tensor's version under
inference_mode; every mapping of the shipped layers file runs there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from test_kernelize import relative_error, tokens, tolerance
from version_reads import watched_version_reads

import kcatalog
from kcatalog.integrations.kernelize import default_catalog
from kcatalog.model import Mode

NEW_TOKENS = 6
# Between them, these use every mapping of the shipped layers files.
MAPPING_MODELS: dict[str, dict[str, int]] = {"llama": {}, "qwen3": {}, "gemma": {}, "gemma2": {},
                                             "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2,
                                                           "moe_intermediate_size": 32}}  # fmt: skip


def greedy(model: Any, ids: torch.Tensor, **options: Any) -> torch.Tensor:
    with torch.inference_mode():
        return model.generate(  # type: ignore[no-any-return]
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False, **options
        )


@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma"])
def test_kernelized_greedy_tokens_under_inference_mode_are_the_plain_models(
    name: str, tiny: Callable[..., Any]
) -> None:
    """(test_kernelize checks the same under no_grad, for these models and more.)"""
    model = tiny(name)
    ids = tokens()
    plain = greedy(model, ids), greedy(model, ids, cache_implementation="static")
    kcatalog.kernelize(model)
    with watched_version_reads() as reads:
        kernelized = greedy(model, ids), greedy(model, ids, cache_implementation="static")
    assert reads == []
    assert kernelized[0].shape == (2, ids.shape[1] + NEW_TOKENS)
    assert torch.equal(kernelized[0], plain[0]) and torch.equal(kernelized[1], plain[1])
    kcatalog.unkernelize(model)


def test_every_shipped_mapping_runs_under_inference_mode_without_reading_versions(
    tiny: Callable[..., Any],
) -> None:
    """Every layer mapping of the shipped catalog is used by one of the models, each run once under
    inference_mode: logits within the ops' tolerances of the plain model's, and no version read."""
    used: set[str] = set()
    for name, config in MAPPING_MODELS.items():
        model = tiny(name, **config)
        ids = tokens()
        with torch.inference_mode():
            ref = model(ids).logits
        report = kcatalog.kernelize(model)
        used |= {item.mapping for item in report.replaced}
        with watched_version_reads() as reads, torch.inference_mode():
            out = model(ids).logits
        assert reads == [], name
        assert out.is_inference()
        assert relative_error(out, ref) <= tolerance(report), name
        kcatalog.unkernelize(model)
    # llama_attention takes what llama_attention_fused_qkv cannot: test_fused_qkv runs it under inference_mode
    inference = {mapping.name for mapping in default_catalog().layer_mappings if Mode.INFERENCE in mapping.modes}
    assert used | {"llama_attention"} == inference  # (the training ones: test_kernelize_training.py)
