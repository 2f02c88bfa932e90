"""Selection by token count: tuned tables in the precedence, bucket dispatch at the edges (handles and torch ops),
`explain` for a tuned choice, plans pinned and checked."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import kcatalog
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

TABLE = """\
kcatalog: 1
tuned:
  platform: cpu
  provenance: {device: cpu}
  ops:
    g.tag:
      float32:
        - {tokens: [1, 4], backend: small, medians_us: {small: 1.0, big: 2.0}}
        - {tokens: [5, 16], backend: big, medians_us: {big: 3.0, small: 4.5}}
        - {tokens: [33, null], backend: small, medians_us: {small: 9.0, big: 9.5}}
"""


@pytest.fixture
def tagged(workspace: Workspace) -> Path:
    """One op on the CPU, three backends that say which ran; a tuned table for cpu float32 with a gap [17, 32]."""
    for name in ("small", "big", "ref"):
        workspace.module(f"tag_{name}", f"def tag(x):\n    return {name!r}\n")
    backends = {name: f"tag_{name}:tag" for name in ("small", "big", "ref")}
    directory = workspace.write(
        {"tag": workspace.op(backends, reference="ref", dtypes=("float32", "float64"))},
        backends=["ref", "small", "big"],
    )
    workspace.files({"tuned/cpu.yaml": TABLE})
    return directory


def test_select_at_the_bucket_edges(tagged: Path) -> None:
    catalog = kcatalog.load_catalog(tagged, cache=False)
    chosen = {t: catalog.select("g.tag", "cpu", "float32", tokens=t).chosen for t in (1, 4, 5, 16, 17, 32, 33, 10**6)}
    assert {t: spec.backend for t, spec in chosen.items() if spec} == {
        1: "small",
        4: "small",
        5: "big",
        16: "big",
        17: "ref",  # the gap: priority decides
        32: "ref",
        33: "small",
        10**6: "small",
    }
    assert catalog.select("g.tag", "cpu", "float32").chosen.backend == "ref"  # type: ignore[union-attr]
    assert catalog.select("g.tag", "cpu", "float64", tokens=4).chosen.backend == "ref"  # type: ignore[union-attr]


def test_prepare_imports_every_buckets_backend(tagged: Path) -> None:
    import sys

    catalog = kcatalog.load_catalog(tagged, cache=False)
    assert not {"tag_small", "tag_big", "tag_ref"} & set(sys.modules)
    assert catalog.prepare("cpu")["g.tag"].backend == "ref"  # what a call without a token count gets
    assert {"tag_small", "tag_big", "tag_ref"} <= set(sys.modules)  # and the backend of every bucket


def test_the_table_sits_below_overrides_and_backend(tagged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = kcatalog.load_catalog(tagged, cache=False, overrides={"g.tag": "big"})
    assert catalog.select("g.tag", "cpu", "float32", tokens=1).decided_by == "override overrides= g.tag=big"
    plain = kcatalog.load_catalog(tagged, cache=False)
    assert plain.select("g.tag", "cpu", "float32", tokens=1, backend="ref").chosen.backend == "ref"  # type: ignore[union-attr]
    with plain.use({"g.tag": "big"}):
        assert plain.select("g.tag", "cpu", "float32", tokens=1).chosen.backend == "big"  # type: ignore[union-attr]


def test_handle_dispatches_by_leading_dimension(tagged: Path) -> None:
    torch = pytest.importorskip("torch")
    catalog = kcatalog.load_catalog(tagged, cache=False)
    handle = catalog.op("g.tag")
    got = {t: handle(torch.zeros(t, 3)) for t in (1, 4, 5, 16, 17, 32, 33, 500)}
    assert got == {1: "small", 4: "small", 5: "big", 16: "big", 17: "ref", 32: "ref", 33: "small", 500: "small"}
    assert handle(torch.zeros(0, 3)) == "ref"  # no bucket holds 0 tokens
    assert handle(torch.zeros(4, 3, dtype=torch.float64)) == "ref"  # no table for this dtype: one callable
    with catalog.use({"g.*": "big"}):
        assert handle(torch.zeros(1, 3)) == "big"


def test_torch_op_dispatches_by_leading_dimension_too(workspace: Workspace) -> None:
    torch = pytest.importorskip("torch")
    for name in ("small", "big"):
        workspace.module(f"scale_{name}", f"def scale(x):\n    return x * {2 if name == 'small' else 3}\n")
    backends = {name: f"scale_{name}:scale" for name in ("small", "big")}
    op = workspace.op(backends, reference="small", fake="scale_small:scale")
    directory = workspace.write({"scale": op}, backends=["small", "big"], group="tunedop")
    table = "\n".join(
        line.partition(", medians_us")[0] + ("}" if "medians_us" in line else "") for line in TABLE.splitlines()
    )
    workspace.files({"tuned/cpu.yaml": table.replace("g.tag", "tunedop.scale")})
    catalog = kcatalog.load_catalog(directory, cache=False)
    ops = catalog.register_torch_ops(namespace="kc_tuned_test")
    x4, x5 = torch.ones(4, 2), torch.ones(5, 2)
    assert ops["tunedop.scale"](x4).tolist() == (x4 * 2).tolist()
    assert ops["tunedop.scale"](x5).tolist() == (x5 * 3).tolist()
    # Compiled with dynamic shapes: one graph, its opaque node still dispatching by bucket on every call.
    handle = catalog.op("tunedop.scale")
    compiled = torch.compile(lambda x: handle(x) + 1, dynamic=True, fullgraph=True, backend="eager")
    for t, factor in ((4, 2), (5, 3), (16, 3), (40, 2), (3, 2)):
        x = torch.ones(t, 2)
        assert compiled(x).tolist() == (x * factor + 1).tolist(), t


def test_explain_a_tuned_choice(tagged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["explain", "g.tag", "--catalog", str(tagged), "--platform", "cpu", "--dtype", "float32"]
    assert main([*args, "--tokens", "9"]) == 0
    assert capsys.readouterr().out == (
        "g.tag on cpu: big (tag_big:tag), by tuned table for cpu float32 T∈[5, 16]: big 3.0 µs vs small 4.5 µs\n"
        "  ref: ranked below big by tuned table for cpu float32 T∈[5, 16]\n"
        "  small: ranked below big by tuned table for cpu float32 T∈[5, 16]\n"
    )
    assert main(args) == 0
    assert capsys.readouterr().out == (
        "g.tag on cpu: ref (tag_ref:tag), by catalog default priority\n"
        "  small: ranked below ref by catalog default priority\n"
        "  big: ranked below ref by catalog default priority\n"
        "  tuned table for cpu float32: T∈[1, 4] small, T∈[5, 16] big, T∈[33, ∞] small (--tokens N picks one)\n"
    )


# -- plans ---------------------------------------------------------------------------------------------------


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["plan", *args])
    return code, capsys.readouterr().out


def test_plan_records_the_buckets_and_pins_them(
    tagged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    plan = tmp_path / "plan.yaml"
    code, out = _plan(capsys, "--platform", "cpu", "--catalog", str(tagged), "--out", str(plan))
    assert code == 0, out
    text = plan.read_text()
    assert (
        "    g.tag:\n      float32: [{tokens: [1, 4], backend: small}, {tokens: [5, 16], backend: big}, "
        "{tokens: [17, 32], backend: ref}, {tokens: [33, null], backend: small}]\n"
    ) in text
    assert _plan(capsys, "--check", str(plan), "--platform", "cpu", "--catalog", str(tagged)) == (0, "Plan holds.\n")

    # Pinned: the plan holds without the tuned table, against the priority it would otherwise follow; and the
    # catalog is the plan's (its digest leaves tuned tables out: the plan holds their choices), so no KC242.
    (tagged / "tuned" / "cpu.yaml").unlink()
    catalog = kcatalog.load_catalog(tagged, cache=False, plan=plan)
    assert not [w for w in catalog.warnings if w.code == "KC242"], catalog.warnings
    handle = catalog.op("g.tag")
    assert [handle(torch.zeros(t, 1)) for t in (1, 5, 20, 40)] == ["small", "big", "ref", "small"]
    assert catalog.select("g.tag", "cpu", "float32", tokens=5).decided_by == f"plan {plan} T∈[5, 16]"

    # Ranks that keep the same plan at different paths run the same kernels: check_consistent sees no difference.
    from kcatalog.runtime.startup import resolved_selection

    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(plan.read_text())
    moved = kcatalog.load_catalog(tagged, cache=False, plan=elsewhere)
    here = resolved_selection(catalog.runtime, kcatalog.Platform("cpu"))
    assert here == resolved_selection(moved.runtime, kcatalog.Platform("cpu")) and "by plan T∈[5, 16]" in here["g.tag"]

    # This machine (now without the table) would choose otherwise: exit 1, naming the op.
    code, out = _plan(capsys, "--check", str(plan), "--platform", "cpu", "--catalog", str(tagged))
    assert code == 1
    assert out.splitlines() == [
        "g.tag float32: plan has small for T∈[1, 4], big for T∈[5, 16], ref for T∈[17, 32], small for T∈[33, ∞], "
        "this machine chooses ref on cpu",
        f"1 difference from {plan}",
    ]


def test_a_plan_for_another_platform_imports_nothing_here(
    workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What fails to import, or is not installed, on this machine says nothing about the platform planned for:
    planned for this machine, the plan records the fallback; for another platform, the backend priority chose,
    and a note. `--platform cpu` and the bare device name count as this machine."""
    workspace.module(
        "tag_ref", "raise ImportError('needs a library this machine lacks')\n\ndef tag(x):\n    return 'ref'\n"
    )
    workspace.module("tag_small", "def tag(x):\n    return 'small'\n")
    workspace.module("tag_vendor", "def tag(x):\n    return 'vendor'\n")
    vendor = {"target": "tag_vendor:tag", "requires": ["kcatalog-test-vendor-library"]}  # installed nowhere
    directory = workspace.write(
        {
            "tag": workspace.op({"ref": "tag_ref:tag", "small": "tag_small:tag"}, dtypes=("float32",)),
            "vend": workspace.op({"vendor": vendor, "small": "tag_small:tag"}, dtypes=("float32",)),
        },
        backends=["vendor", "ref", "small"],
    )
    detected = kcatalog.Platform.detect()
    other = "cuda:9.0" if detected.device == "cpu" else "cpu"
    for platform in (None, detected.device):  # this machine, named or not
        here = tmp_path / f"here_{platform}.yaml"
        assert main(["plan", str(directory), *(["--platform", platform] if platform else []), "--out", str(here)]) == 0
        text = here.read_text()
        assert "    g.tag:\n      float32: small\n" in text  # ref's import failed here: its fallback
        assert "    g.vend:\n      float32: small\n" in text  # vendor's library is not installed here
    assert "on another machine" not in capsys.readouterr().err
    there = tmp_path / "there.yaml"
    assert main(["plan", str(directory), "--platform", other, "--out", str(there)]) == 0
    text = there.read_text()
    assert "    g.tag:\n      float32: ref\n" in text and "    g.vend:\n      float32: vendor\n" in text
    assert f"note: planned for {other} on another machine: no backend was imported" in capsys.readouterr().err


