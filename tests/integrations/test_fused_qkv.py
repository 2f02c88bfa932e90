"""The llama_attention_fused_qkv mapping: tiny Llama, Qwen2 (q/k/v biases) and Qwen3 (q/k norms) models in float32
compute q, k and v in one GEMM per attention layer, with the logits and greedy tokens of plain transformers, under
no_grad and inference_mode; unkernelize puts weights, storages and forwards back bit for bit; projections that
are tied or not plain nn.Linear keep three GEMMs (llama_attention), and the report says why."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from test_kernelize import SIZES, VOCAB  # the tiny models' sizes, one place for every integration test

import kcatalog
from kcatalog.integrations import fused_qkv
from kcatalog.integrations import transformers as integration

LAYERS = SIZES["num_hidden_layers"]
MODELS = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3"}
MODES: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}


@pytest.fixture(scope="module")
def build(transformers: ModuleType) -> Callable[..., Any]:
    def make(name: str, **extra: Any) -> Any:
        torch.manual_seed(0)
        family = MODELS[name]
        config = getattr(transformers, f"{family}Config")(**{**SIZES, **extra})
        return getattr(transformers, f"{family}ForCausalLM")(config).eval()

    return make


def prompt() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding: a materialised mask
    return ids, mask


def attentions(model: Any) -> list[Any]:
    return [layer.self_attn for layer in model.model.layers]


@pytest.fixture
def projection_gemms(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Any], int]]:
    """Counts F.linear calls whose weight is a q/k/v projection's or the fused buffer (nn.Linear calls F.linear)."""
    calls: list[torch.Tensor] = []
    linear = F.linear

    def counting(x: torch.Tensor, weight: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(weight)
        return linear(x, weight, *args, **kwargs)

    monkeypatch.setattr(F, "linear", counting)

    def count(model: Any) -> int:
        ours = {id(t) for a in attentions(model) for t in (a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)}
        ours |= {id(a._buffers[fused_qkv.WEIGHT]) for a in attentions(model) if fused_qkv.WEIGHT in a._buffers}
        found = sum(id(weight) in ours for weight in calls)
        calls.clear()
        return found

    yield count


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_gemm_for_q_k_v_with_the_logits_and_tokens_of_plain(
    build: Callable[..., Any],
    projection_gemms: Callable[[Any], int],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    mode: str,
) -> None:
    """...and RoPE still through attention.rotary_embedding, on the fused output's strided q and k rows."""
    rotary_calls: list[int] = []
    cache_rows = integration._cache_rows
    monkeypatch.setattr(integration, "_cache_rows", lambda *a: rotary_calls.append(1) or cache_rows(*a))
    model, (ids, mask) = build(name), prompt()
    with MODES[mode]():
        plain = model(ids, attention_mask=mask).logits
        assert projection_gemms(model) == 3 * LAYERS
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
    report = kcatalog.kernelize(model)
    try:
        mapped = {item.module: item.mapping for item in report.replaced if item.module.endswith("self_attn")}
        assert set(mapped.values()) == {"llama_attention_fused_qkv"} and len(mapped) == LAYERS
        projection_gemms(model)
        with MODES[mode]():
            fused = model(ids, attention_mask=mask).logits
            assert projection_gemms(model) == LAYERS  # one GEMM per attention layer, not three
            assert len(rotary_calls) == LAYERS  # the op took each layer's call, not transformers' function
            assert torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False), tokens)
        assert (fused - plain).abs().max().item() <= 1e-5
    finally:
        kcatalog.unkernelize(model)


def test_the_weights_are_views_of_the_buffer_and_unkernelize_restores_them(build: Callable[..., Any]) -> None:
    """No more memory while kernelized (the Parameters are the buffer's rows); after unkernelize each Parameter,
    the same object, owns its storage again, with the same bits, and the projections their class's forward."""
    model, (ids, mask) = build("qwen2"), prompt()
    state = {key: value.clone() for key, value in model.state_dict().items()}
    params = {key: id(value) for key, value in model.named_parameters()}
    with torch.no_grad():
        plain = model(ids, attention_mask=mask).logits
    kcatalog.kernelize(model)
    first = attentions(model)[0]
    weight, bias = first._buffers[fused_qkv.WEIGHT], first._buffers[fused_qkv.BIAS]
    assert first.q_proj.weight.data_ptr() == weight.data_ptr()
    assert first.v_proj.bias.data_ptr() == bias[-first.v_proj.out_features :].data_ptr()
    assert set(model.state_dict()) == set(state)  # the buffers are not persistent
    kcatalog.unkernelize(model)
    assert {key: id(value) for key, value in model.named_parameters()} == params
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    for attention in attentions(model):
        assert not {fused_qkv.WEIGHT, fused_qkv.BIAS} & set(attention._buffers)
        for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
            assert "forward" not in vars(projection)
            for tensor in (projection.weight, projection.bias):
                assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).logits, plain)


class QuantizedLooking(torch.nn.Linear):
    """Stands for a quantized or adapter projection: not exactly nn.Linear, so not fused."""


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("tie", "q_proj, k_proj and v_proj share a weight (tied): they cannot be views of one buffer"),
        ("quantized", "v_proj is QuantizedLooking, not torch.nn.Linear"),
    ],
)
def test_projections_that_cannot_be_one_gemm_keep_three_and_the_report_says_why(
    build: Callable[..., Any], projection_gemms: Callable[[Any], int], change: str, reason: str
) -> None:
    model, (ids, mask) = build("llama", num_key_value_heads=4), prompt()  # k as wide as q: they can be tied
    first = attentions(model)[0]
    if change == "tie":
        first.k_proj.weight = first.q_proj.weight
    else:
        old = first.v_proj
        first.v_proj = QuantizedLooking(old.in_features, old.out_features, bias=False)
        first.v_proj.weight = old.weight
    with torch.no_grad():
        plain = model(ids, attention_mask=mask).logits
    report = kcatalog.kernelize(model)
    try:
        replaced = {item.module: item for item in report.replaced}
        assert replaced["model.layers.0.self_attn"].mapping == "llama_attention"
        assert replaced["model.layers.0.self_attn"].note == f"not llama_attention_fused_qkv: {reason}"
        assert replaced["model.layers.1.self_attn"].mapping == "llama_attention_fused_qkv"
        assert f"not llama_attention_fused_qkv: {reason}" in str(report)
        projection_gemms(model)
        with torch.inference_mode():
            assert (model(ids, attention_mask=mask).logits - plain).abs().max().item() <= 1e-5
        assert projection_gemms(model) == 3 + 1  # the left layer's three, the fused layer's one
    finally:
        kcatalog.unkernelize(model)
    assert first.k_proj.weight is first.q_proj.weight if change == "tie" else type(first.v_proj) is QuantizedLooking
