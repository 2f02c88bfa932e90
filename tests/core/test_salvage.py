"""Every problem reported once: an op, extension or entry with a schema error is left out and the rest of its file
still read; what names an op that could not be read is not reported again as unknown (validate/salvage.py and
model.BrokenOps). The corpus has a case for each mistake of issue 24 (tests/corpus/broken_*)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kcatalog import CatalogError, check_catalog, load_catalog
from kcatalog.model import BrokenOps
from kcatalog.read.files import shipped_catalog_dir
from kcatalog.validate.salvage import salvage
from kcatalog.validate.schema import Manifest, Settings

if TYPE_CHECKING:
    from catalog_builder import Workspace

SETTINGS = """\
kcatalog: 1
backends:
  torch: {description: reference}
  triton: {description: fused kernels}
priority: [triton, torch]
"""
ACTIVATION = """\
kcatalog: 1
group: activation
ops:
  silu_and_mul:
    signature: "(x: Tensor) -> Tensor"
    reference: torch
    dtypes: [float32, bfloat61]
    backends:
      torch: {target: kcatalog.kernels.torch.activation:silu_and_mul}
      triton:
        target: kcatalog.kernels.triton.activation:silu_and_mlu
        capabilities: [{device: cuda, min_arch: "8.0"}]
  gelu_and_mul:
    signature: '(x: Tensor, approximate: str = "none") -> Tensor'
    reference: torch
    priority: [trtion, torch]
    backends:
      torch: {target: kcatalog.kernels.torch.activation:gelu_and_mul}
"""
LAYERS = """\
kcatalog: 1
layers:
  mlp:
    classes: [kc_corpus_not_installed_models.mlp:MLP]
    forward: kcatalog.integrations.transformers:silu_mlp_forward
    ops: [activation.silu_and_mul, activation.swish]
"""


def lines(directory: Path) -> list[str]:
    _, diagnostics = check_catalog([directory])
    return [f"{Path(d.location.path).name}:{d.location.line}: {d.code}" if d.location else d.code for d in diagnostics]


def test_an_error_in_one_op_leaves_the_other_ops_and_backends_of_its_file_checked(workspace: Workspace) -> None:
    directory = workspace.files({"kcatalog.yaml": SETTINGS, "activation.yaml": ACTIVATION, "m.layers.yaml": LAYERS})
    assert lines(directory) == [
        "activation.yaml:7: KC103",  # bfloat61: silu_and_mul is left out...
        "activation.yaml:11: KC302",  # ...but its sound triton backend's target is still checked
        "activation.yaml:16: KC203",  # the other op of the file is linked: its priority names 'trtion'
        "m.layers.yaml:6: KC218",  # activation.swish, which nothing declares; activation.silu_and_mul is no error
    ]


def test_the_shipped_catalog_with_one_target_deleted_reports_that_alone(tmp_path: Path) -> None:
    # The reproduction: its layer mappings and tuned table name the op, which was 6 errors in 3 files.
    shutil.copytree(shipped_catalog_dir(), tmp_path / "c")
    manifest = tmp_path / "c" / "activation.yaml"
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(text.replace("        target: kcatalog.kernels.torch.activation:silu_and_mul\n", "", 1))
    _, diagnostics = check_catalog([tmp_path / "c"])
    assert [(d.code, d.message) for d in diagnostics] == [("KC102", "missing required field 'target'")]


def test_require_and_overrides_naming_a_broken_op_add_nothing(workspace: Workspace) -> None:
    directory = workspace.files({"kcatalog.yaml": SETTINGS, "activation.yaml": ACTIVATION})
    _, alone = check_catalog([directory])
    _, asked = check_catalog(
        [directory],
        require={"activation.silu_and_mul": ["triton"], "activation.nope": []},
        overrides="activation.silu_and_mul=triton,activation.nada=torch",
    )
    added = [(d.code, d.message.split("'")[1]) for d in asked if d not in alone]
    assert added == [("KC501", "activation.nope"), ("KC602", "activation.nada")]  # the unknown ones only


def test_an_op_whose_extension_is_broken_is_left_out_with_it(workspace: Workspace) -> None:
    # The extension would add the torch backend the policy requires and the tuned table picks: without it, the op
    # would be reported as lacking torch (KC401) and the table's choice as unknown (KC231).
    settings = SETTINGS + "policy: {required_backends: [torch]}\n"
    norm = """\