def test_plan_check_names_the_op_an_override_changes(
    workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = workspace.minimal()
    plan = tmp_path / "plan.yaml"
    assert _plan(capsys, "--platform", "cuda:9.0", "--catalog", str(directory), "--out", str(plan))[0] == 0
    assert _plan(capsys, "--check", str(plan), "--platform", "cuda:9.0", "--catalog", str(directory))[0] == 0
    code, out = _plan(capsys, "--check", str(plan), "--platform", "cpu", "--catalog", str(directory))
    assert (code, out) == (1, f"plan is for cuda:9.0; this machine is cpu\n1 difference from {plan}\n")
    code = main(["plan", "--check", str(tmp_path / "missing.yaml"), "--catalog", str(directory)])
    assert code == 1
    assert "KC006 plan" in capsys.readouterr().err


def test_plan_check_compares_what_the_plan_covers(
    tagged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan made for one dtype holds on the machine it was made on: `--check` compares the dtypes the plan
    covers and names those it did not compare; `--dtype` compares what it asks, the plan's or not."""
    plan = tmp_path / "plan.yaml"
    catalog = ["--platform", "cpu", "--catalog", str(tagged)]
    assert _plan(capsys, *catalog, "--dtype", "float32", "--out", str(plan))[0] == 0
    assert _plan(capsys, "--check", str(plan), *catalog) == (
        0,
        "not compared: float64 (the plan covers float32 only)\nPlan holds.\n",
    )
    code, out = _plan(capsys, "--check", str(plan), *catalog, "--dtype", "float64")
    assert (code, out.splitlines()) == (
        1,
        [
            "g.tag float64: plan has nothing, this machine chooses ref on cpu",
            "not compared: float32 (--dtype asked for float64)",
            f"1 difference from {plan}",
        ],
    )


def test_a_pin_that_cannot_be_honoured_warns_once_or_raises_when_strict(
    tagged: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    workspace: Workspace,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = tmp_path / "plan.yaml"
    catalog = kcatalog.load_catalog(tagged, cache=False)
    plan.write_text(
        f"kcatalog: 1\nplan:\n  platform: cpu\n  digest: {catalog.digest}\n  ops:\n    g.tag:\n      float32: big\n"
    )
    # The pinned kernel's module fails to import on this machine (as a Triton module whose `import triton` fails).
    workspace.module(
        "tag_big",
        "import os\nif os.environ.get('TAG_BIG_FAILS'):\n    raise ImportError('no big')\ndef tag(x):\n    return 'big'\n",
    )
    workspace.forget()
    monkeypatch.setenv("TAG_BIG_FAILS", "1")
    with caplog.at_level(logging.WARNING, logger="kcatalog"):
        pinned = kcatalog.load_catalog(tagged, cache=False, plan=plan)
        assert pinned.resolve("g.tag", "cpu", "float32")(None) == "ref"
        assert pinned.resolve("g.tag", "cpu", "float32")(None) == "ref"
    warned = [r.getMessage() for r in caplog.records if "not honoured" in r.getMessage()]
    assert len(warned) == 1 and "plan " in warned[0] and "op 'g.tag'" in warned[0], warned
    strict = kcatalog.load_catalog(tagged, cache=False, plan=plan, strict=True)
    with pytest.raises(kcatalog.KernelImportError, match="backend 'big' of op 'g.tag'"):
        strict.resolve("g.tag", "cpu", "float32")


def test_a_plan_from_other_contents_warns_and_strict_refuses(tagged: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "kcatalog: 1\nplan:\n  platform: cpu\n  digest: 0123456789abcdef\n  ops:\n    g.tag:\n      float32: big\n"
    )
    catalog = kcatalog.load_catalog(tagged, cache=False, plan=plan)
    assert [d.code for d in catalog.warnings] == ["KC242"]
    with pytest.raises(kcatalog.CatalogError, match="KC242 plan was made from a catalog with digest 0123456789abcdef"):
        kcatalog.load_catalog(tagged, cache=False, plan=plan, strict=True)


def test_ranks_compare_a_plans_buckets(tagged: Path, tmp_path: Path) -> None:
    """What check_consistent all-gathers covers each bucket of a plan, not only a tuned table's."""
    from kcatalog.runtime.startup import resolved_selection

    plan = tmp_path / "plan.yaml"
    digest = kcatalog.load_catalog(tagged, cache=False).digest
    plan.write_text(
        f"kcatalog: 1\nplan:\n  platform: cpu\n  digest: {digest}\n  ops:\n    g.tag:\n      float32:\n"
        "        - {tokens: [1, 4], backend: big}\n"
    )
    (tagged / "tuned" / "cpu.yaml").unlink()
    catalog = kcatalog.load_catalog(tagged, cache=False, plan=plan)
    assert resolved_selection(catalog.runtime, kcatalog.Platform("cpu"))["g.tag"] == (
        "float32 T=0: ref (by catalog default priority); "
        "float32 T=4: big (by plan T∈[1, 4]); "
        "float32 T=5: ref (by catalog default priority); "
        "float64: ref (by catalog default priority)"
    )


def test_plan_buckets_out_of_order_are_an_error(tagged: Path, tmp_path: Path) -> None:
    """A bucket lookup bisects: buckets out of order would silently pin nothing."""
    plan = tmp_path / "plan.yaml"
    digest = kcatalog.load_catalog(tagged, cache=False).digest
    plan.write_text(
        f"kcatalog: 1\nplan:\n  platform: cpu\n  digest: {digest}\n  ops:\n    g.tag:\n      float32:\n"
        "        - {tokens: [5, 16], backend: big}\n        - {tokens: [1, 4], backend: small}\n"
    )
    with pytest.raises(kcatalog.CatalogError) as raised:
        kcatalog.load_catalog(tagged, cache=False, plan=plan)
    assert [str(d) for d in raised.value.diagnostics] == [
        f"{plan}:9:11: KC243 buckets are not sorted: T∈[1, 4] comes after T∈[5, 16]"
    ]


def test_a_plan_for_another_platform_warns_on_this_one(
    tagged: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = kcatalog.load_catalog(tagged, cache=False)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        f"kcatalog: 1\nplan:\n  platform: cuda:9.0\n  digest: {catalog.digest}\n  ops:\n    g.tag:\n      float32: big\n"
    )
    monkeypatch.setattr(kcatalog.Platform, "detect", classmethod(lambda cls: cls("cpu")))
    with caplog.at_level(logging.WARNING, logger="kcatalog"):
        pinned = kcatalog.load_catalog(tagged, cache=False, plan=plan)
        assert pinned.select("g.tag", dtype="float32").chosen.backend == "ref"  # type: ignore[union-attr]
    assert [r.getMessage() for r in caplog.records] == [
        f"plan {plan} is for cuda:9.0; this machine is cpu: nothing is pinned"
    ]
    strict = kcatalog.load_catalog(tagged, cache=False, plan=plan, strict=True)
    with pytest.raises(kcatalog.CatalogError, match="is for cuda:9.0; this machine is cpu"):
        strict.select("g.tag", dtype="float32")


# -- per-call gates ------------------------------------------------------------------------------------------

GATE = """\
CALLS = []


def narrow(x):
    CALLS.append(tuple(x.shape))
    return True if x.shape[-1] <= 4 else f"last dim {x.shape[-1]} > 4"
"""


def test_a_gate_is_asked_once_per_shape_and_its_reason_kept(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    workspace.module("gate_fast", "def tag(x):\n    return 'fast'\n")
    workspace.module("gate_ref", "def tag(x):\n    return 'ref'\n")
    workspace.module("gate_rule", GATE)
    backends = {"fast": {"target": "gate_fast:tag", "eligible": "gate_rule:narrow"}, "ref": "gate_ref:tag"}
    directory = workspace.write({"tag": workspace.op(backends, reference="ref")}, backends=["fast", "ref"])
    catalog = kcatalog.load_catalog(directory, cache=False)
    handle = catalog.op("g.tag")
    assert [handle(torch.zeros(2, w)) for w in (4, 8, 4, 8, 3)] == ["fast", "ref", "fast", "ref", "fast"]
    import gate_rule

    assert gate_rule.CALLS == [(2, 4), (2, 8), (2, 3)]  # once per distinct argument shape
    refused = catalog.select("g.tag", "cpu", "float32", call=((torch.zeros(1, 8),), {}))
    assert refused.rejected[0].reason == "not eligible for this call: last dim 8 > 4 (gate_rule:narrow)"
    assert main(["explain", "g.tag", "--catalog", str(directory), "--platform", "cpu"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  fast: gated per call by gate_rule:narrow (asked once per argument shape)"
    )


def test_a_gated_op_keeps_a_bounded_number_of_shapes(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode's key length grows every step: the choices kept per shape are bounded, then asked again."""
    torch = pytest.importorskip("torch")
    from kcatalog.runtime import gates

    monkeypatch.setattr(gates, "GATED_SHAPES_KEPT", 3)
    workspace.module("bound_fast", "def tag(x):\n    return 'fast'\n")
    workspace.module("bound_ref", "def tag(x):\n    return 'ref'\n")
    workspace.module("bound_rule", GATE)
    backends = {"fast": {"target": "bound_fast:tag", "eligible": "bound_rule:narrow"}, "ref": "bound_ref:tag"}
    directory = workspace.write({"tag": workspace.op(backends, reference="ref")}, backends=["fast", "ref"])
    handle = kcatalog.load_catalog(directory, cache=False).op("g.tag")
    widths = (1, 2, 3, 4, 1)
    assert [handle(torch.zeros(2, w)) for w in widths] == ["fast"] * 5
    import bound_rule

    # the fourth shape found the cache full and emptied it: width 1 is asked again
    assert bound_rule.CALLS == [(2, 1), (2, 2), (2, 3), (2, 4), (2, 1)]


def test_a_gate_on_an_op_without_a_signature(workspace: Workspace) -> None:
    """An op that takes any arguments dispatches on its first (or declared) one, gated or not."""
    torch = pytest.importorskip("torch")
    workspace.module("anygate_fast", "def tag(*args, **kwargs):\n    return 'fast'\n")
    workspace.module("anygate_ref", "def tag(*args, **kwargs):\n    return 'ref'\n")
    workspace.module("anygate_rule", "def narrow(x, *rest, **kwargs):\n    return x.shape[-1] <= 4\n")
    backends = {"fast": {"target": "anygate_fast:tag", "eligible": "anygate_rule:narrow"}, "ref": "anygate_ref:tag"}
    op = workspace.op(backends, reference="ref")
    del op["signature"]
    directory = workspace.write({"tag": op}, backends=["fast", "ref"])
    handle = kcatalog.load_catalog(directory, cache=False).op("g.tag")
    assert [handle(torch.zeros(2, w), 1.0) for w in (4, 8)] == ["fast", "ref"]


def test_a_gate_target_is_checked_statically(workspace: Workspace) -> None:
    workspace.module("gate_fast2", "def tag(x):\n    return 'fast'\n")
    backends = {"fast": {"target": "gate_fast2:tag", "eligible": "gate_fast2:narow"}}
    directory = workspace.write({"tag": workspace.op(backends)}, backends=["fast"])
    _, diagnostics = kcatalog.check_catalog(directory)
    assert [d.code for d in diagnostics] == ["KC302"]
    assert "'gate_fast2:narow'" in diagnostics[0].message


def test_tune_writes_a_table_that_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "tuned"
    args = [
        "tune",
        "layernorm.rms_norm",
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--buckets",
        "1,2",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    assert f"wrote {out / 'cpu.yaml'}" in capsys.readouterr().out
    catalog = kcatalog.load_catalog(
        [kcatalog.load_catalog().info("layernorm.rms_norm").location.path, out / "cpu.yaml"]
    )
    table = catalog.tuning.table("layernorm.rms_norm", "cpu", "float32")
    assert table is not None
    assert [(b.low, b.high) for b in table.buckets] == [(1, 1), (2, None)]  # cut at isqrt(1 * 2) = 1
    assert all(set(b.medians_us) == {"torch", "aten"} and b.backend in b.medians_us for b in table.buckets)


def test_tune_writes_no_table_when_nothing_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A table of no ops is not a valid catalog file: written into a catalog's tuned/, it would break its loads."""
    args = ["tune", "layernorm.rms_norm", "--device", "cpu", "--dtype", "float32", "--buckets", "1"]
    assert main([*args, "--backend", "nosuch", "--out", str(tmp_path / "tuned")]) == 1
    assert "error: no backend ran; no table written" in capsys.readouterr().err
    assert not (tmp_path / "tuned").exists()


TUNE = ["tune", "layernorm.rms_norm", "--device", "cpu", "--dtype", "float32", "--buckets", "1,2,4,8"]


def test_ctrl_c_in_tune_keeps_the_finished_buckets_and_resume_times_only_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted after two of four buckets (Ctrl-C raises KeyboardInterrupt inside the timing), the table holds
    those two, whole and valid, and the command says how to go on; `--resume` times only the other two."""
    pytest.importorskip("torch")
    from kcatalog.tools import tuning
    from kcatalog.tools.inputs import describe
    from kcatalog.tools.timing import BenchResult, Job

    timed: list[tuple[str, str, int]] = []
    stop_at: list[int | None] = [10]  # jobs: 4 per bucket (2 decode widths x torch, aten); the 3rd bucket is cut

    def timer(job: Job, device: str, copy_gbps: float, seed: int) -> BenchResult:
        if len(timed) == stop_at[0]:
            raise KeyboardInterrupt
        timed.append(tuning.bucket_of(job))
        microseconds = tuning.tokens_of(job) * (1.0 if job.spec.backend == "aten" else 3.0)
        sizes = describe(job.sizes)
        return BenchResult(job.info.id, job.spec.backend, job.dtype, job.shapes, sizes, "wall-clock", microseconds, 0,
                           None, None, None)  # fmt: skip

    monkeypatch.setattr(tuning, "time_job", timer)
    out = tmp_path / "tuned"
    table = out / "cpu.yaml"
    argv = [*TUNE, "--out", str(out)]
    assert main(argv) == 130
    err = capsys.readouterr().err.splitlines()
    assert err[-2:] == [
        f"error: interrupted; {table} keeps the 2 buckets measured",
        f"go on with: {shlex.join(['kcatalog', *argv, '--resume'])}",
    ]
    assert sorted(p.name for p in out.iterdir()) == ["cpu.yaml"]  # no temporary left beside it
    shipped_manifest = kcatalog.load_catalog().info("layernorm.rms_norm").location.path
    kept = kcatalog.load_catalog([shipped_manifest, table], cache=False).tuning.table(
        "layernorm.rms_norm", "cpu", "float32"
    )
    assert kept is not None and [(b.low, b.high, b.backend) for b in kept.buckets] == [
        (1, 1, "aten"),
        (2, None, "aten"),
    ]

    assert main(argv) == 2  # a table is there: go on from it, or replace it, but say which
    assert capsys.readouterr().err.endswith(
        f"error: {table} exists: --resume times only the buckets it lacks, --force replaces it\n"
    )

    timed.clear()
    stop_at[0] = None
    assert main([*argv, "--resume"]) == 0
    # (op, dtype, table key, token count): an op declaring no table_key has the empty key
    assert sorted(set(timed)) == [("layernorm.rms_norm", "float32", (), 4), ("layernorm.rms_norm", "float32", (), 8)]
    assert len(timed) == 8
    assert f"resuming from {table}: 2 buckets kept, 8 of 16 jobs to time" in capsys.readouterr().out
    done = kcatalog.load_catalog([shipped_manifest, table], cache=False).tuning.table(
        "layernorm.rms_norm", "cpu", "float32"
    )
    assert done is not None and [(b.low, b.high) for b in done.buckets] == [(1, 1), (2, 2), (3, 5), (6, None)]
    assert [b.medians_us for b in done.buckets[:2]] == [b.medians_us for b in kept.buckets]  # kept, not re-timed


def test_resume_refuses_a_table_it_cannot_go_on_from(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Figures from another device would be compared with this one's; a table without the token counts measured
    (not written by tune) cannot say which buckets are done."""
    pytest.importorskip("torch")
    out = tmp_path / "tuned"
    out.mkdir()
    table = out / "cpu.yaml"
    row = "{tokens: [1, null], backend: aten, at: 1, medians_us: {aten: 1.0}}"
    text = f"kcatalog: 1\ntuned:\n  platform: cpu\n  provenance: {{device: gpu-box}}\n  ops:\n    layernorm.rms_norm:\n      float32:\n        - {row}\n"
    table.write_text(text)
    assert main([*TUNE, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"error: cannot resume from {table}: measured on gpu-box (cpu), this is cpu (cpu)"
    table.write_text(text.replace("gpu-box", "cpu").replace(" at: 1,", ""))
    assert main([*TUNE, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert (
        f"{table}:8:11: KC102 missing field 'at': the bucket records no token count (not written by `kcatalog tune`)"
        in err
    )
    assert err.splitlines()[-1] == f"error: cannot resume from {table}"


def test_a_cached_load_keeps_the_tables(tagged: Path, tmp_path: Path) -> None:
    cold = kcatalog.load_catalog(tagged, cache=tmp_path / "cache")
    warm = kcatalog.load_catalog(tagged, cache=tmp_path / "cache")
    assert warm.cache_status.outcome is kcatalog.CacheOutcome.HIT
    assert warm.tuning.table("g.tag", "cpu", "float32") == cold.tuning.table("g.tag", "cpu", "float32") is not None
    assert warm.digest == cold.digest


def test_a_table_may_choose_a_backend_priority_never_does(workspace: Workspace) -> None:
    for name in ("small", "big", "ref"):
        workspace.module(f"auto_{name}", f"def tag(x):\n    return {name!r}\n")
    backends: dict[str, object] = {name: f"auto_{name}:tag" for name in ("small", "ref")}
    backends["big"] = {"target": "auto_big:tag", "auto": False}  # chosen only by name, an override or a table
    op = workspace.op(backends, reference="ref")  # type: ignore[arg-type]
    directory = workspace.write({"tag": op}, backends=["big", "ref", "small"])
    workspace.files({"tuned/cpu.yaml": TABLE})
    catalog = kcatalog.load_catalog(directory, cache=False)
    assert catalog.select("g.tag", "cpu", "float32", tokens=9).chosen.backend == "big"  # type: ignore[union-attr]
    assert catalog.select("g.tag", "cpu", "float32", tokens=20).chosen.backend == "ref"  # type: ignore[union-attr]


def test_tune_times_a_backend_priority_never_picks_only_when_named(workspace: Workspace) -> None:
    """A table would choose an `auto: false` backend (one that compiles, say) with no one asking for it."""
    from kcatalog.platform import Platform
    from kcatalog.tools.tuning import tune_jobs

    catalog = kcatalog.load_catalog(cache=False)
    args = {"platform": Platform.parse("cuda:9.0"), "dtypes": ["bfloat16"], "buckets": [1]}
    jobs, notes = tune_jobs(catalog, ["activation.silu_and_mul"], **args)
    assert {job.spec.backend for job in jobs} == {"triton", "torch"}
    assert "activation.silu_and_mul [torch_compile]: not a candidate, auto: false (name it with --backend)" in notes
    jobs, _ = tune_jobs(catalog, ["activation.silu_and_mul"], backends=["torch_compile", "triton"], **args)
    assert {job.spec.backend for job in jobs} == {"torch_compile", "triton"}
