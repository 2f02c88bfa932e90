"""Catalog.register_torch_ops: one torch op per catalog op, its schema from the manifest, per device type the
catalog's choice for the call's dtype (overrides, fallback, strict), idempotent and thread-safe, and refused, with
located diagnostics, for ops that cannot be torch ops."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest
import torch

import kcatalog
from kcatalog.errors import CatalogError, KernelImportError, UnknownOpError
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

SCHEMAS = {
    "layernorm.rms_norm": "layernorm_rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor",
    "layernorm.rms_norm_backward": (
        "layernorm_rms_norm_backward(Tensor grad, Tensor x, Tensor weight, float eps=1e-06) -> (Tensor, Tensor)"
    ),
    "layernorm.gemma_rms_norm": "layernorm_gemma_rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor",
    "layernorm.fused_add_rms_norm": (
        "layernorm_fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps=1e-06) -> ()"
    ),
    "layernorm.add_rms_norm": (
        "layernorm_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps=1e-06) -> (Tensor, Tensor)"
    ),
    "layernorm.layer_norm": "layernorm_layer_norm(Tensor x, Tensor weight, Tensor bias, float eps=1e-05) -> Tensor",
    "layernorm.gemma_rms_norm_backward": (
        "layernorm_gemma_rms_norm_backward(Tensor grad, Tensor x, Tensor weight, float eps=1e-06) -> (Tensor, Tensor)"
    ),
    "layernorm.add_rms_norm_backward": (
        "layernorm_add_rms_norm_backward(Tensor grad_out, Tensor grad_summed, Tensor weight, float eps, "
        "Tensor summed) -> (Tensor, Tensor, Tensor)"
    ),
    "layernorm.layer_norm_backward": (
        "layernorm_layer_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor bias, float eps=1e-05) "
        "-> (Tensor, Tensor, Tensor)"
    ),
    "elementwise.softmax": "elementwise_softmax(Tensor x) -> Tensor",
    "activation.silu_and_mul": "activation_silu_and_mul(Tensor x) -> Tensor",
    "activation.gelu_and_mul": 'activation_gelu_and_mul(Tensor x, str approximate="none") -> Tensor',
    "activation.silu_and_mul_backward": "activation_silu_and_mul_backward(Tensor grad, Tensor x) -> Tensor",
    "activation.gelu_and_mul_backward": (
        'activation_gelu_and_mul_backward(Tensor grad, Tensor x, str approximate="none") -> Tensor'
    ),
    "attention.apply_rotary": "attention_apply_rotary(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)",
    "attention.apply_rotary_backward": (
        "attention_apply_rotary_backward(Tensor grad_q, Tensor grad_k, Tensor cos, Tensor sin) -> (Tensor, Tensor)"
    ),
    "attention.rotary_embedding": (
        "attention_rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!) key, SymInt head_size, "
        "Tensor cos_sin_cache, bool is_neox=True) -> ()"
    ),
    "attention.prefill": (
        "attention_prefill(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float? scale=None, "
        "bool is_causal=True, SymInt sliding_window=0) -> Tensor"
    ),
    "attention.decode": (
        "attention_decode(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float? scale=None, "
        "bool is_causal=True, SymInt sliding_window=0) -> Tensor"
    ),
    "quantization.per_token_quant_fp8": "quantization_per_token_quant_fp8(Tensor x) -> (Tensor, Tensor)",
    "moe.fused_experts": (
        "moe_fused_experts(Tensor hidden_states, Tensor topk_ids, Tensor topk_weights, Tensor gate_up_proj, "
        "Tensor down_proj) -> Tensor"
    ),
    "loss.fused_linear_cross_entropy": (
        "loss_fused_linear_cross_entropy(Tensor x, Tensor weight, Tensor target, SymInt ignore_index=-100) "
        "-> (Tensor, Tensor)"
    ),
    "loss.fused_linear_cross_entropy_backward": (
        "loss_fused_linear_cross_entropy_backward(Tensor grad, Tensor x, Tensor weight, Tensor target, "
        "SymInt ignore_index, Tensor lse) -> (Tensor, Tensor)"
    ),
}

# Kernels that say which backend ran; 'b' runs float64 only, so dtype decides at call time.
KERNELS = """\
calls = []


def a(x):
    calls.append("a")
    return x * 2


def b(x):
    calls.append("b")
    return x * 3
