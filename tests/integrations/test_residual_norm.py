"""The residual add fused into the next RMSNorm (mappings residual_norm_model and residual_norm_decoder_layer):
in a kernelized Llama or Qwen3 each decoder layer runs layernorm.add_rms_norm twice (the attention's residual
into the post-attention norm, the MLP's into the next layer's input norm, the last layer's into the final norm),
the norms that read a fused output take it without computing again, no layer input is overwritten, the logits
and hidden states stay the plain model's, and unkernelize removes every link."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
from test_kernelize import logits, relative_error, tokens

import kcatalog
from kcatalog.integrations import transformers as integration


def counted(model: Any) -> Counter[str]:
    """Counts, from now on, the add_rms_norm calls of the kernelized decoder layers ('fused') and the norms that
    took a fused output ('ahead')."""
    calls: Counter[str] = Counter()
    for layer in model.model.layers:
        ops = layer.forward.args[1]
        op = ops[integration.ADD_RMS_NORM]

        def add_rms_norm(*args: Any, _op: Any = op) -> Any:
            calls["fused"] += 1
            return _op(*args)

        ops[integration.ADD_RMS_NORM] = add_rms_norm
    return calls


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_each_residual_add_runs_in_the_next_norms_kernel(
    name: str, tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny(name)
    ids = tokens()
    with torch.no_grad():
        plain = model(ids, output_hidden_states=True)
    inputs: list[tuple[torch.Tensor, torch.Tensor]] = []  # each decoder layer's input, and a copy taken before
    for layer in model.model.layers:
        layer.register_forward_pre_hook(lambda _m, args, kw: inputs.append((kw.get("hidden_states", args[0]), (kw.get("hidden_states", args[0])).clone())), with_kwargs=True)  # fmt: skip
    report = kcatalog.kernelize(model)
    mappings = Counter(item.mapping for item in report.replaced)
    assert (mappings["residual_norm_model"], mappings["residual_norm_decoder_layer"]) == (1, 2)
    links = [vars(layer)[integration.NEXT_NORM] for layer in model.model.layers]
    assert links == [*(layer.input_layernorm for layer in model.model.layers[1:]), model.model.norm]
    calls = counted(model)
    ahead = integration._normed_ahead
    monkeypatch.setattr(integration, "_normed_ahead", lambda m, h: calls.update(ahead=(got := ahead(m, h)) is not None) or got)  # fmt: skip
    inputs.clear()
    with torch.no_grad():
        fused = model(ids, output_hidden_states=True)
    assert calls == {"fused": 4, "ahead": 2}  # 2 per layer; layer 1's input norm and the final norm
    assert all(torch.equal(seen, before) for seen, before in inputs) and len(inputs) == 2  # no input overwritten
    assert relative_error(fused.logits, plain.logits) <= 1e-5
    assert len(fused.hidden_states) == len(plain.hidden_states) == 3
    for got, want in zip(fused.hidden_states, plain.hidden_states):
        assert relative_error(got, want) <= 1e-5  # the residual stream, as the plain layers return it
    kcatalog.unkernelize(model)
    assert not any(integration.NEXT_NORM in vars(layer) for layer in model.model.layers)
    assert torch.equal(logits(model, ids), plain.logits)


def test_a_layer_output_changed_in_place_is_normalised_again(tiny: Callable[..., Any]) -> None:
    """A forward hook that changes a decoder layer's output in place (after kernelize): the next norm sees the
    output's version move and computes from the changed values, as the plain model does."""
    model = tiny("llama")
    ids = tokens()

    def scale(_module: Any, _args: Any, output: torch.Tensor) -> None:
        output.mul_(0.5)

    handle = model.model.layers[0].register_forward_hook(scale)
    ref = logits(model, ids)
    handle.remove()
    kcatalog.kernelize(model)
    model.model.layers[0].register_forward_hook(scale)
    assert relative_error(logits(model, ids), ref) <= 1e-5
    kcatalog.unkernelize(model)


def test_a_decoder_layer_whose_forward_calls_more_is_left_and_says_why(
    tiny: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers.models.llama import modeling_llama

    forward = modeling_llama.LlamaDecoderLayer.forward

    def own_forward(self: Any, hidden_states: torch.Tensor, **kwargs: Any) -> Any:
        return forward(self, self.extra(hidden_states), **kwargs)

    monkeypatch.setattr(modeling_llama.LlamaDecoderLayer, "forward", own_forward)
    model = tiny("llama")
    for layer in model.model.layers:
        layer.extra = torch.nn.Identity()
    ref = logits(model, tokens())
    report = kcatalog.kernelize(model)
    left = {item.module: item.reason for item in report.left}
    assert left["model.layers.0"] == (
        "residual_norm_decoder_layer: its forward's code names extra, not just input_layernorm, mlp, "
        "post_attention_layernorm, self_attn (the layers the fused forward calls)"
    )
    assert relative_error(logits(model, tokens()), ref) <= 1e-5
    kcatalog.unkernelize(model)
