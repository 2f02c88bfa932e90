"""kcatalog.kernelize on tiny random-weight transformers models built from configs (no downloads), 2 layers
each: Llama, Mistral, Qwen2, Qwen3 (with its per-head q_norm/k_norm) and Gemma ((1 + weight) RMSNorm, GELU-tanh
MLP); every attention layer's RoPE through the rotary op.

After kernelize, logits match the original within the ops' declared tolerances, greedy generation gives the
same tokens (dynamic and static cache), the report lists every replaced module (the attention layers too, their
RoPE through attention.rotary_embedding), unkernelize restores bit-identical outputs, and
torch.compile(fullgraph=True) traces the kernelized model whole, with the catalog's torch ops in the graph."""

from __future__ import annotations

import functools
import inspect
import re
from collections import Counter
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

import kcatalog
from kcatalog.integrations.kernelize import OpChoice, default_catalog
from kcatalog.integrations.transformers import ATTENTION_FORWARD, ROPE, ROTARY, _cache_rows, rotary_pos_emb

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
MODELS = {"llama": ("LlamaForCausalLM", "LlamaConfig"), "mistral": ("MistralForCausalLM", "MistralConfig"),
          "qwen2": ("Qwen2ForCausalLM", "Qwen2Config"), "qwen3": ("Qwen3ForCausalLM", "Qwen3Config"),
          "gemma": ("GemmaForCausalLM", "GemmaConfig")}  # fmt: skip
