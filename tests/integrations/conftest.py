"""transformers, imported for these tests only: on import it adds an import hook to sys.meta_path, and with a
third-party hook present the static target checks call absent modules unverifiable (KC304) instead of missing;
so it is imported by a fixture, not at collection, and the hook is taken out again after each module."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
import torch


@pytest.fixture(scope="module")
def transformers() -> Iterator[ModuleType]:
    meta_path, path_hooks = list(sys.meta_path), list(sys.path_hooks)
    module = pytest.importorskip("transformers")
    yield module
    sys.meta_path[:] = meta_path
    sys.path_hooks[:] = path_hooks


@pytest.fixture(scope="module")
def tiny(transformers: ModuleType) -> Callable[..., Any]:
    """tiny(name, **config): test_kernelize's tiny model of that family ('gemma2', 'qwen3_moe' too), random weights
    everywhere."""
    from test_kernelize import MODELS, SIZES, randomise_norms

    classes = {**MODELS, "gemma2": ("Gemma2ForCausalLM", "Gemma2Config"),
               "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig")}  # fmt: skip

    def make(name: str, **config: Any) -> Any:
        model_class, config_class = (getattr(transformers, attr) for attr in classes[name])
        torch.manual_seed(0)
        return randomise_norms(model_class(config_class(**{**SIZES, **config})))

    return make
