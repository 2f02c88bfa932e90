"""`kcatalog trace show` (several files merged, JSON, bad files as one located error each), `kcatalog report --html
--trace` (cells coloured by calls, ops that never ran faded) and `kcatalog tune --from-trace` (the untuned shapes
only, other platforms left out)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import kcatalog
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

torch = pytest.importorskip("torch")

TABLE = """\
kcatalog: 1
tuned:
  platform: cpu
  provenance: {device: cpu}
  ops:
    g.tag:
      float32:
        - {tokens: [1, 4], backend: small, medians_us: {small: 1.0, big: 2.0}}
"""

Result = tuple[int, str, str]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def invoke(*argv: str) -> Result:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


@pytest.fixture
def tagged(workspace: Workspace) -> Path:
    """g.tag (small, big, ref; samples, so that tune can time it) tuned on the CPU for T in [1, 4]; g.idle never
    runs."""
    for name in ("small", "big", "ref"):
        workspace.module(f"tracecli_{name}", f"def tag(x):\n    return x * {len(name)}\n")
    backends = {name: f"tracecli_{name}:tag" for name in ("small", "big", "ref")}
    samples = {"sizes": {"T": [1, 3]}, "args": {"x": {"shape": ["T", 4]}}, "decode": {"T": [1]}}
    ops = {
        "tag": workspace.op(backends, reference="ref", samples=samples),
        "idle": workspace.op({"ref": "tracecli_ref:tag"}),
    }
    directory = workspace.write(ops, backends=["ref", "small", "big"])
    workspace.files({"tuned/cpu.yaml": TABLE})
    return directory


def traced(directory: Path, path: Path, *rows: int) -> None:
    catalog = kcatalog.load_catalog(directory, cache=False)
    with catalog.trace(path):
        for tokens in rows:
            catalog.op("g.tag")(torch.ones(tokens, 4))


def test_trace_show_merges_files_and_marks_untuned_shapes(
    run: Callable[..., Result], tagged: Path, tmp_path: Path
) -> None:
    traced(tagged, tmp_path / "a.json", 1, 1, 9)
    traced(tagged, tmp_path / "b.json", 1, 9, 9, 9)
    code, out, err = run("trace", "show", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("trace of 1 process, ")  # both files: this process
    assert lines[2:5] == [
        "op     platform  dtype    backend  via     calls  calls by leading dimension (* untuned)",
        "g.tag  cpu       float32  ref      handle  4      9:4*",
        "g.tag  cpu       float32  small    handle  3      1:3",
    ]
    assert "  g.tag cpu float32 small: by tuned table for cpu float32 T∈[1, 4]: small 1.0 µs vs big 2.0 µs" in lines
    assert lines[-1] == "2 entries, 7 calls; 1 shape ran untuned (`kcatalog tune --from-trace` times them)"
    code, out, _ = run("trace", "show", str(tmp_path / "a.json"), "--output-format", "json")
    assert code == 0 and json.loads(out) == json.loads((tmp_path / "a.json").read_text())


def test_trace_show_limits_the_shapes_shown(run: Callable[..., Result], tagged: Path, tmp_path: Path) -> None:
    traced(tagged, tmp_path / "t.json", *range(5, 17))
    _, out, _ = run("trace", "show", str(tmp_path / "t.json"), "--shapes", "3")
    assert "5:1* 6:1* 7:1* (+9 more)" in out
    _, out, _ = run("trace", "show", str(tmp_path / "t.json"), "--shapes", "0")
    assert " 16:1*\n" in out


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "{not json",
            "bad.json: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        ('{"kcatalog": 1}', "bad.json is not a kcatalog trace:\n  bad.json: trace: Field required"),
        (
            '{"kcatalog": 1, "trace": {"entries": [{"op": "g.tag", "platform": "cpu", "dtype": "float32", '
            '"backend": "ref", "via": "handle", "decided_by": "x", "calls": 2, "shapes": [{"tokens": 3, "calls": 1, '
            '"bucket": null}]}]}}',
            "bad.json is not a kcatalog trace:\n  bad.json: trace.entries[0]: Value error, calls is 2, its shapes' "
            "calls add up to 1",
        ),
    ],
    ids=["not-json", "no-trace", "calls-differ"],
)
def test_a_bad_trace_is_one_located_error(
    run: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, error: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("bad.json").write_text(text)
    assert run("trace", "show", "bad.json") == (1, "", f"error: {error}\n")


def test_a_missing_trace_is_one_error(
    run: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run("trace", "show", "none.json") == (
        1,
        "",
        "error: cannot read the trace none.json: No such file or directory\n",
    )


def test_report_colours_the_cells_that_ran(run: Callable[..., Result], tagged: Path, tmp_path: Path) -> None:
    from test_report_html import Cells

    traced(tagged, tmp_path / "t.json", 1, 1, 9)
    page = tmp_path / "page.html"
    code, out, _ = run("report", str(tagged), "--html", str(page), "--trace", str(tmp_path / "t.json"))
    assert (code, out) == (0, f"wrote {page} (2 ops x 1 platforms)\n")
    text = page.read_text()
    cells = Cells()
    cells.feed(text)
    small_class, small_title, _ = cells.cells[("g.tag", "small", "cpu")]
    ref_class, ref_title, _ = cells.cells[("g.tag", "ref", "cpu")]
    big_class, _, _ = cells.cells[("g.tag", "big", "cpu")]
    assert "ran" in small_class.split() and small_title.endswith("; ran 2 calls in the trace")
    assert "ran" in ref_class.split() and ref_title.endswith("; ran 1 call in the trace")
    assert "ran" not in big_class.split()
    assert '<tr data-op="g.idle" class="idle">' in text and '<tr data-op="g.tag">' in text
    plain = tmp_path / "plain.html"
    assert run("report", str(tagged), "--html", str(plain))[0] == 0
    unused = Cells()
    unused.feed(plain.read_text())
    assert not any("ran" in cell[0].split() for cell in unused.cells.values())
    assert 'class="idle"' not in plain.read_text()


def test_tune_from_trace_times_only_the_untuned_shapes(
    run: Callable[..., Result], tagged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    traced(tagged, tmp_path / "t.json", 1, 1, 4, 9, 30)  # 1 and 4 in the table's bucket; 9 and 30 untuned
    code, out, err = run(
        "tune", "g.tag", str(tagged), "--from-trace", str(tmp_path / "t.json"), "--device", "cpu", "--out", "tuned"
    )
    assert code == 0, err
    assert out.splitlines()[0] == "from the trace: 2 shapes that ran untuned on cpu, 6 jobs"
    assert [line.split()[:3] for line in out.splitlines()[2:4]] == [
        ["g.tag", "float32", "9"],
        ["g.tag", "float32", "30"],
    ]


def test_tune_from_trace_with_nothing_untuned_times_nothing(
    run: Callable[..., Result], tagged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    traced(tagged, tmp_path / "t.json", 1, 2)
    code, out, _ = run("tune", str(tagged), "--from-trace", "t.json", "--device", "cpu", "--out", "tuned")
    assert (code, out) == (0, "the trace ran no shape untuned on cpu that can be timed: nothing to tune\n")
    assert not (tmp_path / "tuned").exists()
    code, _, err = run("tune", str(tagged), "--from-trace", "t.json", "--buckets", "1", "--out", "tuned")
    assert code == 2 and err.splitlines()[-1] == "error: argument --buckets: not allowed with argument --from-trace"


def test_tune_from_trace_leaves_other_platforms_out(
    run: Callable[..., Result], tagged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    traced(tagged, tmp_path / "t.json", 9)
    data = json.loads((tmp_path / "t.json").read_text())
    data["trace"]["entries"][0]["platform"] = "cuda:9.0"
    (tmp_path / "t.json").write_text(json.dumps(data))
    code, out, _ = run("tune", str(tagged), "--from-trace", str(tmp_path / "t.json"), "--device", "cpu", "--out", "x")
    assert code == 0
    assert out.splitlines() == [
        "note: the trace's calls on cuda:9.0 are not timed here (cpu)",
        "the trace ran no shape untuned on cpu that can be timed: nothing to tune",
    ]


def test_tune_from_trace_resumes_and_refuses_check(
    run: Callable[..., Result], tagged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--from-trace writes a table as tune does: one there needs --resume (which times only what it lacks) or
    --force; --check and --update time a table's own buckets, so they take no trace."""
    monkeypatch.chdir(tmp_path)
    traced(tagged, tmp_path / "t.json", 9)
    tune = ("tune", "g.tag", str(tagged), "--from-trace", "t.json", "--device", "cpu", "--out", "tuned")
    assert run(*tune)[0] == 0
    code, _, err = run(*tune)
    assert code == 2 and "tuned/cpu.yaml exists: --resume times only the buckets it lacks" in err
    code, out, err = run(*tune, "--resume")
    assert code == 0, err
    assert "resuming from tuned/cpu.yaml: 1 bucket kept, 0 of 3 jobs to time" in out
    assert out.splitlines()[-1] == "tuned/cpu.yaml already holds every bucket; nothing timed"
    code, _, err = run("tune", str(tagged), "--from-trace", "t.json", "--device", "cpu", "--check", "tuned/cpu.yaml")
    assert code == 2
    assert (
        err.splitlines()[-1] == "error: --check and --update time the TABLE's own buckets: no --from-trace or --buckets"
    )
