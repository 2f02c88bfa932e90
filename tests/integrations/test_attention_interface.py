"""kernelize's attention through transformers' AttentionInterface: tiny Llama, Qwen3 and Gemma 3 (sliding window)
models in float32 generate the same greedy tokens kernelized as plain, through attention.prefill and
attention.decode, and unkernelize puts the model's own implementation back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch
from test_kernelize import SIZES, VOCAB  # the tiny models' sizes, one place for every integration test

import kcatalog
from kcatalog.integrations import attention as interface
from kcatalog.integrations.kernelize import default_catalog

WINDOW = 4  # Gemma 3's sliding window here: shorter than the prompts, so that its masks matter
MODELS = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", {}),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", {}),
    "gemma3": (
        "Gemma3ForCausalLM",
        "Gemma3TextConfig",
        {"sliding_window": WINDOW, "layer_types": ["sliding_attention", "full_attention"]},
    ),
}


@pytest.fixture(scope="module")
def build(transformers: ModuleType) -> Callable[..., Any]:
    def make(name: str, seed: int = 0) -> Any:
        model_class, config_class, extra = MODELS[name]
        torch.manual_seed(seed)
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**SIZES, **extra))
        return model.eval()

    return make


def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts of 11 tokens, the second left-padded by 3 (its mask is materialised, bool, for every layer)."""
    ids = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    return ids, mask


def generate(model: Any, ids: torch.Tensor, mask: torch.Tensor, **options: Any) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(  # type: ignore[no-any-return]
            ids, attention_mask=mask, max_new_tokens=12, do_sample=False, **options
        )


def logits(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits  # type: ignore[no-any-return]


def count_calls(model: Any) -> Counter[str]:
    """Counts, from now on, the calls of each kernelized attention module's op handles, by op and by whether the
    call came with a mask."""
    calls: Counter[str] = Counter()
    for module in model.modules():
        ops = vars(module).get(interface.OPS)
        if ops is None:
            continue

        def counted(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any) -> Any:
                calls[op] += 1
                calls[f"{op} masked"] += args[3] is not None
                return fn(*args)

            return call

        module.__dict__[interface.OPS] = {op: counted(op, fn) for op, fn in ops.items()}
    return calls


@pytest.mark.parametrize("name", list(MODELS))
def test_kernelized_attention_generates_the_same_tokens_and_unkernelize_restores(
    name: str, build: Callable[..., Any]
) -> None:
    model = build(name)
    ids, mask = prompts()
    ref = logits(model, ids, mask)
    plain = generate(model, ids, mask)
    plain_static = generate(model, ids, mask, cache_implementation="static")
    assert model.config._attn_implementation == "sdpa"

    report = kcatalog.kernelize(model)

    attention = [item for item in report.replaced if "_attention" in item.mapping]
    assert len(attention) == SIZES["num_hidden_layers"]
    assert all(
        [choice.op for choice in item.ops] == ["attention.rotary_embedding", "attention.prefill", "attention.decode"]
        for item in attention
    )
    assert model.config._attn_implementation == interface.IMPLEMENTATION
    calls = count_calls(model)
    with default_catalog().use({"attention.*": "torch"}):  # the float32 reference: not the kernel sdpa runs
        out = logits(model, ids, mask)
    assert calls["attention.prefill"] == SIZES["num_hidden_layers"]
    assert calls["attention.prefill masked"] == SIZES["num_hidden_layers"]  # the padded prompt
    valid = mask.bool()  # the padded positions' logits are whatever a fully masked row gives
    error = float((out[valid] - ref[valid]).norm() / ref[valid].norm())
    assert 0 < error <= 1e-5
    calls.clear()
    assert torch.equal(generate(model, ids, mask), plain)
    assert calls["attention.decode"] == SIZES["num_hidden_layers"] * 11  # every decode step, every layer
    assert torch.equal(generate(model, ids, mask, cache_implementation="static"), plain_static)

    assert kcatalog.unkernelize(model) > 0
    assert model.config._attn_implementation == "sdpa"
    assert not any(interface.OPS in vars(module) for module in model.modules())
    assert torch.equal(logits(model, ids, mask), ref)


def test_the_sliding_window_reaches_the_ops_in_the_mask(build: Callable[..., Any]) -> None:
    """Gemma 3's sliding layer gets a mask holding the window for an unpadded prompt longer than the window:
    each query row sees at most WINDOW keys."""
    model = build("gemma3")
    kcatalog.kernelize(model)
    seen: list[torch.Tensor | None] = []
    layer = model.model.layers[0].self_attn
    ops = vars(layer)[interface.OPS]

    def prefill(*args: Any) -> Any:
        seen.append(args[3])
        return ops["attention.prefill"](*args)

    layer.__dict__[interface.OPS] = {**ops, "attention.prefill": prefill}
    ids = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(2))
    logits(model, ids, torch.ones_like(ids))
    (window_mask,) = seen
    assert window_mask is not None and window_mask.dtype == torch.bool
    rows = window_mask[0, 0].sum(-1).tolist()
    assert rows == [min(i + 1, WINDOW) for i in range(9)]
    kcatalog.unkernelize(model)


def test_calls_the_ops_cannot_take_go_to_transformers_sdpa(build: Callable[..., Any]) -> None:
    """A soft-capped call, one under autograd, and a module never kernelized go to sdpa_attention_forward."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    model = build("llama")
    kcatalog.kernelize(model)
    layer = model.model.layers[0].self_attn
    calls = count_calls(model)
    q, k, v = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    expected, _ = sdpa_attention_forward(layer, q, k, v, None, scaling=0.25)
    out, _ = interface.attention(layer, q, k, v, None, scaling=0.25)
    assert calls["attention.prefill"] == 1 and torch.allclose(out, expected, atol=1e-6)
    with pytest.raises(ValueError, match="softcap"):  # sdpa's own refusal: the call went there
        interface.attention(layer, q, k, v, None, scaling=0.25, softcap=30.0)
    out, _ = interface.attention(layer, q.requires_grad_(), k, v, None, scaling=0.25)
    assert out.requires_grad and calls["attention.prefill"] == 1
    kcatalog.unkernelize(model)
    out, _ = interface.attention(layer, q.detach(), k, v, None, scaling=0.25)
    assert calls["attention.prefill"] == 1 and torch.allclose(out, expected, atol=1e-6)


def test_a_soft_capped_model_keeps_its_attention_and_says_why(transformers: ModuleType) -> None:
    torch.manual_seed(0)
    model = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**SIZES, attn_logit_softcapping=50.0)).eval()
    before = model.config._attn_implementation
    report = kcatalog.kernelize(model)
    reasons = {left.reason for left in report.left if left.layer_class.endswith("Gemma2Attention")}
    assert reasons == {
        "gemma_attention: attn_logit_softcapping is 50.0: attention.prefill and attention.decode have none"
    }
    assert model.config._attn_implementation == before
    kcatalog.unkernelize(model)
