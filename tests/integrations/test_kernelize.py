"""kcatalog.kernelize on tiny random-weight transformers models built from configs (no downloads), 2 layers
each: Llama, Qwen3 (with its per-head q_norm/k_norm) and Gemma ((1 + weight) RMSNorm, GELU-tanh MLP).

After kernelize, logits match the original within the ops' declared tolerances, greedy generation gives the
same tokens, the report lists every replaced module, unkernelize restores bit-identical outputs, and
torch.compile(fullgraph=True) traces the kernelized model whole, with the catalog's torch ops in the graph."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

import kcatalog
from kcatalog.integrations.kernelize import OpChoice, default_catalog

VOCAB = 96
SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=64,
)
MODELS = {"llama": ("LlamaForCausalLM", "LlamaConfig"), "qwen3": ("Qwen3ForCausalLM", "Qwen3Config"),
          "gemma": ("GemmaForCausalLM", "GemmaConfig")}  # fmt: skip
# Which class each mapped module is, by the end of its name; every one of them must be replaced.
MAPPED = {
    "llama": {"layernorm": "llama_rms_norm", "norm": "llama_rms_norm", "mlp": "silu_gated_mlp"},
    "qwen3": {"layernorm": "llama_rms_norm", "norm": "llama_rms_norm", "mlp": "silu_gated_mlp"},
    "gemma": {"layernorm": "gemma_rms_norm", "norm": "gemma_rms_norm", "mlp": "gelu_tanh_gated_mlp"},
}


@pytest.fixture(scope="module")
def build(transformers: ModuleType) -> Callable[..., Any]:
    """build(name, seed=0, **config): a tiny model with random weights everywhere, the norms' too (their init is
    ones, or zeros for Gemma)."""

    def make(name: str, seed: int = 0, **config: Any) -> Any:
        model_class, config_class = (getattr(transformers, attr) for attr in MODELS[name])
        torch.manual_seed(seed)
        return randomise_norms(model_class(config_class(**SIZES, **config)))

    return make


def randomise_norms(model: Any) -> Any:
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if "norm" in param_name:
                param.add_(torch.randn_like(param) * 0.3)
    return model.eval()


def tokens(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(seed))


def logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits  # type: ignore[no-any-return]


def tolerance(report: kcatalog.KernelizeReport) -> float:
    """The tightest float32 tolerance among the ops the report says the model now calls."""
    catalog = default_catalog()
    ops = {choice.op for item in report.replaced for choice in item.ops}
    return min(catalog.info(op).tolerance["float32"] for op in ops)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


@pytest.mark.parametrize("name", list(MODELS))
def test_kernelized_model_matches_generates_the_same_and_unkernelizes_bit_for_bit(
    name: str, build: Callable[..., Any]
) -> None:
    model = build(name)
    ids = tokens()
    ref = logits(model, ids)
    with torch.no_grad():
        greedy = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
    params = dict(model.named_parameters())
    class_forwards = {type(module): type(module).forward for module in model.modules()}
    values = {key: value.detach().clone() for key, value in model.state_dict().items()}
    weight_bytes = sum(
        p.untyped_storage().nbytes() for p in {p.untyped_storage().data_ptr(): p for p in params.values()}.values()
    )

    report = kcatalog.kernelize(model)

    # the report lists every module of a mapped class, replaced, by its mapping and op backends
    expected = {
        module_name: MAPPED[name][module_name.rsplit(".", 1)[-1].rsplit("_", 1)[-1]]
        for module_name, module in model.named_modules()
        if type(module).__name__.endswith(("RMSNorm", "MLP"))
    }
    assert {item.module: item.mapping for item in report.replaced} == expected
    assert report.left == ()
    assert all(item.ops and all(choice.backend in ("aten", "torch") for choice in item.ops) for item in report.replaced)
    if name == "qwen3":  # the per-head norms are RMSNorms too
        assert {"model.layers.0.self_attn.q_norm", "model.layers.1.self_attn.k_norm"} <= set(expected)
    for module_name in expected:
        assert "forward" in vars(model.get_submodule(module_name))  # on the instance, never the class
    assert all(cls.forward is forward for cls, forward in class_forwards.items())  # no class was patched

    # weights, keys and parameter identity unchanged; no more weight memory than before
    assert dict(model.named_parameters()) == params
    assert all(p is params[key] for key, p in model.named_parameters())
    state = model.state_dict()
    assert list(state) == list(values) and all(torch.equal(state[key], values[key]) for key in values)
    storages = {p.untyped_storage().data_ptr(): p for p in model.parameters()}
    assert sum(p.untyped_storage().nbytes() for p in storages.values()) <= weight_bytes

    out = logits(model, ids)
    assert relative_error(out, ref) <= tolerance(report)
    with torch.no_grad():
        again = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
    assert again.shape == greedy.shape == (2, 11 + 16)
    assert torch.equal(again, greedy)

    assert kcatalog.unkernelize(model) == len(expected)
    assert not any("forward" in vars(module) for module in model.modules())
    assert torch.equal(logits(model, ids), ref)
    assert all(p is params[key] for key, p in model.named_parameters())
    assert kcatalog.unkernelize(model) == 0


class GraphCounter:
    """A torch.compile backend that records every graph it is given and runs it as traced."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        self.graphs.append(gm)
        return gm.forward

    def targets(self) -> list[str]:
        return [str(node.target) for gm in self.graphs for node in gm.graph.nodes if node.op == "call_function"]


