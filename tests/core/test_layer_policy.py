"""Layer-scoped rules: a layer's `policy` governs the ops it declares (and, for backends and platforms, those it
extends), so the shipped catalog's rules never bind a user's op; `require_of_all` is what a layer requires of
every op the catalog loads. The corpus's layers_* and clean_layers_* cases show the same through `validate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import kcatalog
from kcatalog import CacheOutcome, CatalogError
from kcatalog.validate.jsonschema import shipped_schema_dir

if TYPE_CHECKING:
    from catalog_builder import Workspace

VENDOR_SETTINGS = {
    "kcatalog": 1,
    "backends": {name: {"description": f"a vendor's {name}"} for name in ("vendor_cuda", "vendor_cpu", "vendor_rocm")},
    "allowed_modules": ["kc_policy_vendor"],
}


def vendor_op(backend: str, capability: dict[str, object]) -> dict[str, object]:
    """An op with one backend, the vendor's own: no torch backend, no reference, no fake."""
    target = {"target": "kc_policy_vendor:gemm", "capabilities": [capability]}
    return {"signature": "(a: Tensor, b: Tensor) -> Tensor", "backends": {backend: target}}


@pytest.fixture
def vendor(workspace: Workspace) -> Path:
    """A user's layer: `vendor.gemm`, whose only backend is a CUDA (sm >= 9.0) kernel of the vendor's own, and
    `vendor.scale` and `vendor.norm`, which do not run on cuda:9.0."""
    workspace.module("kc_policy_vendor", "def gemm(a, b):\n    return a @ b\n")
    manifest = {
        "kcatalog": 1,
        "group": "vendor",
        "ops": {
            "gemm": vendor_op("vendor_cuda", {"device": "cuda", "min_arch": "9.0"}),
            "scale": vendor_op("vendor_cpu", {"device": "cpu"}),
            "norm": vendor_op("vendor_rocm", {"device": "hip", "archs": ["gfx942"]}),
        },
    }
    return workspace.files({"kcatalog.yaml": VENDOR_SETTINGS, "vendor.yaml": manifest}, name="vendor")


def application(workspace: Workspace, settings: str) -> Path:
    """An application's layer: a settings file and no ops."""
    return workspace.files({"kcatalog.yaml": "kcatalog: 1\n" + settings}, name="app")


def test_a_user_op_with_only_its_own_cuda_backend_validates_and_loads_on_top_of_shipped(vendor: Path) -> None:
    # The shipped policy (torch backend, cpu/cuda:9.0/hip:gfx942, a reference, torch ops) governs the shipped ops.
    _, diagnostics = kcatalog.check_catalog(["shipped", vendor])
    assert [str(d) for d in diagnostics] == []  # no KC401-KC403, and no KC213 warning of the shipped torch_ops
    catalog = kcatalog.load_catalog(["shipped", vendor], cache=False)
    assert list(catalog.info("vendor.gemm").backends) == ["vendor_cuda"]
    assert catalog.select("vendor.gemm", "cuda:9.0").require().backend == "vendor_cuda"
    assert catalog.select("vendor.gemm", "cpu").chosen is None
    assert "layernorm.rms_norm" in catalog  # the shipped ops load beside it


def test_the_shipped_rules_still_hold_for_the_shipped_ops(workspace: Workspace) -> None:
    """A layer that replaces a shipped backend cannot make the shipped op break the shipped rules."""
    workspace.module("kc_policy_cuda_norm", "def rms_norm(x, weight, eps=1e-6):\n    return x\n")
    replaces = {"target": "kc_policy_cuda_norm:rms_norm", "capabilities": [{"device": "cuda"}]}
    manifest = {
        "kcatalog": 1,
        "group": "mine",
        "extends": {"layernorm.rms_norm": {"replaces": {"torch": replaces, "aten": replaces}}},
    }
    mine = workspace.files({"mine.yaml": manifest}, name="mine")
    _, diagnostics = kcatalog.check_catalog(["shipped", mine])
    [error] = [d for d in diagnostics if d.is_error]
    assert error.code == "KC402" and error.location is not None and error.location.path.endswith("layernorm.yaml")
    assert error.message.startswith("op 'layernorm.rms_norm' has no backend for platform cpu (torch [layer ")
    assert error.message.endswith("which the policy of layer 'shipped' requires")