kcatalog: 1
group: norm
ops:
  rms_norm:
    backends:
      triton: {target: kcatalog.kernels.triton.layernorm:rms_norm}
"""
    vendor = """\
kcatalog: 1
group: vendor
extends:
  norm.rms_norm:
    backends:
      torch: {target: kcatalog.kernels.torch.layernorm:rms_norm, requires: torch}
"""
    table = """\
kcatalog: 1
tuned:
  platform: cpu
  provenance: {device: a CPU}
  ops:
    norm.rms_norm:
      float32: [{tokens: [1, null], backend: torch}]
"""
    files = {"kcatalog.yaml": settings, "norm.yaml": norm, "vendor.yaml": vendor, "tuned/cpu.yaml": table}
    assert lines(workspace.files(files)) == ["vendor.yaml:6: KC103"]


def test_an_extension_of_a_broken_op_still_has_its_own_backends_checked(workspace: Workspace) -> None:
    vendor = """\
kcatalog: 1
group: vendor
extends:
  activation.silu_and_mul:
    backends:
      tirton: {target: kcatalog.kernels.triton.activation:silu_and_mul}
"""
    directory = workspace.files({"kcatalog.yaml": SETTINGS, "activation.yaml": ACTIVATION, "vendor.yaml": vendor})
    assert lines(directory)[-1] == "vendor.yaml:6: KC203"  # unknown backend 'tirton'; no KC205 'extends unknown op'
    assert not any(line.endswith("KC205") for line in lines(directory))


def test_a_file_that_does_not_parse_silences_what_names_its_group(workspace: Workspace) -> None:
    lost = ACTIVATION.replace(
        "      torch: {target: kcatalog.kernels.torch.activation:gelu", "\ttorch: {target: x:gelu"
    )
    directory = workspace.files({"kcatalog.yaml": SETTINGS, "activation.yaml": lost, "m.layers.yaml": LAYERS})
    # Its ops are unknown, so every op of its group may be one: activation.swish is not reported either.
    assert lines(directory) == ["activation.yaml:18: KC001"]


def test_a_manifest_lost_before_its_group_is_read_silences_any_op(workspace: Workspace) -> None:
    lost = "{kcatalog: 1, group: activation, ops: {silu_and_mul: [}\n"
    layers = LAYERS.replace("activation.swish", "other.op")
    directory = workspace.files({"kcatalog.yaml": SETTINGS, "activation.yaml": lost, "m.layers.yaml": layers})
    assert lines(directory) == ["activation.yaml:1: KC001"]


def test_a_manifest_that_cannot_be_read_silences_any_op(workspace: Workspace) -> None:
    unreadable = ACTIVATION.encode() + b"# caf\xe9\n"  # Latin-1, not UTF-8
    directory = workspace.files({"kcatalog.yaml": SETTINGS, "activation.yaml": unreadable, "m.layers.yaml": LAYERS})
    assert lines(directory) == ["activation.yaml:19: KC005"]


def test_a_lost_layers_file_or_tuned_table_declares_no_op(workspace: Workspace) -> None:
    table = """\
kcatalog: 1
tuned:
  platform: cpu
  provenance: {device: a CPU}
  ops:
    activation.swish:
      float32: [{tokens: [1, null], backend: torch}]
"""
    layers = LAYERS.replace("    forward:", "\tforward:")
    files = {"kcatalog.yaml": SETTINGS, "activation.yaml": ACTIVATION, "m.layers.yaml": layers, "tuned/t.yaml": table}
    assert "t.yaml:6: KC230" in lines(workspace.files(files))


def test_an_error_in_one_layer_mapping_or_tuned_op_leaves_the_others_checked(workspace: Workspace) -> None:
    layers = LAYERS + "  other:\n    classes: []\n    forward: m:f\n    ops: [activation.gelu_and_mul]\n"
    table = """\