@pytest.mark.parametrize("name", ["llama", "gemma"])
def test_kernelized_model_compiles_whole_with_the_catalogs_torch_ops(name: str, build: Callable[..., Any]) -> None:
    torch._dynamo.reset()
    model = build(name)
    ids = tokens()
    ref = logits(model, ids)
    kcatalog.kernelize(model)
    eager = logits(model, ids)
    counter = GraphCounter()
    compiled = torch.compile(model, backend=counter, fullgraph=True)  # a graph break would raise
    with torch.no_grad():
        out = compiled(ids).logits
    assert len(counter.graphs) == 1
    calls = counter.targets()
    # the namespace is kcatalog, or kcatalog_<n> where another Catalog of this process took those names first
    norm_op = re.compile(rf"^kcatalog(_\d+)?\.layernorm_{'gemma_' if name == 'gemma' else ''}rms_norm\.")
    act_op = re.compile(rf"^kcatalog(_\d+)?\.activation_{'gelu' if name == 'gemma' else 'silu'}_and_mul\.")
    assert sum(bool(norm_op.match(target)) for target in calls) == 5  # 2 per layer and the final norm
    assert sum(bool(act_op.match(target)) for target in calls) == 2
    assert torch.equal(out, eager)
    assert relative_error(out, ref) <= 1e-5
    kcatalog.unkernelize(model)
    torch._dynamo.reset()


def test_a_mapping_whose_conditions_fail_leaves_the_layer_and_says_why(build: Callable[..., Any]) -> None:
    model = build("llama", hidden_act="gelu")
    ref = logits(model, tokens())
    report = kcatalog.kernelize(model)
    left = {item.module: item.reason for item in report.left}
    assert set(left) == {"model.layers.0.mlp", "model.layers.1.mlp"}
    assert left["model.layers.0.mlp"].startswith("silu_gated_mlp: config.hidden_act is 'gelu', not one of: 'silu' (at ")
    assert "forward" not in vars(model.get_submodule("model.layers.0.mlp"))
    assert relative_error(logits(model, tokens()), ref) <= 1e-5
    assert "model.layers.0.mlp: transformers.models.llama.modeling_llama:LlamaMLP left: silu_gated_mlp:" in str(report)
    kcatalog.unkernelize(model)

    biased = build("llama", mlp_bias=True)
    report = kcatalog.kernelize(biased)
    assert {item.reason.split(" (at ")[0] for item in report.left} == {
        "silu_gated_mlp: gate_proj.bias is Parameter, not one of: null"
    }
    kcatalog.unkernelize(biased)


def test_other_instances_of_the_class_are_untouched_and_a_second_kernelize_starts_afresh(
    build: Callable[..., Any],
) -> None:
    first, second = build("llama"), build("llama", seed=3)
    ids = tokens()
    before = logits(second, ids)
    count = len(kcatalog.kernelize(first).replaced)
    assert not any("forward" in vars(module) for module in second.modules())
    assert torch.equal(logits(second, ids), before)
    assert len(kcatalog.kernelize(first).replaced) == count  # undoes the first, then applies again
    assert kcatalog.unkernelize(first) == count


def test_only_inference_is_supported(build: Callable[..., Any]) -> None:
    with pytest.raises(ValueError, match=r"^mode 'training' is not supported; kernelize supports inference"):
        kcatalog.kernelize(build("llama"), mode="training")


USER_LAYERS = """\
import torch


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((4,), 3.0))

    def forward(self, x):
        return x * self.weight


class Shift(torch.nn.Module):
    def forward(self, x):
        return x + 1


def scale_forward(module, ops, x):
    return ops["g.op"](x) * module.weight
"""


def test_a_users_own_mapping_and_a_forward_that_fails_to_import_leaves_nothing_replaced(workspace: Any) -> None:
    """A catalog of the user's with its own layer classes and forwards; a forward whose module raises on import
    makes kernelize raise, with every forward it had already replaced put back."""
    workspace.module("kc_user_layers", USER_LAYERS)
    workspace.module("kc_user_broken", "raise RuntimeError('broken on import')\n")
    workspace.write({"op": workspace.op({"torch": "kc_user_ops:double"}, fake="reference")}, backends=["torch"])
    workspace.module("kc_user_ops", "def double(x):\n    return x * 2\n")
    mapping = {"classes": ["kc_user_layers:Scale"], "forward": "kc_user_layers:scale_forward", "ops": ["g.op"]}
    workspace.files({"user.layers.yaml": {"kcatalog": 1, "layers": {"scale": mapping}}})
    import kc_user_layers

    catalog = workspace.load()
    model = torch.nn.Sequential(kc_user_layers.Scale(), kc_user_layers.Shift())
    x = torch.ones(2, 4)
    report = kcatalog.kernelize(model, catalog)
    assert [(r.module, r.mapping, r.ops) for r in report.replaced] == [("0", "scale", (OpChoice("g.op", "torch"),))]
    assert report.unmapped == {"torch.nn.modules.container:Sequential": 1, "kc_user_layers:Shift": 1}
    assert torch.equal(model(x), torch.full((2, 4), 7.0))  # x * 2 * 3 + 1: the catalog's op ran
    kcatalog.unkernelize(model)
    assert torch.equal(model(x), torch.full((2, 4), 4.0))

    broken = {"classes": ["kc_user_layers:Shift"], "forward": "kc_user_broken:forward", "ops": ["g.op"]}
    workspace.files({"user.layers.yaml": {"kcatalog": 1, "layers": {"scale": mapping, "shift": broken}}})
    catalog = workspace.load(check_targets=False)
    with pytest.raises(kcatalog.KernelImportError, match=r"backend 'forward' of op 'layers:shift'"):
        kcatalog.kernelize(model, catalog)
    assert not any("forward" in vars(module) for module in model.modules())
    assert kcatalog.unkernelize(model) == 0
