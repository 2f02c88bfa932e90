"""kcatalog.kernelize(model, mode="training") on tiny random-weight Llama, Qwen3 and Gemma models (test_kernelize's
sizes, 2 layers, float32, on the CPU), against plain transformers over three AdamW steps: the loss (through the
fused linear cross-entropy op, the logits never made) and every parameter's gradient within GRAD_TOLERANCE of
plain transformers' at each step, the catalog's backward ops running (traced), the report naming every replaced
module with its forward and backward backends, and unkernelize giving back transformers' own model."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

import kcatalog
from kcatalog.model import Mode
from kcatalog.runtime.trace import Via

# Relative error (Frobenius norm) allowed in float32, the loss and each parameter's gradient: the kernels' torch
# references compute in float32 as transformers does, in other orders (the fused residual add, one GEMM for gate
# and up, the loss's logsumexp): the largest seen, 1e-7 for the loss and 9e-6 for a gradient, by the third step
# (the weights apart by then by AdamW's steps on gradients that differ in the last bits).
LOSS_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-4
FAMILIES = ["llama", "qwen3", "gemma"]
# Which training mapping each module takes, by the last part of its name ('' for the model itself, 'N' for a
# decoder layer): every one of them must be replaced, and nothing else.
LLAMA_LIKE = {
    "": "causal_lm_fused_linear_cross_entropy",
    "model": "residual_norm_model",
    "N": "residual_norm_decoder_layer",
    "self_attn": "attention_training",
    "mlp": "silu_gated_mlp_training",
    **dict.fromkeys(("input_layernorm", "post_attention_layernorm", "norm", "q_norm", "k_norm"), "llama_rms_norm"),
}
MAPPED = {
    "llama": LLAMA_LIKE,
    "qwen3": LLAMA_LIKE,
    "gemma": {  # Gemma's decoder layers and model keep theirs: the residual fusion is for LlamaRMSNorm
        "": "causal_lm_fused_linear_cross_entropy",
        "self_attn": "attention_training",
        "mlp": "gelu_tanh_gated_mlp_training",
        **dict.fromkeys(("input_layernorm", "post_attention_layernorm", "norm"), "gemma_rms_norm"),
    },
}


def tokens(step: int) -> torch.Tensor:
    from test_kernelize import VOCAB

    return torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(10 + step))


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.detach().double(), ref.detach().double()
    return float((out - ref).norm() / ref.norm().clamp(min=1e-30))


def expected_mapping(name: str, family: str) -> str | None:
    last = name.rsplit(".", 1)[-1]
    return MAPPED[family].get("N" if last.isdigit() and ".layers." in f".{name}" else last)


@pytest.fixture(scope="module")
def catalog() -> kcatalog.Catalog:
    """A catalog of these tests' own: its traces see only their models' ops."""
    return kcatalog.load_catalog()


@pytest.mark.parametrize("family", FAMILIES)
def test_training_matches_transformers_over_adamw_steps_and_unkernelizes(
    family: str, tiny: Callable[..., Any], catalog: kcatalog.Catalog
) -> None:
    model = tiny(family).train()
    ref = copy.deepcopy(model)
    report = kcatalog.kernelize(model, catalog, mode="training")
    assert report.mode is Mode.TRAINING and not report.left
    replaced = {item.module: item.mapping for item in report.replaced}
    wanted = {name: expected_mapping(name, family) for name, _ in model.named_modules()}
    assert replaced == {name: mapping for name, mapping in wanted.items() if mapping is not None}
    for item in report.replaced:  # every op with the backward op autograd runs for it, and where
        assert item.ops and all(choice.backward is not None and choice.backward.backend for choice in item.ops)
    assert "attention.prefill" not in str(report)  # attention stays sdpa: the attention ops have no backward

    options: dict[str, Any] = dict(lr=1e-2, weight_decay=0.01)
    opt, ref_opt = torch.optim.AdamW(model.parameters(), **options), torch.optim.AdamW(ref.parameters(), **options)
    params, ref_params = dict(model.named_parameters()), dict(ref.named_parameters())
    assert params.keys() == ref_params.keys()
    with catalog.trace() as trace:
        for step in range(3):
            ids = tokens(step)
            out, ref_out = model(input_ids=ids, labels=ids), ref(input_ids=ids, labels=ids)
            assert out.logits is None and ref_out.logits is not None  # the fused loss makes no logits
            assert relative_error(out.loss, ref_out.loss) <= LOSS_TOLERANCE, step
            out.loss.backward()
            ref_out.loss.backward()
            errors = {name: relative_error(params[name].grad, ref_params[name].grad) for name in params}
            worst = max(errors, key=errors.__getitem__)
            assert errors[worst] <= GRAD_TOLERANCE, (step, worst, errors[worst])
            opt.step()
            ref_opt.step()
            opt.zero_grad()
            ref_opt.zero_grad()
    ran = {entry.op for entry in trace.record.entries if entry.via is Via.TORCH_OP}
    chosen = {choice.op for item in report.replaced for choice in item.ops}
    assert ran == chosen | {choice.backward.op for item in report.replaced for choice in item.ops if choice.backward}

    assert kcatalog.unkernelize(model) == len(report.replaced)
    assert not any("forward" in vars(module) for module in model.modules())
    plain = tiny(family)
    plain.load_state_dict(model.state_dict())
    ids = tokens(9)
    with torch.no_grad():
        assert torch.equal(model.eval()(ids).logits, plain.eval()(ids).logits)


def test_the_causal_lm_takes_transformers_loss_options_and_leaves_other_calls_to_it(tiny: Callable[..., Any]) -> None:
    model = tiny("llama").train()
    ref = copy.deepcopy(model)
    kcatalog.kernelize(model, mode="training")
    ids = tokens(0)
    labels = ids.masked_fill(torch.arange(ids.shape[1]) % 3 == 0, -100)  # some positions ignored
    for options in ({}, {"num_items_in_batch": torch.tensor(7)}, {"shift_labels": labels.roll(1, dims=1)}):
        out, ref_out = model(input_ids=ids, labels=labels, **options), ref(input_ids=ids, labels=labels, **options)
        assert out.logits is None and relative_error(out.loss, ref_out.loss) <= LOSS_TOLERANCE, options
    with torch.no_grad():  # no labels, or eval mode: the class's forward, logits as transformers makes them
        out, ref_out = model(input_ids=ids), ref(input_ids=ids)
        assert out.loss is None and relative_error(out.logits, ref_out.logits) <= LOSS_TOLERANCE
        model.eval()
        ref.eval()
        out, ref_out = model(ids, labels=ids), ref(ids, labels=ids)
        assert out.logits is not None and relative_error(out.loss, ref_out.loss) <= LOSS_TOLERANCE
    kcatalog.unkernelize(model)


def test_the_inference_and_training_mappings_are_apart(tiny: Callable[..., Any]) -> None:
    model = tiny("llama")
    inference = {item.module: item.mapping for item in kcatalog.kernelize(model).replaced}
    training = {item.module: item.mapping for item in kcatalog.kernelize(model, mode="training").replaced}
    assert inference["model.layers.0.mlp"] == "silu_gated_mlp" and "" not in inference
    assert training["model.layers.0.mlp"] == "silu_gated_mlp_training" and training[""].startswith("causal_lm")
    assert "kcatalog_gate_up" not in dict(model.named_buffers())  # the second kernelize undid the first's layout
    kcatalog.unkernelize(model)
    with pytest.raises(ValueError, match="mode 'serving' is not supported; kernelize supports inference, training"):
        kcatalog.kernelize(model, mode="serving")
