"""kcatalog.kernelize on tiny random-weight Qwen3-MoE and Mixtral models built from configs (float32, no
downloads): every layer's experts module goes through moe.fused_experts (the router and the weights untouched),
greedy tokens equal plain transformers', logits agree within the op's tolerance, and unkernelize restores the
class's forward (outputs bit for bit)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

import kcatalog
from kcatalog.integrations.kernelize import default_catalog

VOCAB = 96
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=64,
    num_experts_per_tok=2,
)
MODELS = {
    "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(num_experts=8, moe_intermediate_size=32)),
    "mixtral": ("MixtralForCausalLM", "MixtralConfig", dict(num_local_experts=4)),
}
EXPERTS = {"qwen3_moe": "Qwen3MoeExperts", "mixtral": "MixtralExperts"}


@pytest.fixture(scope="module")
def build(transformers: ModuleType) -> Callable[[str], Any]:
    def make(name: str) -> Any:
        model_class, config_class, sizes = MODELS[name]
        torch.manual_seed(0)
        config = getattr(transformers, config_class)(**COMMON, **sizes)
        config._experts_implementation = "eager"  # plain: the experts classes' own loop
        return getattr(transformers, model_class)(config).eval()

    return make


def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))


def run(model: Any, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, 8 greedy tokens)."""
    with torch.no_grad():
        logits = model(ids).logits
        greedy = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    return logits, greedy


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


@pytest.mark.parametrize("backend", [None, "torch"], ids=["selected", "reference"])
@pytest.mark.parametrize("name", list(MODELS))
def test_kernelized_moe_model_matches_plain_and_unkernelizes(
    name: str, backend: str | None, build: Callable[[str], Any]
) -> None:
    model = build(name)
    ids = tokens()
    ref_logits, ref_greedy = run(model, ids)
    weights = {key: value for key, value in model.named_parameters()}
    catalog = default_catalog()
    report = kcatalog.kernelize(model)
    experts = [item for item in report.replaced if item.mapping == "moe_experts"]
    assert [item.module for item in experts] == [f"model.layers.{i}.mlp.experts" for i in range(2)]
    assert {item.layer_class.rsplit(":", 1)[1] for item in experts} == {EXPERTS[name]}
    expected = catalog.select("moe.fused_experts", catalog.platform("cpu"), "float32").require().backend
    assert {choice.backend for item in experts for choice in item.ops} == {expected}
    assert not [left for left in report.left if "Experts" in left.layer_class], report
    assert all(vars(module).get("forward") is None for module in model.modules() if "Router" in type(module).__name__)
    assert dict(model.named_parameters()) == weights  # the same Parameters, router and experts alike
    calls: list[str] = []
    handle = catalog.kernel("moe.fused_experts", backend)

    def counted(*args: Any) -> torch.Tensor:
        calls.append("op")
        return handle(*args)  # type: ignore[no-any-return]

    for item in experts:  # count the op's calls, and pin the backend under test
        module = model.get_submodule(item.module)
        module.forward.args[1]["moe.fused_experts"] = counted  # the forward's ops mapping
    logits, greedy = run(model, ids)
    assert calls  # the experts ran through the op
    assert torch.equal(greedy, ref_greedy)
    assert relative_error(logits, ref_logits) <= catalog.info("moe.fused_experts").tolerance["float32"] * 10
    assert kcatalog.unkernelize(model) == len(report.replaced)
    assert all("forward" not in vars(module) for module in model.modules())
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref_logits)
