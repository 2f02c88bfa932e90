"""Every rejected backend carries a RejectKind, which `explain --output-format json` prints as `kind`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

import kcatalog
from kcatalog import RejectKind
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from pathlib import Path

    from catalog_builder import Workspace

MISSING = "kc-kinds-no-such-distribution"
ORDER = ["broken", "cu", "needs", "narrow", "manual", "ref", "gated", "alt"]


def _catalog(workspace: Workspace) -> Path:
    """Op g.tag with one backend per way of being rejected, best first in the catalog's priority."""
    workspace.module("kinds_ok", "def tag(x):\n    return 'ok'\n")
    # Defines `tag` (the static check sees it), but its import fails: a dependency is missing here.
    workspace.module("kinds_broken", "def tag(x):\n    return 'broken'\n\n\nimport kc_kinds_missing_dependency\n")
    workspace.module(
        "kinds_gate", "def wide_only(x):\n    return 'needs a wide last dim' if x.shape[-1] < 8 else True\n"
    )
    backends: dict[str, Any] = {
        "broken": "kinds_broken:tag",
        "cu": {"target": "kinds_ok:tag", "capabilities": [{"device": "cuda"}]},
        "needs": {"target": "kinds_ok:tag", "requires": [MISSING]},
        "narrow": {"target": "kinds_ok:tag", "dtypes": ["float16"]},
        "manual": {"target": "kinds_ok:tag", "auto": False},
        "ref": {"target": "kinds_ok:tag", "deterministic": True},
        "gated": {"target": "kinds_ok:tag", "eligible": "kinds_gate:wide_only"},
        "alt": "kinds_ok:tag",
    }
    op = workspace.op(backends, dtypes=["float32", "float16"], reference="ref")
    return workspace.write({"tag": op}, backends=ORDER)


def _explain(capsys: pytest.CaptureFixture[str], directory: Path, *args: str) -> dict[str, str]:
    code = main(["explain", "g.tag", "--catalog", str(directory), "--platform", "cpu", "--dtype", "float32", *args,
                 "--output-format", "json"])  # fmt: skip
    [entry] = json.loads(capsys.readouterr().out)
    assert code == 0
    return {rejected["backend"]: rejected["kind"] for rejected in entry["rejected"]}


def test_explain_json_names_the_kind_of_every_rejected_backend(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _catalog(workspace)
    assert _explain(capsys, directory, "--import") == {
        "broken": "import failed",
        "cu": "capability",
        "needs": "requires",
        "narrow": "dtype",
        "manual": "auto off",
        "gated": "ranked below",  # explain makes no call, so the gate is not asked
        "alt": "ranked below",
    }
    # Without --import nothing is imported: the broken backend is chosen, and the rest rank below it.
    assert _explain(capsys, directory)["ref"] == "ranked below"
    assert set(_explain(capsys, directory, "--backend", "ref").values()) == {"not requested"}


def test_a_gate_refusing_the_call_is_a_gate_rejection(workspace: Workspace) -> None:
    torch = pytest.importorskip("torch")
    catalog = kcatalog.load_catalog(_catalog(workspace), cache=False)
    with catalog.use({"g.tag": "gated"}):  # the override puts the gated backend first
        refused = catalog.select("g.tag", "cpu", "float32", call=((torch.zeros(2, 4),), {}))
        accepted = catalog.select("g.tag", "cpu", "float32", call=((torch.zeros(2, 8),), {}))
    assert {r.backend: r.kind for r in refused.rejected}["gated"] is RejectKind.GATE
    assert refused.rejected[[r.backend for r in refused.rejected].index("gated")].reason == (
        "not eligible for this call: needs a wide last dim (kinds_gate:wide_only)"
    )
    assert accepted.backend == "gated"


def _stale_table(directory: Path) -> None:
    """A tuned table choosing 'alt' whose recorded kernel digest is not the source's: stale, so ignored."""
    (directory / "tuned").mkdir()
    (directory / "tuned" / "cpu.yaml").write_text(
        "kcatalog: 1\ntuned:\n  platform: cpu\n  provenance: {device: cpu}\n"
        "  kernels:\n    g.tag: {alt: '0000000000000000'}\n  ops:\n    g.tag:\n      float32:\n"
        "        - {tokens: [1, 16], backend: alt, medians_us: {alt: 1.0}}\n"
    )


def test_a_stale_tables_pick_is_a_stale_table_rejection(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _catalog(workspace)
    _stale_table(directory)
    assert _explain(capsys, directory, "--tokens", "4")["alt"] == "stale table"


def test_a_backend_that_does_not_promise_what_is_asked_is_not_promised(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    kinds = _explain(capsys, _catalog(workspace), "--deterministic")
    assert "ref" not in kinds  # the one that promises it is chosen
    assert {kinds[name] for name in ("broken", "manual", "gated", "alt")} == {"not promised"}
    assert kinds["cu"] == "capability"  # what cannot run here at all says so first


def test_every_kind_has_a_case_here(workspace: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    """The cases above between them produce every RejectKind: a new kind needs a case."""
    torch = pytest.importorskip("torch")
    directory = _catalog(workspace)
    seen = set(_explain(capsys, directory, "--import").values())
    seen |= set(_explain(capsys, directory, "--backend", "ref").values())
    _stale_table(directory)
    seen |= set(_explain(capsys, directory, "--tokens", "4").values())
    seen |= set(_explain(capsys, directory, "--deterministic").values())
    catalog = kcatalog.load_catalog(directory, cache=False)
    with catalog.use({"g.tag": "gated"}):
        seen |= {
            r.kind.value for r in catalog.select("g.tag", "cpu", "float32", call=((torch.zeros(1, 2),), {})).rejected
        }
    assert seen == {kind.value for kind in RejectKind}


def test_eligible_means_only_another_choice_keeps_it_out() -> None:
    eligible = {kind for kind in RejectKind if kcatalog.Rejected("b", "why", kind).eligible}
    assert eligible == {RejectKind.AUTO_OFF, RejectKind.RANKED_BELOW, RejectKind.NOT_REQUESTED, RejectKind.STALE_TABLE}
