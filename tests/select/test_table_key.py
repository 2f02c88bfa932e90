"""Tables keyed by the op's shape (`table_key`): the key resolved at load, keyed tuned entries chosen per key by
selection, handles and torch ops, `tune` measuring per key, `explain --shape`, plans, stale keyed entries and the
report; an op without a table key as before."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

import kcatalog
from kcatalog.pyresolve import kernel_source
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

# x: [T, H] tokens by hidden; w: [E, H] per expert. The table key: E and H (T is the token count).
SAMPLES = {
    "sizes": {"T": [1], "E": [2, 4], "H": [8]},
    "args": {"x": {"shape": ["T", "H"]}, "w": {"shape": ["E", "H"]}},
    "decode": {"T": [1]},
}
SIGNATURE = "(x: Tensor, w: Tensor) -> Tensor"

TABLE = """\
kcatalog: 1
tuned:
  platform: cpu
  provenance: {device: cpu}
  ops:
    g.mix:
      float32:
        - key: {E: 2, H: 8}
          buckets:
            - {tokens: [1, 4], backend: a, medians_us: {a: 1.0, b: 2.0}}
            - {tokens: [5, null], backend: b, medians_us: {b: 1.0, a: 2.0}}
        - key: {E: 4, H: 8}
          buckets:
            - {tokens: [1, null], backend: b, medians_us: {b: 1.0, a: 3.0}}
