"""Priority: op per-device > catalog per-device > op > catalog default, and Selection.decided_by names the level."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcatalog import Catalog, Rejected, RejectKind

if TYPE_CHECKING:
    from catalog_builder import Workspace

BACKENDS = ["a", "b", "c", "d"]
OP_PLATFORM = "priority of op 'g.op' on cpu"
CATALOG_PLATFORM = "catalog priority on cpu"
OP = "priority of op 'g.op'"
DEFAULT = "catalog default priority"


def _catalog(
    workspace: Workspace,
    *,
    op_platform: bool,
    catalog_platform: bool,
    op: bool,
    extra_backends: dict[str, Any] | None = None,
) -> Catalog:
    """Default [a, b, c, d]; the op prefers b; the catalog prefers c on cpu; the op prefers d on cpu."""
    workspace.named_functions("kc_sel_prio", [*BACKENDS, "cu"])
    backends: dict[str, Any] = {name: f"kc_sel_prio:{name}" for name in BACKENDS}
    backends.update(extra_backends or {})
    extra: dict[str, Any] = {}
    if op:
        extra["priority"] = ["b"]
    if op_platform:
        extra["platform_priority"] = {"cpu": ["d"]}
    workspace.write(
        {"op": workspace.op(backends, **extra)},
        backends=[*BACKENDS, "cu"],
        priority=BACKENDS,
        platform_priority={"cpu": ["c"]} if catalog_platform else None,
    )
    return workspace.load()


@pytest.mark.parametrize(
    ("levels", "chosen", "decided_by"),
    [
        ({"op_platform": True, "catalog_platform": True, "op": True}, "d", OP_PLATFORM),
        ({"op_platform": False, "catalog_platform": True, "op": True}, "c", CATALOG_PLATFORM),
        ({"op_platform": False, "catalog_platform": False, "op": True}, "b", OP),
        ({"op_platform": False, "catalog_platform": False, "op": False}, "a", DEFAULT),
    ],
    ids=["op-platform-beats-catalog-platform", "catalog-platform-beats-op", "op-beats-default", "default"],
)
def test_most_specific_priority_wins(
    workspace: Workspace, levels: dict[str, bool], chosen: str, decided_by: str
) -> None:
    selection = _catalog(workspace, **levels).select("g.op", "cpu")
    assert selection.chosen is not None and selection.chosen.backend == chosen
    assert selection.decided_by == decided_by
    assert selection.order[0] == chosen
    assert all(r.reason == f"ranked below {chosen} by {decided_by}" for r in selection.rejected)
    assert sorted(r.backend for r in selection.rejected) == sorted(set(BACKENDS) - {chosen})


def test_per_device_priorities_apply_only_on_their_device(workspace: Workspace) -> None:
    catalog = _catalog(workspace, op_platform=True, catalog_platform=True, op=True)
    selection = catalog.select("g.op", "cuda:9.0")
    assert (selection.chosen.backend, selection.decided_by) == ("b", OP)  # type: ignore[union-attr]


def test_backends_a_priority_does_not_list_come_after_the_listed_ones(workspace: Workspace) -> None:
    selection = _catalog(workspace, op_platform=True, catalog_platform=False, op=False).select("g.op", "cpu")
    assert selection.order == ("d", "a", "b", "c")


def test_the_deciding_list_skips_a_backend_that_cannot_run_here(workspace: Workspace) -> None:
    # The op's cpu list puts a cuda-only backend first: the next one of that same list runs.
    workspace.named_functions("kc_sel_prio", [*BACKENDS, "cu"])
    backends: dict[str, Any] = {name: f"kc_sel_prio:{name}" for name in BACKENDS}
    backends["cu"] = {"target": "kc_sel_prio:cu", "capabilities": [{"device": "cuda"}]}
    workspace.write(
        {"op": workspace.op(backends, priority=["b"], platform_priority={"cpu": ["cu", "d"]})},
        backends=[*BACKENDS, "cu"],
        priority=BACKENDS,
    )
    selection = workspace.load().select("g.op", "cpu")
    assert (selection.chosen.backend, selection.decided_by) == ("d", OP_PLATFORM)  # type: ignore[union-attr]
    assert selection.rejected[0] == Rejected("cu", "runs on cuda, not cpu", RejectKind.CAPABILITY)


def test_catalog_lists_may_name_backends_an_op_lacks(workspace: Workspace) -> None:
    workspace.named_functions("kc_sel_prio", ["a", "b"])
    workspace.write(
        {"op": workspace.op({"a": "kc_sel_prio:a", "b": "kc_sel_prio:b"})},
        backends=["z", "a", "b"],
        priority=["z", "b", "a"],
        platform_priority={"cpu": ["z", "a"]},
    )
    catalog = workspace.load()
    assert catalog.select("g.op", "cpu").order == ("a", "b")
    assert catalog.select("g.op", "cuda:9.0").order == ("b", "a")


@pytest.fixture
def base_catalog(workspace: Workspace) -> Catalog:
    return _catalog(workspace, op_platform=False, catalog_platform=False, op=False)


_order = st.one_of(
    st.none(), st.permutations(BACKENDS).flatmap(lambda p: st.integers(0, 4).map(lambda n: tuple(p[:n])))
)


# The catalog fixture is only read: sharing it between examples is safe.
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op_platform=_order, catalog_platform=_order, op=_order, default=_order, device=st.sampled_from(["cpu", "cuda"]))
def test_priority_order_property(
    base_catalog: Catalog,
    op_platform: tuple[str, ...] | None,
    catalog_platform: tuple[str, ...] | None,
    op: tuple[str, ...] | None,
    default: tuple[str, ...] | None,
    device: str,
) -> None:
    """Whatever lists are declared, the first non-empty one, most specific first, decides, and only on its device."""
    info = dataclasses.replace(
        base_catalog.info("g.op"),
        priority=op,
        platform_priority=MappingProxyType({"cpu": op_platform} if op_platform is not None else {}),
    )
    settings_ = dataclasses.replace(
        base_catalog.settings,
        priority=default or (),
        platform_priority=MappingProxyType({"cpu": catalog_platform} if catalog_platform is not None else {}),
    )
    selection = Catalog({"g.op": info}, settings_, ()).select("g.op", device)  # a catalog built from the model
    order, decided_by = selection.order, selection.decided_by
    levels = [(op, OP), (default, DEFAULT)]
    if device == "cpu":
        levels[:0] = [(op_platform, OP_PLATFORM), (catalog_platform, CATALOG_PLATFORM)]
    expected = next(((lst, name) for lst, name in levels if lst), ((), "declaration order"))
    assert decided_by == expected[1]
    assert order == (*expected[0], *(b for b in BACKENDS if b not in expected[0]))