def test_require_of_all_names_every_op_that_lacks_it(workspace: Workspace, vendor: Path) -> None:
    app = application(workspace, 'require_of_all:\n  required_platforms: ["cuda:9.0"]\n')
    with pytest.raises(CatalogError) as failed:
        kcatalog.load_catalog(["shipped", vendor, app], cache=False)
    errors = [d for d in failed.value.diagnostics if d.is_error]
    assert [(d.code, d.message.split("'")[1]) for d in errors] == [("KC402", "vendor.scale"), ("KC402", "vendor.norm")]
    assert all(d.message.endswith(f"which layer '{app}' requires of every op (require_of_all)") for d in errors)
    assert "vendor.scale" in str(failed.value) and "vendor.norm" in str(failed.value)
    assert [str(d) for d in kcatalog.check_catalog(["shipped", vendor, app]).diagnostics] == [
        str(d) for d in failed.value.diagnostics
    ]  # validate and load say the same


def test_require_of_all_reaches_the_shipped_ops_too(workspace: Workspace) -> None:
    app = application(workspace, "require_of_all:\n  required_backends: [aten]\n  require_reference: true\n")
    shipped = kcatalog.load_catalog("shipped", cache=False)
    lacking = {op for op in shipped if "aten" not in shipped.info(op).backends}
    assert lacking  # the check below has something to find
    _, diagnostics = kcatalog.check_catalog(["shipped", app])
    assert {d.message.split("'")[1] for d in diagnostics} == lacking
    assert {d.code for d in diagnostics} == {"KC401"}  # every shipped op names its reference
    assert all(
        f"lacks the aten backend layer '{app}' requires of every op (require_of_all)" in d.message for d in diagnostics
    )


def test_an_applications_policy_governs_only_its_own_ops(workspace: Workspace, vendor: Path) -> None:
    app = application(workspace, 'policy:\n  required_platforms: ["cuda:9.0"]\n')
    assert kcatalog.check_catalog(["shipped", vendor, app]).diagnostics == []


def test_one_requirement_asked_by_two_layers_is_one_error_naming_both(workspace: Workspace, vendor: Path) -> None:
    vendor.joinpath("kcatalog.yaml").write_text(
        vendor.joinpath("kcatalog.yaml").read_text(encoding="utf-8") + "policy:\n  required_platforms: [cpu]\n",
        encoding="utf-8",
    )
    app = application(workspace, "require_of_all:\n  required_platforms: [cpu]\n")
    _, diagnostics = kcatalog.check_catalog(["shipped", vendor, app])
    assert [d.message.split("'")[1] for d in diagnostics] == ["vendor.gemm", "vendor.norm"]
    assert all(
        d.message.endswith(
            f"which the policy of layer '{vendor}' requires and layer '{app}' requires of every op (require_of_all)"
        )
        for d in diagnostics
    )


def test_a_warm_load_keeps_each_layers_policies(workspace: Workspace, vendor: Path, tmp_path: Path) -> None:
    app = application(workspace, 'require_of_all:\n  required_platforms: ["cuda:9.0"]\n')
    gemm = {"gemm": vendor_op("vendor_cuda", {"device": "cuda", "min_arch": "9.0"})}  # runs on cuda:9.0
    workspace.files({"vendor.yaml": {"kcatalog": 1, "group": "vendor", "ops": gemm}}, name="vendor")
    cold = kcatalog.load_catalog(["shipped", vendor, app], cache=tmp_path / "cache")
    warm = kcatalog.load_catalog(["shipped", vendor, app], cache=tmp_path / "cache")
    assert warm.cache_status.outcome == CacheOutcome.HIT
    assert [(p.layer, p.require_of_all.required_platforms) for p in warm.settings.policies] == [
        ("shipped", ()),
        (str(vendor), ()),
        (str(app), ("cuda:9.0",)),
    ]
    assert warm.settings == cold.settings
    assert warm.settings.required_platforms == ("cpu", "cuda:9.0", "hip:gfx942")


def test_the_settings_schema_has_require_of_all_and_rejects_unknown_keys_in_it() -> None:
    schema = json.loads((shipped_schema_dir() / "settings.v1.json").read_text(encoding="utf-8"))
    assert schema["properties"]["require_of_all"]["$ref"] == schema["properties"]["policy"]["$ref"]
    assert schema["$defs"]["PolicyDecl"]["additionalProperties"] is False