"""


def keyed_op(workspace: Workspace, backends: dict[str, str], **extra: object) -> dict[str, object]:
    return workspace.op(backends, reference="ref", signature=SIGNATURE, samples=SAMPLES, table_key=["E", "H"], **extra)


@pytest.fixture
def mixed(workspace: Workspace) -> Path:
    """Op g.mix keyed by E and H, three backends that say which ran, and a table with two keys."""
    for name in ("a", "b", "ref"):
        workspace.module(f"mix_{name}", f"def mix(x, w):\n    return {name!r}\n")
    op = keyed_op(workspace, {name: f"mix_{name}:mix" for name in ("ref", "a", "b")})
    directory = workspace.write({"mix": op}, backends=["ref", "a", "b"])
    workspace.files({"tuned/cpu.yaml": TABLE})
    return directory


def test_a_key_name_no_argument_has_is_reported_where_it_is_written(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace.module("mix_ref", "def mix(x, w):\n    return 'ref'\n")
    op = keyed_op(workspace, {"ref": "mix_ref:mix"})
    op["table_key"] = ["E", "Hd", "T"]
    directory = workspace.write({"mix": op}, backends=["ref"])
    assert main(["validate", str(directory)]) == 1
    out = capsys.readouterr().out
    manifest = directory / "g.yaml"
    line = next(n for n, text in enumerate(manifest.read_text().splitlines(), 1) if text.startswith("    table_key:"))
    assert (
        "KC236 table_key of op 'g.mix' names 'Hd', which no tensor argument of its samples has as a dimension "
        "(did you mean 'H'?); dimensions: H (x[1]), E (w[0])"
    ) in out
    assert (
        "KC236 table_key of op 'g.mix' names 'T', the token count (x's leading dimension), which the buckets key "
        in out
    )
    assert f"g.yaml:{line + 2}:" in out  # each problem at its own item of the list


def test_selection_and_the_handle_choose_per_key(mixed: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch = pytest.importorskip("torch")
    catalog = kcatalog.load_catalog(mixed, cache=False)
    assert catalog.warnings == ()
    assert catalog.info("g.mix").key_names == ("E", "H")

    def chosen(key: tuple[int, ...] | None, tokens: int) -> str:
        return catalog.select("g.mix", "cpu", "float32", tokens=tokens, key=key).backend

    assert [chosen((2, 8), 1), chosen((2, 8), 5), chosen((4, 8), 1), chosen((4, 8), 100)] == ["a", "b", "b", "b"]
    assert chosen(None, 1) == "ref"  # no key given: no keyed entry applies
    missed = catalog.select("g.mix", "cpu", "float32", tokens=1, key=(3, 8))
    assert missed.backend == "ref"
    assert missed.notes == (
        "the tuned entries of op 'g.mix' on cpu float32 have no key E=3 H=8; priority decides "
        "(they have E=2 H=8, E=4 H=8)",
    )
    decided = catalog.select("g.mix", "cpu", "float32", tokens=5, key=(2, 8)).decided_by
    assert decided == "tuned table for cpu float32 E=2 H=8 T∈[5, ∞]: b 1.0 µs vs a 2.0 µs"

    mix = catalog.op("g.mix")
    assert "_kc_first_keyed" in mix.__code__.co_names  # the key is read per call only for a keyed op

    def run(tokens: int, experts: int, hidden: int = 8) -> str:
        result: str = mix(torch.zeros(tokens, hidden), torch.zeros(experts, hidden))
        return result

    assert [run(1, 2), run(4, 2), run(5, 2), run(1, 4), run(9, 4), run(1, 3), run(1, 2, hidden=16)] == [
        "a", "a", "b", "b", "b", "ref", "ref",
    ]  # fmt: skip
    assert mix(w=torch.zeros(2, 8), x=torch.zeros(6, 8)) == "b"  # by keyword as by position
    with catalog.use({"g.mix": "a"}):
        assert run(1, 4) == "a"  # a scope still decides above the table


def test_an_op_without_a_table_key_dispatches_as_before(workspace: Workspace) -> None:
    torch = pytest.importorskip("torch")
    for name in ("small", "big"):
        workspace.module(f"plain_{name}", f"def tag(x):\n    return {name!r}\n")
    op = workspace.op({"small": "plain_small:tag", "big": "plain_big:tag"})
    directory = workspace.write({"tag": op}, backends=["small", "big"])
    table = TABLE.replace("g.mix", "g.tag").split("        - key")[0] + (
        "        - {tokens: [1, 4], backend: big}\n        - {tokens: [5, null], backend: small}\n"
    )
    workspace.files({"tuned/cpu.yaml": table})
    catalog = kcatalog.load_catalog(directory, cache=False)
    tag = catalog.op("g.tag")
    assert "_kc_first_keyed" not in tag.__code__.co_names and "_kc_first_bucketed" in tag.__code__.co_names
    assert [tag(torch.zeros(1, 3)), tag(torch.zeros(5, 3))] == ["big", "small"]
    entry = catalog.tuning.table("g.tag", "cpu", "float32")
    assert entry is not None and entry.key == () and entry.label == "cpu float32"


def test_entries_whose_key_is_not_the_ops_are_reported(
    workspace: Workspace, mixed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = TABLE.replace("{E: 4, H: 8}", "{E: 4, Hid: 8}")
    workspace.files({"tuned/cpu.yaml": bad})
    assert main(["validate", str(mixed)]) == 1
    out = capsys.readouterr().out
    assert (
        "tuned/cpu.yaml:12:16: KC237 tuned entry key of op 'g.mix' lacks H and gives Hid, not in it "
        "(its table_key: E, H)"
    ) in out
    unkeyed = TABLE.split("        - key")[0] + "        - {tokens: [1, null], backend: a}\n"
    workspace.files({"tuned/cpu.yaml": unkeyed})
    assert main(["validate", str(mixed)]) == 1
    assert "KC237 op 'g.mix' is tuned per E, H (its table_key): each tuned entry gives key: {...}" in (
        capsys.readouterr().out
    )


SLEEPY = """\
import time


def mix(x, w):
    if w.shape[0] == {slow_at}:
        time.sleep(0.003)
    return x
