"""The shipped layers file as loaded: its mappings in the catalog (cold and from the load cache alike), checked
statically at load without importing transformers or torch, and its JSON Schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from catalog_builder import child_env

import kcatalog
from kcatalog.model import Mode, TargetRole
from kcatalog.validate.jsonschema import shipped_schema_dir

if TYPE_CHECKING:
    from catalog_builder import Workspace

NO_IMPORTS_SCRIPT = """\
import json, sys
import kcatalog
from kcatalog.tools.cli import main

cold = kcatalog.load_catalog(cache=False)          # validates every file, the layers file included
warm = kcatalog.load_catalog()                      # writes, then reads, the load cache
warm = kcatalog.load_catalog()
kcatalog.kernelize                                  # the API is there without importing any of it
code = main(["validate"])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "triton"))
print(json.dumps({"code": code, "heavy": heavy, "cold": [m.name for m in cold.layer_mappings],
                  "warm": [m.name for m in warm.layer_mappings], "status": warm.cache_status.outcome.value}))
"""


def test_loading_and_validating_the_mappings_imports_neither_torch_nor_transformers(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", NO_IMPORTS_SCRIPT], capture_output=True, text=True, cwd=tmp_path, env=child_env(),
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["heavy"] == []
    assert report["code"] == 0
    assert report["cold"] == report["warm"] == [
        "llama_rms_norm", "gemma_rms_norm", "silu_gated_mlp", "silu_gated_mlp_training", "llama_attention_fused_qkv",
        "llama_attention", "gemma_attention", "attention_training",
        "gelu_tanh_gated_mlp", "gelu_tanh_gated_mlp_training", "gelu_tanh_gated_mlp_gemma2",
        "gelu_tanh_gated_mlp_gemma2_training", "residual_norm_model", "residual_norm_decoder_layer",
        "causal_lm_fused_linear_cross_entropy", "moe_experts"
    ]  # fmt: skip
    assert report["status"] == "hit"


def test_the_shipped_mappings_as_the_catalog_holds_them() -> None:
    catalog = kcatalog.load_catalog(cache=False)
    mappings = {m.name: m for m in catalog.layer_mappings}
    llama = mappings["llama_rms_norm"]
    assert [str(c.target) for c in llama.classes][-1] == "transformers.models.qwen3.modeling_qwen3:Qwen3RMSNorm"
    assert str(llama.forward.target) == "kcatalog.integrations.transformers:rms_norm_forward"
    assert (llama.forward.role, llama.forward.owner) == (TargetRole.FORWARD, "llama_rms_norm") and llama.prepare is None
    mlp = mappings["silu_gated_mlp"]
    assert mlp.prepare is not None and str(mlp.prepare.target) == "kcatalog.integrations.transformers:fuse_gate_up"
    assert [(c.attribute, c.allowed) for c in mlp.conditions] == [
        ("config.hidden_act", ("silu",)), ("gate_proj.bias", (None,)), ("up_proj.bias", (None,))
    ]  # fmt: skip
    assert (llama.modes, mlp.modes) == ((Mode.INFERENCE, Mode.TRAINING), (Mode.INFERENCE,))  # the default: inference
    assert mappings["silu_gated_mlp_training"].modes == (Mode.TRAINING,)
    where = mlp.conditions[0].location
    assert Path(where.path).name == "transformers.layers.yaml" and (where.line, where.col) > (1, 1)
    every_op = {op for m in catalog.layer_mappings for op in m.ops}
    assert every_op == {
        "layernorm.rms_norm",
        "layernorm.gemma_rms_norm",
        "activation.silu_and_mul",
        "activation.gelu_and_mul",
        "attention.rotary_embedding",
        "attention.prefill",
        "attention.decode",
        "moe.fused_experts",
        "layernorm.add_rms_norm",
        "attention.apply_rotary",
        "loss.fused_linear_cross_entropy",
    }
    training = {op for m in catalog.layer_mappings if Mode.TRAINING in m.modes for op in m.ops}
    assert all(catalog.info(op).backward is not None for op in training)  # the linker checks it (KC256)
    attention = mappings["llama_attention"]
    assert attention.prepare is not None
    assert str(attention.prepare.target) == "kcatalog.integrations.attention:bind_attention"  # bind_rotary, and more
    assert str(attention.classes[-1].target) == "transformers.models.qwen3.modeling_qwen3:Qwen3Attention"
    assert catalog.warnings == ()


def test_the_layers_schema_is_generated_and_names_the_fields() -> None:
    schema = json.loads((shipped_schema_dir() / "layers.v1.json").read_text(encoding="utf-8"))
    mapping = schema["$defs"]["LayerMappingDecl"]
    assert set(mapping["properties"]) == {"description", "classes", "forward", "prepare", "ops", "modes", "when"}
    assert mapping["properties"]["modes"]["default"] == ["inference"]
    assert set(mapping["required"]) == {"classes", "forward", "ops"}
    assert schema["required"] == ["kcatalog", "layers"]


def test_classes_of_an_absent_package_are_unavailable_and_looked_up_once(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No warning for a package not installed here; sys.path is scanned for it once per load, not per class (by
    kcatalog's own walk: tests/hardening/test_no_import_hooks.py checks that no finder is asked)."""
    from kcatalog.check import layer_classes

    workspace.module("absent_fwd", "def forward(module, ops, x):\n    return x\n")
    directory = workspace.write({"tag": workspace.op({"ref": "absent_fwd:forward"})}, backends=["ref"])
    classes = "\n".join(f"      - kc_absent_models.family{n}.modeling:Norm{n}" for n in range(3))
    workspace.files(
        {
            "absent.layers.yaml": "kcatalog: 1\nlayers:\n  absent_norm:\n    classes:\n"
            f"{classes}\n    forward: absent_fwd:forward\n    ops: [g.tag]\n"
        }
    )
    looked_up: list[str] = []
    locate = layer_classes.locate

    def counting(name: str) -> Any:
        looked_up.append(name)
        return locate(name)

    monkeypatch.setattr(layer_classes, "locate", counting)
    for cache in (False, workspace.root / "cache", workspace.root / "cache"):  # cold, written, read back
        looked_up.clear()
        catalog = kcatalog.load_catalog(directory, cache=cache)
        assert catalog.warnings == ()
        assert [str(c.target) for m in catalog.layer_mappings for c in m.classes][-1].endswith(":Norm2")
        assert looked_up.count("kc_absent_models") == 1, cache