kcatalog: 1
tuned:
  platform: cpu
  provenance: {device: a CPU}
  ops:
    activation.gelu_and_mul:
      float32: [{tokens: [0, null], backend: torch}]
    activation.swish:
      float32: [{tokens: [1, null], backend: torch}]
"""
    files = {"kcatalog.yaml": SETTINGS, "activation.yaml": ACTIVATION, "m.layers.yaml": layers, "tuned/t.yaml": table}
    found = lines(workspace.files(files))
    assert [line for line in found if not line.startswith("activation.yaml")] == [
        "m.layers.yaml:6: KC218",  # the sound mapping is linked: activation.swish is unknown
        "m.layers.yaml:8: KC103",  # the other mapping's empty classes: left out
        "t.yaml:7: KC103",  # tokens from 0: that op's choices left out...
        "t.yaml:8: KC230",  # ...the next one's still linked
    ]


def test_ops_that_are_not_a_mapping_silence_the_group(workspace: Workspace) -> None:
    manifest = "kcatalog: 1\ngroup: activation\nops: [silu_and_mul]\n"
    directory = workspace.files({"kcatalog.yaml": SETTINGS, "activation.yaml": manifest, "m.layers.yaml": LAYERS})
    assert lines(directory) == ["activation.yaml:3: KC103"]


def test_load_catalog_raises_with_the_diagnostics_validate_reports(workspace: Workspace, tmp_path: Path) -> None:
    directory = workspace.files({"kcatalog.yaml": SETTINGS, "activation.yaml": ACTIVATION, "m.layers.yaml": LAYERS})
    _, diagnostics = check_catalog([directory])
    with pytest.raises(CatalogError) as raised:
        load_catalog([directory], cache=tmp_path / "cache")
    assert list(raised.value.diagnostics) == diagnostics


# -- the salvage itself ---------------------------------------------------------------------------------------


def test_salvage_leaves_out_each_part_with_an_error_and_keeps_the_sound_backends() -> None:
    data = {
        "kcatalog": 1,
        "group": "g",
        "description": 3,
        "ops": {
            "a": {"backends": {"torch": {"target": "m:a"}, "triton": {"tagret": "m:a"}}},
            "b": {"backends": {"torch": {"target": "m:b"}}},
        },
        "extends": {"h.x": {"backends": {}}},
    }
    errors = [("description",), ("ops", "a", "backends", "triton", "tagret"), ("extends", "h.x")]
    salvaged = salvage(Manifest, data, errors)
    assert salvaged is not None
    assert salvaged.data == {"kcatalog": 1, "group": "g", "ops": {"b": data["ops"]["b"]}, "extends": {}}  # type: ignore[index]
    assert [part.path for part in salvaged.left_out] == [("description",), ("ops", "a"), ("extends", "h.x")]
    assert {key: list(found) for key, found in salvaged.left_out[1].backends.items()} == {"backends": ["torch"]}
    assert data["ops"]["a"]["backends"]["triton"] == {"tagret": "m:a"}  # type: ignore[index]  # the input untouched
    Manifest.model_validate(salvaged.data)


@pytest.mark.parametrize(
    ("model", "loc"),
    [(Manifest, ("group",)), (Manifest, ("kcatalog",)), (Manifest, ()), (Settings, ("priority", 0))],
    ids=["group", "format-version", "whole-document", "any-settings-error"],
)
def test_salvage_loses_the_file_for_an_error_in_what_it_all_depends_on(model: type, loc: tuple[str, ...]) -> None:
    assert salvage(model, {"kcatalog": 1, "group": "g", "priority": ["x"]}, [loc]) is None


def test_broken_ops_cover_their_ids_their_groups_or_any_op() -> None:
    broken = BrokenOps(ops=("a.x",), groups=("b",))
    assert [broken.covers(op) for op in ("a.x", "a.y", "b.z", "c.x")] == [True, False, True, False]
    assert BrokenOps(any_op=True).covers("c.x")
    assert not BrokenOps() and broken
