"""The format as real inventories need it: ops without signature, dtypes or reference; backends kept out of
auto-selection; named priority lists; declared device kinds; mixed-case backend names matched exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from catalog_builder import Workspace

from kcatalog import check_catalog
from kcatalog.tools import conformance

SETTINGS: dict[str, Any] = {
    "kcatalog": 1,
    "backends": {"torch": {}, "KDA": {}, "kda": {}, "torch_compile": {"auto": False}},
    "priority": ["torch_compile", "KDA", "torch"],
    "priorities": {"vendor_first": ["kda", "KDA", "torch_compile", "torch"]},
    "devices": ["tpu"],
}


def write(workspace: Workspace, ops: dict[str, Any], **settings: Any) -> Path:
    workspace.named_functions("inv_kernels", ["first", "second", "third", "fourth"])
    return workspace.files(
        {"kcatalog.yaml": {**SETTINGS, **settings}, "g.yaml": {"kcatalog": 1, "group": "g", "ops": ops}}
    )


def load(workspace: Workspace, ops: dict[str, Any], **settings: Any) -> Any:
    catalog, diagnostics = check_catalog(write(workspace, ops, **settings))
    assert catalog is not None, [str(d) for d in diagnostics]
    return catalog


BARE = {"backends": {"torch": {"target": "inv_kernels:first"}, "KDA": {"target": "inv_kernels:second"}}}


def test_an_op_without_signature_dtypes_or_reference_loads_as_declared(workspace: Workspace) -> None:
    info = load(workspace, {"op": BARE}).info("g.op")
    assert (info.signature, info.dtypes, info.description, info.reference) == (None, None, None, None)
    assert {spec.dtypes for spec in info.backends.values()} == {None}


def test_an_op_without_dtypes_accepts_any_dtype(workspace: Workspace) -> None:
    catalog = load(workspace, {"op": BARE})
    assert catalog.select("g.op", "cpu", "float8_e4m3fn").require().backend == "KDA"


def test_backend_names_are_matched_exactly_case_included(workspace: Workspace) -> None:
    catalog = load(workspace, {"op": {"backends": {"kda": {"target": "inv_kernels:first"}, **BARE["backends"]}}})
    assert str(catalog.info("g.op").backends["KDA"].target) == "inv_kernels:second"
    assert str(catalog.info("g.op").backends["kda"].target) == "inv_kernels:first"


@pytest.mark.parametrize(
    ("dispatch_arg", "call"),
    [
        (None, lambda h, t: h(t, 1, key="v")),
        (1, lambda h, t: h(2, t)),
        ("weight", lambda h, t: h(1, weight=t)),
    ],
)
def test_a_handle_without_signature_forwards_args_and_kwargs(
    workspace: Workspace, dispatch_arg: Any, call: Any
) -> None:
    op = {**BARE, **({} if dispatch_arg is None else {"dispatch_arg": dispatch_arg})}
    handle = load(workspace, {"op": op}).op("g.op")
    tensor = torch.zeros(2)
    # inv_kernels.second (KDA, first in the catalog priority that may be chosen) returns its own name
    assert call(handle, tensor) == "second"


def test_a_handle_without_its_dispatch_argument_says_which_it_needs(workspace: Workspace) -> None:
    handle = load(workspace, {"op": {**BARE, "dispatch_arg": "weight"}}).op("g.op")
    with pytest.raises(
        TypeError,
        match=r"^op 'g\.op' dispatches on the tensor at argument 'weight' \(by keyword\); the call gave 1 positional "
        r"argument and keywords \(none\)$",
    ):
        handle(torch.zeros(2))


def test_a_dispatch_position_with_a_signature_names_that_parameter(workspace: Workspace) -> None:
    op = {**BARE, "signature": "(n: int, x: Tensor) -> Tensor", "dispatch_arg": 1}
    assert load(workspace, {"op": op}).op("g.op")(3, torch.zeros(1)) == "second"
    catalog, diagnostics = check_catalog(write(workspace, {"op": {**op, "dispatch_arg": 2}}))
    assert catalog is None
    assert [d.message for d in diagnostics] == [
        "dispatch_arg is position 2, but op 'g.op' takes 2 positional parameters"
    ]


def test_auto_false_is_never_chosen_by_priority_only_when_named(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = {"op": {"backends": {**BARE["backends"], "torch_compile": {"target": "inv_kernels:third"}}}}
    catalog = load(workspace, ops)
    selection = catalog.select("g.op", "cpu")
    assert selection.require().backend == "KDA"
    assert [r.reason for r in selection.rejected if r.backend == "torch_compile"] == [
        "not chosen automatically (auto: false); name it with backend=, an override or a plan"
    ]
    assert catalog.select("g.op", "cpu", backend="torch_compile").require().backend == "torch_compile"
    with catalog.use({"g.*": "torch_compile"}):
        assert catalog.select("g.op", "cpu").require().backend == "torch_compile"
    monkeypatch.setenv("KCATALOG_BACKEND", "torch_compile")
    assert load(workspace, ops).select("g.op", "cpu").require().backend == "torch_compile"


def test_a_required_platform_is_not_served_by_an_auto_false_backend_alone(workspace: Workspace) -> None:
    """Selection there would choose nothing, so validate must not accept it."""
    only = {"backends": {"torch_compile": {"target": "inv_kernels:first"}}}
    policy = {"required_platforms": ["cpu"]}
    _, diagnostics = check_catalog(write(workspace, {"op": only}, policy=policy))
    assert [str(d).partition(" ")[2] for d in diagnostics] == [
        "KC402 op 'g.op' has no backend for platform cpu (torch_compile: auto: false), which the policy requires"
    ]
    catalog = load(workspace, {"op": {"backends": {**only["backends"], **BARE["backends"]}}}, policy=policy)
    assert catalog.select("g.op", "cpu").require().backend == "KDA"


def test_auto_on_a_backend_declaration_overrides_the_settings(workspace: Workspace) -> None:
    ops = {
        "op": {
            "backends": {
                "torch": {"target": "inv_kernels:first", "auto": False},
                "torch_compile": {"target": "inv_kernels:third", "auto": True},
            }
        }
    }
    assert load(workspace, ops).select("g.op", "cpu").require().backend == "torch_compile"


def test_a_named_priority_list_may_name_backends_the_op_lacks(workspace: Workspace) -> None:
    ops = {
        "op": {**BARE, "priority": "vendor_first"},
        "other": {**BARE, "platform_priority": {"tpu": "vendor_first", "cpu": ["torch", "KDA"]}},
    }
    catalog = load(workspace, ops)
    assert catalog.info("g.op").priority == ("kda", "KDA", "torch_compile", "torch")
    assert catalog.select("g.op", "cpu").decided_by == "priority of op 'g.op'"
    assert catalog.select("g.op", "cpu").require().backend == "KDA"
    assert catalog.select("g.other", "cpu").require().backend == "torch"
    assert catalog.select("g.other", "tpu").require().backend == "KDA"  # a declared device kind


def test_a_declared_device_kind_is_a_platform_of_the_catalog(workspace: Workspace) -> None:
    ops = {"op": {"backends": {"torch": {"target": "inv_kernels:first", "capabilities": [{"device": "tpu"}]}}}}
    catalog = load(workspace, ops)
    assert catalog.devices[-1] == "tpu"
    assert catalog.select("g.op", "tpu").require().backend == "torch"
    assert catalog.select("g.op", "musa").chosen is None
    with pytest.raises(
        ValueError,
        match=r"unknown device 'tpux' in platform 'tpux' \(did you mean 'tpu'\?\); expected one of .*, musa, tpu$",
    ):
        catalog.select("g.op", "tpux")


def test_import_check_reports_no_mismatch_against_an_undeclared_signature(workspace: Workspace) -> None:
    catalog, diagnostics = check_catalog(write(workspace, {"op": BARE}), import_targets=True)
    assert catalog is not None and diagnostics == []


def test_what_needs_a_signature_or_a_reference_says_so(workspace: Workspace) -> None:
    ops = {
        "a": {**BARE, "mutates": ["x"]},
        "b": {**BARE, "fake": "reference"},
        "c": {**BARE, "samples": {"args": {"x": {"shape": [2]}}}},
    }
    catalog, diagnostics = check_catalog(write(workspace, ops), check_targets=False)
    assert catalog is None
    assert [f"{d.code} {d.message}" for d in diagnostics] == [
        "KC208 mutates names arguments of op 'g.a', which declares no signature to name them in",
        "KC204 op 'g.b' declares 'fake: reference' but names no reference backend to run",
        "KC209 samples of op 'g.c' need the op's signature and dtypes, to build and check its arguments",
    ]


def test_kcatalog_test_lists_the_ops_it_skipped_for_lack_of_a_reference(workspace: Workspace) -> None:
    catalog = load(workspace, {"op": BARE, "other": BARE})
    cases, notes = conformance.plan(catalog, catalog.ops(), device="cpu", base_seed=1)
    assert cases == []
    assert notes == ["skipped 2 ops that name no reference backend to check against: g.op, g.other"]