# Which mapping each mapped module takes, by the end of its name; every one of them must be replaced.
LLAMA_LIKE = {
    "layernorm": "llama_rms_norm",
    "norm": "llama_rms_norm",
    "mlp": "silu_gated_mlp",
    "attn": "llama_attention_fused_qkv",
}
MAPPED = {
    "llama": LLAMA_LIKE,
    "mistral": LLAMA_LIKE,
    "qwen2": LLAMA_LIKE,  # its q, k and v projections have a bias
    "qwen3": LLAMA_LIKE,
    "gemma": {
        "layernorm": "gemma_rms_norm",
        "norm": "gemma_rms_norm",
        "mlp": "gelu_tanh_gated_mlp",
        "attn": "gemma_attention",
    },
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


def generate(model: Any, ids: torch.Tensor, **options: Any) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(  # type: ignore[no-any-return]
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False, **options
        )


def count_rope(model: Any) -> Counter[str]:
    """Counts, from now on, the kernelized attention layers' RoPE calls that took the op ('op') and those that
    went to transformers' own apply_rotary_pos_emb ('original'): wraps both in each copied forward's globals."""
    calls: Counter[str] = Counter()

    def counted(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[kind] += 1
            return fn(*args, **kwargs)

        return call

    for module in model.modules():
        if ATTENTION_FORWARD in vars(module):
            scope = inspect.unwrap(vars(module)[ATTENTION_FORWARD]).__globals__
            rotary, original = scope[ROPE].args
            scope[ROPE] = functools.partial(rotary_pos_emb, counted("op", rotary), counted("original", original))
    return calls


@pytest.mark.parametrize("name", list(MODELS))
def test_kernelized_model_matches_generates_the_same_and_unkernelizes_bit_for_bit(
    name: str, build: Callable[..., Any]
) -> None:
    model = build(name)
    ids = tokens()
    ref = logits(model, ids)
    greedy, greedy_static = generate(model, ids), generate(model, ids, cache_implementation="static")
    params = dict(model.named_parameters())
    class_forwards = {type(module): type(module).forward for module in model.modules()}
    values = {key: value.detach().clone() for key, value in model.state_dict().items()}
    weight_bytes = sum(
        p.untyped_storage().nbytes() for p in {p.untyped_storage().data_ptr(): p for p in params.values()}.values()
    )

    report = kcatalog.kernelize(model)

    # the report lists every module of a mapped class, replaced, by its mapping and op backends
    mapped_classes = ("RMSNorm", "MLP", "Attention")
    expected = {
        module_name: MAPPED[name][module_name.rsplit(".", 1)[-1].rsplit("_", 1)[-1]]
        for module_name, module in model.named_modules()
        if type(module).__name__.endswith(mapped_classes)
    }
    if name != "gemma":  # the residual adds fused into the next norm (test_residual_norm.py)
        expected |= {
            module_name: "residual_norm_model" if module_name == "model" else "residual_norm_decoder_layer"
            for module_name, module in model.named_modules()
            if type(module).__name__.endswith(("Model", "DecoderLayer"))
        }
    assert {item.module: item.mapping for item in report.replaced} == expected
    assert report.left == ()
    assert all(
        item.ops and all(choice.backend in ("aten", "torch", "sdpa_flash") for choice in item.ops)
        for item in report.replaced
    )
    if name == "qwen3":  # the per-head norms are RMSNorms too
        assert {"model.layers.0.self_attn.q_norm", "model.layers.1.self_attn.k_norm"} <= set(expected)
    assert {"model.layers.0.self_attn", "model.layers.1.self_attn"} <= set(expected)
    attention = next(item for item in report.replaced if "_attention" in item.mapping)
    assert [choice.op for choice in attention.ops] == [ROTARY, "attention.prefill", "attention.decode"]
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

    rope = count_rope(model)
    out = logits(model, ids)
    assert rope == {"op": 2}  # each layer's RoPE ran through the op
    assert relative_error(out, ref) <= tolerance(report)
    again, again_static = generate(model, ids), generate(model, ids, cache_implementation="static")
    assert again.shape == greedy.shape == (2, 11 + 16)
    assert torch.equal(again, greedy) and torch.equal(again_static, greedy_static)
    assert rope["original"] == 0  # prefill and every decode step, both caches

    assert kcatalog.unkernelize(model) == len(expected)
    assert not any("forward" in vars(module) for module in model.modules())
    assert torch.equal(logits(model, ids), ref)
    assert all(p is params[key] for key, p in model.named_parameters())
    assert kcatalog.unkernelize(model) == 0


@pytest.mark.parametrize("name", list(MODELS))
def test_a_kernelized_model_runs_under_inference_mode_as_under_no_grad(name: str, build: Callable[..., Any]) -> None:
    """Serving code runs models under torch.inference_mode, where cos and sin are inference tensors (which keep no
    version counter): the kernelized forwards, RoPE included, give no_grad's logits and greedy tokens there."""
    model = build(name)
    ids = tokens()
    report = kcatalog.kernelize(model)
    ref, greedy = logits(model, ids), generate(model, ids)
    rope = count_rope(model)
    with torch.inference_mode():
        out = model(ids).logits
        again = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
    assert out.is_inference() and rope["op"] >= 2 and rope["original"] == 0  # RoPE ran through the op
    assert relative_error(out, ref) <= tolerance(report)
    assert torch.equal(again, greedy)


class GraphCounter:
    """A torch.compile backend that records every graph it is given and runs it as traced."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        self.graphs.append(gm)
        return gm.forward

    def targets(self) -> list[str]:
        return [str(node.target) for gm in self.graphs for node in gm.graph.nodes if node.op == "call_function"]


@pytest.mark.parametrize("name", ["llama", "llama-undecorated", "gemma"])
def test_kernelized_model_compiles_whole_with_the_catalogs_torch_ops(
    name: str, build: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """'llama-undecorated': the attention forward without transformers 5.24's deprecate_kwarg wrapper, as 5.17
    (on the GPU machine) writes it; the copy then has no wrapper to copy around it."""
    if name == "llama-undecorated":
        from transformers.models.llama import modeling_llama

        forward = modeling_llama.LlamaAttention.forward
        monkeypatch.setattr(modeling_llama.LlamaAttention, "forward", inspect.unwrap(forward))
        name = "llama"
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
    rope_op = re.compile(r"^kcatalog(_\d+)?\.attention_rotary_embedding\.")
    add_norm_op = re.compile(r"^kcatalog(_\d+)?\.layernorm_add_rms_norm\.")
    # 2 per layer and the final norm; Llama's post-attention norms take the attention's residual add (traced,
    # the MLP's add stays an add before the next norm)
    fused = 0 if name == "gemma" else 2
    assert sum(bool(norm_op.match(target)) for target in calls) == 5 - fused
    assert sum(bool(add_norm_op.match(target)) for target in calls) == fused
    assert sum(bool(act_op.match(target)) for target in calls) == 2
    assert sum(bool(rope_op.match(target)) for target in calls) == 2
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


def test_the_rope_of_other_models_stays_transformers_own(
    build: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernelized attention runs a copy of the class's forward: the class, its forward and the modeling
    module's apply_rotary_pos_emb are the same objects, and a model not kernelized still calls that function."""
    from transformers.models.llama import modeling_llama

    first, second = build("llama"), build("llama", seed=3)
    forward, original = modeling_llama.LlamaAttention.forward, modeling_llama.apply_rotary_pos_emb
    kcatalog.kernelize(first)
    assert modeling_llama.LlamaAttention.forward is forward and modeling_llama.apply_rotary_pos_emb is original
    calls: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(modeling_llama, "apply_rotary_pos_emb", counting)
    rope = count_rope(first)
    logits(second, tokens())
    assert len(calls) == 2  # the plain model: transformers' function, once per layer
    logits(first, tokens())
    assert len(calls) == 2 and rope == {"op": 2}  # the kernelized one: the op, its copy's globals its own
    kcatalog.unkernelize(first)
    logits(first, tokens())
    assert len(calls) == 4  # unkernelized: the class's forward, the module's globals again


def test_rope_calls_the_op_cannot_take_go_to_transformers_own_function(transformers: ModuleType) -> None:
    """rotary_pos_emb takes transformers' layout (q, k as transposed views of [B, S, H, D], cos and sin
    [B or 1, S, D] in q's dtype, no autograd) to the op, in place; every other call to the original function,
    with the same results."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    batch, seq, heads, kv_heads, dim = 2, 5, 4, 2, 16
    rotary_embedding = LlamaRotaryEmbedding(transformers.LlamaConfig(**SIZES))
    g = torch.Generator().manual_seed(4)
    x = torch.randn(batch, seq, heads * dim, generator=g)
    position_ids = torch.arange(seq).expand(batch, seq) + torch.tensor([[0], [7]])
    calls: list[str] = []
    op = default_catalog().op(ROTARY)

    def rotary(*args: Any) -> None:
        calls.append("op")
        op(*args)

    def original(*args: Any, **kwargs: Any) -> Any:
        calls.append("original")
        return apply_rotary_pos_emb(*args, **kwargs)

    def qk(layout: str = "transposed") -> tuple[torch.Tensor, torch.Tensor]:
        q = torch.randn(batch, seq, heads, dim, generator=g)
        k = torch.randn(batch, seq, kv_heads, dim, generator=g)
        if layout == "bshd":  # for unsqueeze_dim=2
            return q, k
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        return (q, k) if layout == "transposed" else (q.contiguous(), k.contiguous())

    def check(expect: str, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, *rest: Any, **kw: Any) -> None:
        calls.clear()
        ref_q, ref_k = apply_rotary_pos_emb(q.clone(), k.clone(), cos, sin_of[id(cos)], *rest, **kw)
        out_q, out_k = rotary_pos_emb(rotary, original, q, k, cos, sin_of[id(cos)], *rest, **kw)
        assert calls == [expect]
        if expect == "op":
            assert out_q is q and out_k is k  # rotated in place
        assert relative_error(out_q.detach(), ref_q.detach()) <= 1e-6
        assert relative_error(out_k.detach(), ref_k.detach()) <= 1e-6

    cos, sin = rotary_embedding(x, position_ids)
    cos1, sin1 = rotary_embedding(x, position_ids[:1])  # one row of positions for the whole batch
    cos64, sin64 = cos.double(), sin.double()
    half_cos, half_sin = cos[..., : dim // 2], sin[..., : dim // 2]  # partial rotary
    sin_of = {id(cos): sin, id(cos1): sin1, id(cos64): sin64}

    check("op", *qk(), cos)
    check("op", *qk(), cos1)
    check("op", *qk(), cos, 1)
    check("original", *qk("contiguous"), cos)  # [B, H, S, D] stored as such: no [T, H * D] view of it
    check("original", *qk("bshd"), cos, unsqueeze_dim=2)
    check("original", *qk(), cos64)  # transformers would promote q to float64
    calls.clear()
    with pytest.raises(RuntimeError):  # the original's own error: a half-width cos does not broadcast
        rotary_pos_emb(rotary, original, *qk(), half_cos, half_sin)
    assert calls == ["original"]
    with torch.enable_grad():
        q, k = (t.requires_grad_() for t in qk())
        check("original", q, k, cos)


def test_the_layers_of_one_forward_share_the_cache_rows_of_its_cos_and_sin(transformers: ModuleType) -> None:
    """Every layer gets the same cos and sin tensors from the model: the op's positions and cache rows are built
    by the first call and reused by the next, built again for another sin, another batch or an in-place change,
    and right each time."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    batch, seq, dim = 2, 5, 16
    rotary_embedding = LlamaRotaryEmbedding(transformers.LlamaConfig(**SIZES))
    x = torch.randn(batch, seq, 4 * dim, generator=torch.Generator().manual_seed(5))
    cos, sin = rotary_embedding(x, torch.arange(seq).expand(batch, seq))

    def expected(cos: torch.Tensor, sin: torch.Tensor, batch: int) -> torch.Tensor:
        rows = torch.cat((cos[..., : dim // 2], sin[..., : dim // 2]), dim=-1).expand(batch, seq, dim)
        return rows.reshape(batch * seq, dim)

    def check(rows: tuple[torch.Tensor, torch.Tensor], cos: torch.Tensor, sin: torch.Tensor, batch: int) -> None:
        assert torch.equal(rows[0], torch.arange(batch * seq)) and torch.equal(rows[1], expected(cos, sin, batch))

    first = _cache_rows(cos, sin, batch)
    check(first, cos, sin, batch)
    again = _cache_rows(cos, sin, batch)
    assert again[0] is first[0] and again[1] is first[1]  # the second layer: nothing built
    cos.mul_(0.5)  # the same tensors, changed in place
    changed = _cache_rows(cos, sin, batch)
    assert changed[1] is not first[1]
    check(changed, cos, sin, batch)
    other = sin * 0.5
    check(_cache_rows(cos, other, batch), cos, other, batch)
    one, one_sin = cos[:1], sin[:1]  # one row of positions, for a batch of 2, then of 1
    two_rows = _cache_rows(one, one_sin, 2)
    check(two_rows, one, one_sin, 2)
    one_row = _cache_rows(one, one_sin, 1)
    assert one_row[1] is not two_rows[1]
    check(one_row, one, one_sin, 1)


def test_a_kernelized_attention_layer_with_autograd_calls_transformers_rope(build: Callable[..., Any]) -> None:
    model = build("llama")
    attention = model.model.layers[0].self_attn
    hidden = torch.randn(2, 7, SIZES["hidden_size"], generator=torch.Generator().manual_seed(5))
    embeddings = model.model.rotary_emb(hidden, torch.arange(7).expand(2, 7))
    with torch.enable_grad():
        ref, _ = attention(hidden, position_embeddings=embeddings, attention_mask=None)
        kcatalog.kernelize(model)
        rope = count_rope(model)
        out, _ = attention(hidden, position_embeddings=embeddings, attention_mask=None)
    assert rope == {"original": 1} and out.requires_grad
    assert torch.equal(out, ref)
    with torch.no_grad():
        out, _ = attention(hidden, position_embeddings=embeddings, attention_mask=None)
    assert rope == {"original": 1, "op": 1} and relative_error(out, ref.detach()) <= 1e-5
    kcatalog.unkernelize(model)


def test_an_attention_forward_without_the_rope_function_is_left_and_says_why(
    build: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers.models.llama import modeling_llama

    forward = modeling_llama.LlamaAttention.forward

    def own_forward(self: Any, *args: Any, **kwargs: Any) -> Any:  # RoPE somewhere else: nothing to swap here
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(modeling_llama.LlamaAttention, "forward", own_forward)
    model = build("llama")
    ref = logits(model, tokens())
    report = kcatalog.kernelize(model)
    left = {item.module: item.reason for item in report.left}
    assert set(left) == {"model.layers.0.self_attn", "model.layers.1.self_attn"}
    assert left["model.layers.0.self_attn"].startswith("llama_attention_fused_qkv: ")
    assert left["model.layers.0.self_attn"].endswith(
        "; llama_attention: test_an_attention_forward_without_the_rope_function_is_left_and_says_why.<locals>."
        "own_forward does not call the module-level apply_rotary_pos_emb (its code names no such global)"
    )
    assert not any(
        ATTENTION_FORWARD in vars(m) or "forward" in vars(m) for m in model.model.layers[0].self_attn.modules()
    )
    assert len(report.replaced) == 10  # the norms, MLPs, decoder layers and the model still
    assert relative_error(logits(model, tokens()), ref) <= 1e-5
    kcatalog.unkernelize(model)


def test_an_attention_layer_whose_projection_has_a_hook_is_left(build: Callable[..., Any]) -> None:
    """The op rotates the projections' outputs in place: a forward hook keeping k_proj's output would see it
    rotated, so that layer keeps its forward, and the report says why; what the hook saw is transformers' own."""
    model, ids = build("llama"), tokens()
    seen: list[torch.Tensor] = []
    attention = model.model.layers[0].self_attn
    attention.k_proj.register_forward_hook(lambda _module, _args, out: seen.append(out))
    ref = logits(model, ids)
    report = kcatalog.kernelize(model)
    assert {item.module: item.reason for item in report.left} == {
        "model.layers.0.self_attn": "; ".join(
            f"{name}: k_proj has forward hooks, which would see q and k rotated in place"
            for name in ("llama_attention_fused_qkv", "llama_attention")
        )
    }
    assert "model.layers.1.self_attn" in {item.module for item in report.replaced}
    before = seen[-1]
    assert relative_error(logits(model, ids), ref) <= 1e-5
    assert torch.equal(seen[-1], before)  # the hooked projection's output, unrotated, as without kernelize
    kcatalog.unkernelize(model)


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
    with pytest.raises(
        kcatalog.KernelImportError, match=r"the forward of layer mapping 'shift' from 'kc_user_broken:forward'"
    ):
        kcatalog.kernelize(model, catalog)
    assert not any("forward" in vars(module) for module in model.modules())
    assert kcatalog.unkernelize(model) == 0


def test_weights_loaded_after_a_move_reach_the_fused_gemm(build: Callable[..., Any]) -> None:
    """After kernelize, a move (`.to()`: here its own step, every tensor converted apart) leaves gate/up and the
    [gate | up] buffer as separate copies; weights loaded then are laid out into the buffer again, so the
    kernelized MLP computes with them, as the model's own forward does."""
    model, ids = build("llama"), tokens()
    kcatalog.kernelize(model)
    model._apply(lambda t: t.clone())  # what .to(device or dtype) does to parameters and buffers
    mlp = model.model.layers[0].mlp
    assert mlp.gate_proj.weight.data_ptr() != mlp.kcatalog_gate_up.data_ptr()  # apart: no writing through
    torch.manual_seed(5)
    model.load_state_dict({key: value + 0.05 * torch.randn_like(value) for key, value in model.state_dict().items()})
    assert mlp.gate_proj.weight.data_ptr() == mlp.kcatalog_gate_up.data_ptr()  # laid out again
    kernelized = logits(model, ids)
    kcatalog.unkernelize(model)
    assert relative_error(kernelized, logits(model, ids)) <= 1e-5


def test_kernelize_after_some_ops_were_registered_traced(build: Callable[..., Any]) -> None:
    """An op the catalog already registered with traced=True (the opt-in into Inductor's graph) where kernelize
    would register it opaque: kernelize takes the next free namespace instead of failing."""
    catalog = kcatalog.load_catalog(cache=False)
    for number in range(1, 65):  # the first namespace kernelize would try that this catalog can take
        namespace = "kcatalog" if number == 1 else f"kcatalog_{number}"
        try:
            catalog.register_torch_ops(namespace, "layernorm.rms_norm", traced=True)
            break
        except kcatalog.CatalogError as exc:
            assert str(exc).startswith("torch op names already taken"), exc
    model, ids = build("llama"), tokens()
    ref = logits(model, ids)
    report = kcatalog.kernelize(model, catalog)
    assert report.left == () and len(report.replaced) == 12
    assert relative_error(logits(model, ids), ref) <= 1e-5
    kcatalog.unkernelize(model)
