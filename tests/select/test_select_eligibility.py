"""Eligibility: why a backend cannot run (a reason string, never a bool), checked on every selection path."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from kcatalog import CatalogError, NoEligibleBackendError, Platform, Rejected, RejectKind

if TYPE_CHECKING:
    from catalog_builder import Workspace

MISSING_DIST = "kcatalog-test-no-such-distribution"

# (backend restriction, platform, dtype, the reason it gives)
INELIGIBLE = {
    "wrong-device": (
        {"capabilities": [{"device": "cuda", "min_arch": "8.0"}]},
        "cpu",
        None,
        "runs on cuda >= 8.0, not cpu",
    ),
    "arch-below-min": (
        {"capabilities": [{"device": "cuda", "min_arch": "9.0"}]},
        "cuda:8.6",
        None,
        "needs cuda >= 9.0; this is cuda:8.6",
    ),
    "arch-above-max": (
        {"capabilities": [{"device": "cuda", "max_arch": "8.9"}]},
        "cuda:9.0",
        None,
        "needs cuda <= 8.9; this is cuda:9.0",
    ),
    "arch-outside-window": (
        {"capabilities": [{"device": "cuda", "min_arch": "8.0", "max_arch": "8.9"}]},
        "cuda:10.0",
        None,
        "needs cuda 8.0..8.9; this is cuda:10.0",
    ),
    "cuda-without-arch": (
        {"capabilities": [{"device": "cuda", "min_arch": "8.0"}]},
        "cuda",
        None,
        "needs cuda >= 8.0; the arch of cuda is unknown, and an unknown arch satisfies no arch window or arch list",
    ),
    "hip-arch-not-listed": (
        {"capabilities": [{"device": "hip", "archs": ["gfx942", "gfx950"]}]},
        "hip:gfx90a",
        None,
        "needs hip arch in gfx942, gfx950; this is hip:gfx90a",
    ),
    "no-capability-matches": (
        {"capabilities": [{"device": "cuda", "min_arch": "8.0"}, {"device": "hip"}]},
        "cpu",
        None,
        "runs on cuda >= 8.0, not cpu; runs on hip, not cpu",
    ),
    "distribution-not-installed": ({"requires": [MISSING_DIST]}, "cpu", None, f"needs {MISSING_DIST}, not installed"),
    "dtype-unsupported": ({"dtypes": ["float32"]}, "cpu", "float16", "does not support float16 (supports float32)"),
}

ELIGIBLE = {
    "min-arch-inclusive": ({"capabilities": [{"device": "cuda", "min_arch": "9.0"}]}, "cuda:9.0", None),
    "arch-compared-as-numbers": ({"capabilities": [{"device": "cuda", "min_arch": "9.0"}]}, "cuda:10.0", None),
    "max-arch-inclusive": ({"capabilities": [{"device": "cuda", "max_arch": "8.9"}]}, "cuda:8.9", None),
    "hip-arch-listed": ({"capabilities": [{"device": "hip", "archs": ["gfx942", "gfx950"]}]}, "hip:gfx942", None),
    "any-capability-matches": (
        {"capabilities": [{"device": "cuda", "min_arch": "8.0"}, {"device": "hip"}]},
        "hip:gfx942",
        None,
    ),
    "no-capabilities-runs-anywhere": ({}, "npu", None),
    "distribution-installed": ({"requires": ["PyYAML", "pydantic"]}, "cpu", None),
    "dtype-supported": ({"dtypes": ["float32"]}, "cpu", "float32"),
    "dtype-of-the-op": ({}, "cpu", "float16"),
}


def _kind(restriction: dict[str, Any]) -> RejectKind:
    """The kind of rejection each restriction gives where it does not hold."""
    if "requires" in restriction:
        return RejectKind.REQUIRES
    return RejectKind.DTYPE if "dtypes" in restriction else RejectKind.CAPABILITY


def _catalog(workspace: Workspace, restriction: dict[str, Any], *, fallback: bool) -> Any:
    """Op g.op: backend 'x' with the restriction (ranked first), plus an unrestricted 'ref' if `fallback`."""
    workspace.named_functions("kc_sel_elig", ["x", "ref"])
    backends: dict[str, Any] = {"x": {"target": "kc_sel_elig:x", **restriction}}
    if fallback:
        backends["ref"] = "kc_sel_elig:ref"
    workspace.write({"op": workspace.op(backends, dtypes=["float32", "float16"])}, backends=["x", "ref"])
    return workspace.load()


@pytest.mark.parametrize(("restriction", "platform", "dtype", "reason"), INELIGIBLE.values(), ids=INELIGIBLE.keys())
def test_ineligible_spec_gives_its_reason(
    workspace: Workspace, restriction: dict[str, Any], platform: str, dtype: str | None, reason: str
) -> None:
    catalog = _catalog(workspace, restriction, fallback=True)
    selection = catalog.select("g.op", platform, dtype)
    assert selection.chosen is not None and selection.chosen.backend == "ref"
    assert selection.rejected == (Rejected("x", reason, _kind(restriction)),)


@pytest.mark.parametrize(("restriction", "platform", "dtype"), ELIGIBLE.values(), ids=ELIGIBLE.keys())
def test_eligible_spec_gives_none(
    workspace: Workspace, restriction: dict[str, Any], platform: str, dtype: str | None
) -> None:
    catalog = _catalog(workspace, restriction, fallback=True)
    selection = catalog.select("g.op", platform, dtype)
    assert selection.chosen is not None and selection.chosen.backend == "x"
    assert selection.rejected == (
        Rejected("ref", f"ranked below x by {selection.decided_by}", RejectKind.RANKED_BELOW),
    )  # x: no reason


@pytest.mark.parametrize(("restriction", "platform", "dtype", "reason"), INELIGIBLE.values(), ids=INELIGIBLE.keys())
def test_explicit_backend_that_cannot_run_raises_with_its_reason(
    workspace: Workspace, restriction: dict[str, Any], platform: str, dtype: str | None, reason: str
) -> None:
    catalog = _catalog(workspace, restriction, fallback=True)
    message = rf"^no backend of op 'g\.op' can run on {re.escape(platform)}: x: {re.escape(reason)}$"
    with pytest.raises(NoEligibleBackendError, match=message) as info:
        catalog.select("g.op", platform, dtype, backend="x")
    assert info.value.rejected == (Rejected("x", reason, _kind(restriction)),)
    with pytest.raises(NoEligibleBackendError, match=message):
        catalog.resolve("g.op", platform, dtype, backend="x")


@pytest.mark.parametrize(("restriction", "platform", "dtype", "reason"), INELIGIBLE.values(), ids=INELIGIBLE.keys())
def test_single_backend_that_cannot_run_raises_with_its_reason(
    workspace: Workspace, restriction: dict[str, Any], platform: str, dtype: str | None, reason: str
) -> None:
    catalog = _catalog(workspace, restriction, fallback=False)
    selection = catalog.select("g.op", platform, dtype)
    assert selection.chosen is None  # no silent pick of the only backend
    assert selection.rejected == (Rejected("x", reason, _kind(restriction)),)
    message = rf"^no backend of op 'g\.op' can run on {re.escape(platform)}: x: {re.escape(reason)}$"
    with pytest.raises(NoEligibleBackendError, match=message):
        selection.require()
    with pytest.raises(NoEligibleBackendError, match=message):
        catalog.resolve("g.op", platform, dtype)


@pytest.mark.parametrize("case", ["wrong-device", "distribution-not-installed"])
def test_kernel_on_this_machine_checks_eligibility(
    workspace: Workspace, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    restriction, platform, _, reason = INELIGIBLE[case]
    catalog = _catalog(workspace, restriction, fallback=False)
    monkeypatch.setattr(Platform, "detect", classmethod(lambda cls: cls.parse(platform)))  # the cases are cpu ones
    with pytest.raises(
        NoEligibleBackendError, match=rf"^no backend of op 'g\.op' can run on cpu: x: {re.escape(reason)}$"
    ):
        catalog.kernel("g.op")
    with pytest.raises(NoEligibleBackendError, match=rf": x: {re.escape(reason)}$"):
        catalog.kernel("g.op", backend="x")


def test_the_error_for_nothing_eligible_lists_every_backend(workspace: Workspace) -> None:
    workspace.named_functions("kc_sel_elig", ["x", "y"])
    workspace.write(
        {
            "op": workspace.op(
                {
                    "x": {"target": "kc_sel_elig:x", "capabilities": [{"device": "cuda"}]},
                    "y": {"target": "kc_sel_elig:y", "requires": [MISSING_DIST]},
                }
            )
        },
        backends=["x", "y"],
    )
    with pytest.raises(NoEligibleBackendError) as info:
        workspace.load().select("g.op", "hip:gfx942").require()
    assert str(info.value) == (
        f"no backend of op 'g.op' can run on hip:gfx942: x: runs on cuda, not hip; "
        f"y: needs {MISSING_DIST}, not installed"
    )
    assert [r.backend for r in info.value.rejected] == ["x", "y"]


def test_arch_window_on_a_device_without_numeric_archs_is_refused_at_load(workspace: Workspace) -> None:
    # min_arch/max_arch are CUDA compute capabilities; on hip they would be compared with 'gfx942'.
    # It must be a load-time diagnostic, not a ValueError from int('gfx942') at selection time.
    workspace.named_functions("kc_sel_elig", ["x", "ref"])
    workspace.write(
        {
            "op": workspace.op(
                {
                    "x": {"target": "kc_sel_elig:x", "capabilities": [{"device": "hip", "min_arch": "9.0"}]},
                    "ref": "kc_sel_elig:ref",
                }
            )
        },
        backends=["x", "ref"],
    )
    with pytest.raises(CatalogError) as info:
        workspace.load()
    errors = [d for d in info.value.diagnostics if d.is_error]
    assert [d.code for d in errors] == ["KC103"]
    assert "min_arch" in errors[0].message and "cuda" in errors[0].message