"""


def _catalog(workspace: Workspace, b_target: str = "kc_tops_k:b", **options: Any) -> kcatalog.Catalog:
    workspace.module("kc_tops_k", KERNELS)
    op = workspace.op(
        {"b": {"target": b_target, "dtypes": ["float64"]}, "a": "kc_tops_k:a"},
        dtypes=("float32", "float64"),
        reference="a",
        fake="reference",
    )
    workspace.write({"op": op}, backends=["a", "b"], priority=["b", "a"])
    return workspace.load(**options)


def _calls() -> list[str]:
    calls: list[str] = sys.modules["kc_tops_k"].calls
    return calls


def test_every_shipped_op_is_one_torch_op_with_the_manifests_schema(shipped: kcatalog.Catalog) -> None:
    ops = shipped.register_torch_ops()
    assert sorted(ops) == sorted(SCHEMAS) == shipped.ops()
    for op, schema in SCHEMAS.items():
        name = op.replace(".", "_")
        assert ops[op] is getattr(torch.ops.kcatalog, name)
        assert ops[op].default._schema == torch._C.parse_schema(f"kcatalog::{schema}")
        assert torch.Tag.pt2_compliant_tag in ops[op].default.tags


def test_a_second_call_returns_the_same_ops(shipped: kcatalog.Catalog) -> None:
    first = shipped.register_torch_ops()
    again = shipped.register_torch_ops()
    assert list(again) == list(first) and all(again[op] is first[op] for op in first)
    some = shipped.register_torch_ops(ops=["layernorm.rms_norm"])
    assert dict(some) == {"layernorm.rms_norm": first["layernorm.rms_norm"]}
    assert shipped.torch_op("layernorm.rms_norm") is first["layernorm.rms_norm"]
    assert shipped.torch_op("layernorm.rms_norm", namespace="elsewhere") is None


def test_the_implementation_is_the_catalogs_choice_for_the_calls_dtype(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    op = catalog.register_torch_ops(namespace)["g.op"]
    x32, x64 = torch.ones(3), torch.ones(3, dtype=torch.float64)
    assert op(x32).tolist() == [2.0] * 3 and op(x64).tolist() == [3.0] * 3
    assert op(x32).dtype == torch.float32
    with catalog.use({"g.op": "a"}):  # scoped overrides hold at call time, also for a dtype already resolved
        op(x64)
    assert _calls() == ["a", "b", "a", "a"]


def test_overrides_of_the_load_choose_the_implementation(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace, overrides={"g.op": "a"})
    catalog.register_torch_ops(namespace)["g.op"](torch.ones(2, dtype=torch.float64))
    assert _calls() == ["a"]


def test_a_kernel_that_fails_to_import_falls_back_unless_strict(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace, b_target="kc_tops_missing:b", check_targets=False)
    op = catalog.register_torch_ops(namespace)["g.op"]
    assert op(torch.ones(2, dtype=torch.float64)).tolist() == [2.0, 2.0]
    strict = _catalog(workspace, b_target="kc_tops_missing:b", check_targets=False, strict=True)
    strict_op = strict.register_torch_ops(f"{namespace}_strict")["g.op"]
    with pytest.raises(KernelImportError, match=r"^cannot load backend 'b' of op 'g\.op' from 'kc_tops_missing:b'"):
        strict_op(torch.ones(2, dtype=torch.float64))


def test_registration_is_thread_safe(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    barrier = threading.Barrier(8)
    results: list[Any] = []

    def register() -> None:
        barrier.wait()
        results.append(catalog.register_torch_ops(namespace)["g.op"])

    threads = [threading.Thread(target=register) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and all(result is results[0] for result in results)


def test_a_name_another_catalog_registered_is_an_error(workspace: Workspace, namespace: str) -> None:
    _catalog(workspace).register_torch_ops(namespace)
    with pytest.raises(CatalogError) as excinfo:
        _catalog(workspace).register_torch_ops(namespace)
    assert str(excinfo.value) == (
        "torch op names already taken; register under another namespace=:\n"
        f"  op 'g.op' (g.yaml:4:3): torch op '{namespace}::g_op' is already defined by another Catalog"
    ).replace("g.yaml", str(workspace.catalog_dir / "g.yaml"))


def test_a_name_defined_outside_kcatalog_is_an_error(workspace: Workspace, namespace: str) -> None:
    library = torch.library.Library(namespace, "FRAGMENT")
    library.define("g_op(Tensor x) -> Tensor")
    with pytest.raises(CatalogError, match=r"is already defined by code outside this catalog$"):
        _catalog(workspace).register_torch_ops(namespace)


def test_unknown_ops_and_bad_namespaces_are_refused(shipped: kcatalog.Catalog) -> None:
    with pytest.raises(UnknownOpError, match=r"^no op 'layernorm\.rms_nrom' \(did you mean 'layernorm\.rms_norm'\?\)"):
        shipped.register_torch_ops(ops=["layernorm.rms_nrom"])
    with pytest.raises(CatalogError, match=r"^torch op namespace 'a::b' is not an identifier$"):
        shipped.register_torch_ops("a::b")


def test_ops_that_cannot_be_torch_ops_are_refused_with_their_diagnostics(workspace: Workspace, namespace: str) -> None:
    workspace.module("kc_tops_bad", "def f(x, *rest):\n    return x\n\n\ndef add(x, y):\n    y.add_(x)\n")
    ops = {
        "variadic": workspace.op({"t": "kc_tops_bad:f"}, signature="(x: Tensor, *rest) -> Tensor", fake="reference"),
        "no_fake": workspace.op({"t": "kc_tops_bad:f"}),
        "fine": workspace.op({"t": "kc_tops_bad:add"}, signature="(x: Tensor, y: Tensor) -> None", mutates=["y"]),
    }
    catalog = workspace.write(ops, backends=["t"]) and workspace.load()
    assert catalog.warnings == ()  # its settings do not ask for torch ops: nothing is said at load
    manifest = workspace.catalog_dir / "g.yaml"
    with pytest.raises(CatalogError) as excinfo:
        catalog.register_torch_ops(namespace)
    assert str(excinfo.value).splitlines() == [
        "cannot register g.no_fake, g.variadic as torch ops:",
        f"  {manifest}:14:3: KC213 warning: op 'g.no_fake' returns Tensor but declares no fake implementation, "
        "so torch.compile cannot trace it as a torch op; declare 'fake: reference' where its torch reference runs on "
        "meta tensors, or 'fake: package.module:attr'",
        f"  {manifest}:6:16: KC212 warning: op 'g.variadic' cannot be a torch op: parameter '*rest' is "
        "variadic; a torch op takes a fixed list of parameters",
    ]
    assert [d.code for d in excinfo.value.diagnostics] == ["KC213", "KC212"]
    assert not hasattr(getattr(torch.ops, namespace), "g_fine")  # none of them was registered
    y = torch.zeros(2)
    catalog.register_torch_ops(namespace, ops=["g.fine"])["g.fine"](torch.ones(2), y)
    assert y.tolist() == [1.0, 1.0]


def test_the_policy_makes_them_warnings_at_load(workspace: Workspace) -> None:
    workspace.module("kc_tops_bad", "def f(x):\n    return x\n")
    directory = workspace.write({"no_fake": workspace.op({"t": "kc_tops_bad:f"})}, backends=["t"])
    settings = directory / "kcatalog.yaml"
    settings.write_text(settings.read_text() + "policy:\n  torch_ops: true\n")
    cold = workspace.load(cache=False)
    assert [(w.code, str(w.location)) for w in cold.warnings] == [("KC213", f"{directory / 'g.yaml'}:4:3")]


def test_the_policys_warnings_are_reported_by_a_warm_load_too(workspace: Workspace, tmp_path: Any) -> None:
    workspace.module("kc_tops_bad", "def f(x):\n    return x\n")
    directory = workspace.write({"no_fake": workspace.op({"t": "kc_tops_bad:f"})}, backends=["t"])
    settings = directory / "kcatalog.yaml"
    settings.write_text(settings.read_text() + "policy:\n  torch_ops: true\n")
    cold = workspace.load(cache=tmp_path / "cache")
    warm = workspace.load(cache=tmp_path / "cache")
    assert warm.cache_status.outcome is kcatalog.CacheOutcome.HIT
    assert warm.warnings == cold.warnings != ()


def test_explain_says_what_each_device_type_binds(shipped: kcatalog.Catalog) -> None:
    report = shipped.describe_torch_op("layernorm.rms_norm")
    *lines, cuda = report.lines()
    assert lines == [
        "  torch op kcatalog::layernorm_rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor (registered)",
        "    fake: reference: the 'torch' backend (kcatalog.kernels.torch.layernorm:rms_norm) run on fake tensors",
        "    CPU (cpu): aten opaque (float32, float16, bfloat16)",
    ]
    if torch.cuda.is_available():  # a GPU run (KCATALOG_TEST_DEVICE=cuda): the shipped Triton kernel, opaque
        assert cuda.startswith("    CUDA (cuda:") and "triton opaque, traceable" in cuda, cuda
    else:
        assert cuda == "    CUDA: no cuda device here"
    on_gpu = shipped.describe_torch_op("layernorm.fused_add_rms_norm", platform=kcatalog.Platform.parse("cuda:9.0"))
    assert [str(binding) for binding in on_gpu.bindings] == [
        "CPU (cpu): torch opaque (float32, float16, bfloat16)",
        "CUDA (cuda:9.0): triton opaque, traceable (float32, float16, bfloat16)",
    ]
    assert on_gpu.fake == "none needed: the op returns nothing"


def test_kcatalog_explain_torch_ops(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "elementwise.softmax", "--platform", "cpu", "--torch-ops"]) == 0
    assert capsys.readouterr().out.splitlines()[-4:] == [
        "  torch op kcatalog::elementwise_softmax(Tensor x) -> Tensor",
        "    fake: reference: the 'torch' backend (kcatalog.kernels.torch.elementwise:softmax) run on fake tensors",
        "    CPU (cpu): aten opaque (float32, float16, bfloat16)",
        "    CUDA: no cuda device here",
    ]


CHILD = """\
import sys
import kcatalog

catalog = kcatalog.load_catalog()
handle = catalog.op("layernorm.rms_norm")
before = "torch" in sys.modules
ops = catalog.register_torch_ops()
print(before, "torch" in sys.modules, ops["layernorm.rms_norm"])
"""


def test_torch_is_imported_only_when_ops_are_registered(workspace: Workspace) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=workspace.child_env(), check=True
    )
    assert done.stdout.split() == ["False", "True", "kcatalog.layernorm_rms_norm"]