"""


def test_tune_measures_per_key(workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    workspace.module("tk_a", SLEEPY.replace("{slow_at}", "4"))  # slow with 4 experts: fast with 2
    workspace.module("tk_b", SLEEPY.replace("{slow_at}", "2"))
    workspace.module("tk_ref", SLEEPY.replace("{slow_at}", "-1"))
    op = keyed_op(workspace, {"ref": "tk_ref:mix", "a": "tk_a:mix", "b": "tk_b:mix"})
    directory = workspace.write({"mix": op}, backends=["ref", "a", "b"])
    out = tmp_path / "tuned"
    argv = ["tune", "g.mix", str(directory), "--device", "cpu", "--dtype", "float32", "--buckets", "1,16",
            "--backend", "a", "--backend", "b", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr()
    written = yaml.safe_load((out / "cpu.yaml").read_text())["tuned"]
    entries = written["ops"]["g.mix"]["float32"]
    assert [(e["key"], [b["backend"] for b in e["buckets"]]) for e in entries] == [
        ({"E": 2, "H": 8}, ["a", "a"]),
        ({"E": 4, "H": 8}, ["b", "b"]),
    ]
    assert written["kernels"]["g.mix"] == {name: kernel_source(f"tk_{name}:mix").digest for name in ("a", "b")}
    catalog = kcatalog.load_catalog([directory, out / "cpu.yaml"], cache=False)
    assert catalog.warnings == ()
    assert catalog.tuning.keys("g.mix", "cpu", "float32") == ((2, 8), (4, 8))

    # --shape measures one key only (and --resume keeps the other's buckets)
    again = tmp_path / "again"
    assert main([*argv[:-1], str(again), "--shape", "E=4"]) == 0
    only = yaml.safe_load((again / "cpu.yaml").read_text())["tuned"]["ops"]["g.mix"]["float32"]
    assert [e["key"] for e in only] == [{"E": 4, "H": 8}]
    assert main([*argv, "--resume"]) == 0
    assert "nothing timed" in capsys.readouterr().out


def _explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["explain", "g.mix", "--platform", "cpu", "--dtype", "float32", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_explain_shows_the_choice_per_key_and_bucket(mixed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _explain(capsys, "--catalog", str(mixed), "--tokens", "5", "--shape", "E=2,H=8")
    assert code == 0
    assert out.splitlines()[0] == (
        "g.mix on cpu: b (mix_b:mix), by tuned table for cpu float32 E=2 H=8 T∈[5, ∞]: b 1.0 µs vs a 2.0 µs"
    )
    code, out = _explain(capsys, "--catalog", str(mixed), "--tokens", "5")
    assert "  at E=2 H=8: b, by tuned table for cpu float32 E=2 H=8 T∈[5, ∞]: b 1.0 µs vs a 2.0 µs" in out
    assert "  at E=4 H=8: b, by tuned table for cpu float32 E=4 H=8 T∈[1, ∞]: b 1.0 µs vs a 3.0 µs" in out
    code, out = _explain(capsys, "--catalog", str(mixed))
    assert (
        "  tuned table for cpu float32 E=2 H=8: T∈[1, 4] a, T∈[5, ∞] b (--tokens N picks one, --shape K=V,... a key)"
    ) in out
    assert "  tuned table for cpu float32 E=4 H=8: T∈[1, ∞] b (" in out
    code, out = _explain(capsys, "--catalog", str(mixed), "--tokens", "1", "--shape", "E=3,H=8")
    assert "note: the tuned entries of op 'g.mix' on cpu float32 have no key E=3 H=8; priority decides" in out
    assert out.startswith("g.mix on cpu: ref (mix_ref:mix), by catalog default priority")
    code, out = _explain(capsys, "--catalog", str(mixed), "--shape", "E=2")
    assert code == 2 and "error: --shape lacks H: op 'g.mix' is keyed by E, H (its table_key)" in out
    code, out = _explain(capsys, "--catalog", str(mixed), "--shape", "E=two")
    assert code == 2 and "'E=two' is not NAME=SIZE" in out


def test_a_plan_pins_per_key(mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    plan = tmp_path / "plan.yaml"
    assert main(["plan", "--platform", "cpu", "--catalog", str(mixed), "--out", str(plan)]) == 0
    text = plan.read_text()
    assert (
        "    g.mix:\n      float32:\n"
        "        - {key: {E: 2, H: 8}, buckets: [{tokens: [1, 4], backend: a}, {tokens: [5, null], backend: b}]}\n"
        "        - {key: {E: 4, H: 8}, backend: b}\n"
    ) in text
    capsys.readouterr()
    assert main(["plan", "--check", str(plan), "--platform", "cpu", "--catalog", str(mixed)]) == 0
    assert capsys.readouterr().out == "Plan holds.\n"

    # Pinned without the table: the plan alone decides per key.
    (mixed / "tuned" / "cpu.yaml").unlink()
    catalog = kcatalog.load_catalog(mixed, cache=False, plan=plan)
    mix = catalog.op("g.mix")
    assert [mix(torch.zeros(1, 8), torch.zeros(2, 8)), mix(torch.zeros(7, 8), torch.zeros(2, 8))] == ["a", "b"]
    assert mix(torch.zeros(1, 8), torch.zeros(4, 8)) == "b"
    assert catalog.select("g.mix", "cpu", "float32", tokens=1, key=(4, 8)).decided_by == f"plan {plan} E=4 H=8"
    capsys.readouterr()
    assert main(["plan", "--check", str(plan), "--platform", "cpu", "--catalog", str(mixed)]) == 1  # no table now
    assert capsys.readouterr().out.splitlines()[0] == (
        "g.mix float32: plan has E=2 H=8: a for T∈[1, 4], b for T∈[5, ∞]; E=4 H=8: b, this machine chooses ref on cpu"
    )

    bad = text.replace("{key: {E: 4, H: 8}", "{key: {E: 4}")
    plan.write_text(bad)
    assert main(["plan", "--check", str(plan), "--platform", "cpu", "--catalog", str(mixed)]) == 1
    assert "KC244 plan entry key of op 'g.mix' lacks H (its table_key: E, H)" in capsys.readouterr().err


def test_a_stale_keyed_entry_is_named_with_its_key(
    mixed: Path, workspace: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("torch")
    digests = {name: kernel_source(f"mix_{name}:mix").digest for name in ("a", "b")}
    kernels = f'  kernels:\n    g.mix: {{a: "{"0" * 16}", b: "{digests["b"]}"}}\n'
    workspace.files({"tuned/cpu.yaml": TABLE.replace("  ops:\n", kernels + "  ops:\n")})
    catalog = kcatalog.load_catalog(mixed, cache=False)
    stale = [str(w) for w in catalog.warnings]
    assert [w.split(": KC235 ")[1] for w in stale] == [
        "warning: tuned entry g.mix float32 E=2 H=8 on cpu is stale: the kernel source of backend 'a' "
        "(mix_a:mix) changed since the table was measured; ignored: priority decides (tuned: {stale: ignore}); "
        "measure it again with `kcatalog tune`",
        "warning: tuned entry g.mix float32 E=4 H=8 on cpu is stale: the kernel source of backend 'a' "
        "(mix_a:mix) changed since the table was measured; ignored: priority decides (tuned: {stale: ignore}); "
        "measure it again with `kcatalog tune`",
    ]
    selection = catalog.select("g.mix", "cpu", "float32", tokens=1, key=(2, 8))
    assert selection.backend == "ref"
    assert selection.notes[0].startswith("tuned entry g.mix float32 E=2 H=8 on cpu is stale: ")


def test_the_report_lists_keyed_entries(mixed: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page), str(mixed), "--platform", "cpu"]) == 0
    html = page.read_text()
    assert '<tr data-tuned-op="g.mix" data-key="E=2 H=8">' in html
    assert "<td>E=4 H=8</td><td>T∈[1, ∞] b</td><td>no</td>" in html


def test_a_trace_counts_a_keyed_op_per_key_with_its_choice(mixed: Path) -> None:
    """catalog.trace() records a keyed op's calls (the slow way: its choice asked once per dtype, key and leading
    dimension) with the backend each key and token count ran and the keyed bucket that covered it."""
    torch = pytest.importorskip("torch")
    catalog = kcatalog.load_catalog(mixed, cache=False)
    mix = catalog.op("g.mix")
    with catalog.trace() as trace:
        for tokens, experts in ((1, 2), (1, 2), (5, 2), (3, 4), (1, 3)):
            assert mix(torch.zeros(tokens, 8), torch.zeros(experts, 8)) == {2: "a" if tokens < 5 else "b", 4: "b"}.get(
                experts, "ref"
            )
    found = {(e.backend, s.tokens, s.bucket): s.calls for e in trace.record.entries for s in e.shapes}
    assert found == {("a", 1, (1, 4)): 2, ("b", 5, (5, None)): 1, ("b", 3, (1, None)): 1, ("ref", 1, None): 1}
    decided = {e.backend: e.decided_by for e in trace.record.entries if e.backend == "b" and e.shapes[0].tokens == 5}
    assert decided == {"b": "tuned table for cpu float32 E=2 H=8 T∈[5, ∞]: b 1.0 µs vs a 2.0 µs"}
    assert mix.__code__ is not None and "_kc_count_keyed" not in mix.__code__.co_names  # off: its own code again
