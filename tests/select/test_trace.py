"""catalog.trace(): what the op handles ran, per op, platform, dtype, backend and leading dimension, with the
tuned bucket (or none) and the fallbacks; the untraced code left as it is; nested traces, `use()` blocks, gates,
threads; the file, merged by every process that writes it (KCATALOG_TRACE)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import kcatalog
from kcatalog import CatalogError
from kcatalog.runtime.trace_file import Fallback, TraceRecord, TraceShape, Via

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
        - {tokens: [5, 16], backend: big, medians_us: {big: 3.0, small: 4.5}}
        - {tokens: [33, null], backend: small, medians_us: {small: 9.0, big: 9.5}}
"""


@pytest.fixture
def tagged(workspace: Workspace) -> kcatalog.Catalog:
    """g.tag on the CPU: three backends that say which ran, a tuned table for float32 with a gap [17, 32]."""
    for name in ("small", "big", "ref"):
        workspace.module(f"trace_{name}", f"def tag(x):\n    return {name!r}\n")
    backends = {name: f"trace_{name}:tag" for name in ("small", "big", "ref")}
    op = workspace.op(backends, reference="ref", dtypes=("float32", "float64"))
    workspace.write({"tag": op}, backends=["ref", "small", "big"])
    workspace.files({"tuned/cpu.yaml": TABLE})
    return workspace.load(cache=False)


def shapes(record: TraceRecord, backend: str, dtype: str = "float32") -> dict[int | None, tuple[int, Any]]:
    """tokens -> (calls, tuned bucket) of the entries of g.tag run by `backend` (one per bucket: each is decided
    by its own)."""
    entries = [e for e in record.entry("g.tag", dtype) if e.backend == backend]
    return {s.tokens: (s.calls, s.bucket) for e in entries for s in e.shapes}


def test_a_trace_counts_calls_by_backend_dtype_and_leading_dimension(tagged: kcatalog.Catalog) -> None:
    handle = tagged.op("g.tag")
    handle(torch.zeros(3, 2))  # before the trace: not counted
    with tagged.trace() as trace:
        for tokens in (1, 1, 4, 5, 16, 16, 16, 17, 40):
            handle(torch.zeros(tokens, 2))
        handle(torch.zeros(2, 2, dtype=torch.float64))
    handle(torch.zeros(3, 2))  # after: not counted
    record = trace.record
    assert shapes(record, "small") == {1: (2, (1, 4)), 4: (1, (1, 4)), 40: (1, (33, None))}
    assert len([e for e in record.entries if e.backend == "small"]) == 2  # one per bucket
    assert shapes(record, "big") == {5: (1, (5, 16)), 16: (3, (5, 16))}
    assert shapes(record, "ref") == {17: (1, None)}  # the table's gap: untuned, priority decided
    assert shapes(record, "ref", "float64") == {2: (1, None)}  # no table for float64
    assert {e.via for e in record.entries} == {Via.HANDLE}
    assert all(e.platform == "cpu" for e in record.entries)
    ref = [e for e in record.entry("g.tag", "float32") if e.backend == "ref"][0]
    assert (ref.decided_by, ref.untuned, ref.calls) == ("catalog default priority", (17,), 1)
    tuned = [e for e in record.entry("g.tag", "float32") if e.backend == "big"][0]
    assert tuned.decided_by == "tuned table for cpu float32 T∈[5, 16]: big 3.0 µs vs small 4.5 µs"
    assert record.processes[0].pid == os.getpid() and record.catalogs == (tagged.digest,)


def test_tracing_off_runs_the_handles_own_code(tagged: kcatalog.Catalog) -> None:
    handle = tagged.op("g.tag")
    own = handle.__code__
    with tagged.trace() as trace:
        assert handle.__code__ is not own  # the recording twin, swapped in
        assert handle(torch.zeros(5, 2)) == "big"
    assert handle.__code__ is own
    assert shapes(trace.record, "big") == {5: (1, (5, 16))}
    with pytest.raises(RuntimeError, match="^a Trace is opened once"):
        with trace:
            pass


def test_a_handle_made_while_a_trace_is_open_records(workspace: Workspace) -> None:
    workspace.module("trace_late", "def double(x):\n    return x * 2\n")
    workspace.write({"op": workspace.op({"t": "trace_late:double"})}, backends=["t"])
    catalog = workspace.load(cache=False)
    with catalog.trace() as trace:
        handle = catalog.op("g.op")
        handle(torch.ones(3))
        handle(torch.ones(()))  # 0-dimensional: no leading dimension
    (entry,) = trace.record.entries
    assert [(s.tokens, s.calls) for s in entry.shapes] == [(None, 1), (3, 1)]
    assert handle(torch.ones(2)).tolist() == [2.0, 2.0]


# Leading dimensions a site's list of counts does not hold from the start: 0 (an empty batch, apart from a
# 0-dimensional tensor), past the list as it starts (1024), up to and past the longest it grows to (1 << 15).
SIZES = (0, 0, 3, 1025, 1025, 1 << 15, (1 << 15) + 1, 70_000)


def test_every_leading_dimension_is_counted_apart(workspace: Workspace) -> None:
    workspace.module("trace_dims", "def double(x):\n    return x * 2\n")
    workspace.write({"op": workspace.op({"t": "trace_dims:double"})}, backends=["t"])
    catalog = workspace.load(cache=False)
    handle = catalog.op("g.op")
    with catalog.trace() as trace:
        handle(torch.ones(()))
        for tokens in SIZES:
            handle(torch.ones(tokens))
    (entry,) = trace.record.entries
    assert {s.tokens: s.calls for s in entry.shapes} == {
        None: 1, 0: 2, 3: 1, 1025: 2, 1 << 15: 1, (1 << 15) + 1: 1, 70_000: 1
    }  # fmt: skip


def test_every_leading_dimension_of_a_tuned_op_is_counted_apart(tagged: kcatalog.Catalog) -> None:
    handle = tagged.op("g.tag")
    with tagged.trace() as trace:
        for tokens in SIZES:
            handle(torch.zeros(tokens, 2))
    counted = {**shapes(trace.record, "small"), **shapes(trace.record, "ref")}
    big = (33, None)
    assert counted == {
        0: (2, None), 3: (1, (1, 4)), 1025: (2, big), 1 << 15: (1, big), (1 << 15) + 1: (1, big), 70_000: (1, big)
    }  # fmt: skip


def test_nested_traces_each_count_their_own_block(tagged: kcatalog.Catalog) -> None:
    handle = tagged.op("g.tag")
    with tagged.trace() as outer:
        handle(torch.zeros(1, 2))
        with tagged.trace() as inner:
            handle(torch.zeros(1, 2))
            handle(torch.zeros(5, 2))
        handle(torch.zeros(1, 2))
    assert shapes(inner.record, "small") == {1: (1, (1, 4))}
    assert shapes(outer.record, "small") == {1: (3, (1, 4))}
    assert shapes(outer.record, "big") == {5: (1, (5, 16))}
    with tagged.trace() as again:  # a new recording starts from nothing
        handle(torch.zeros(1, 2))
    assert shapes(again.record, "small") == {1: (1, (1, 4))}


def test_a_record_is_there_once_the_block_ends(tagged: kcatalog.Catalog) -> None:
    with tagged.trace() as trace:
        with pytest.raises(RuntimeError, match="^the trace is still open"):
            trace.record  # noqa: B018


def test_calls_inside_a_use_block_are_recorded_with_the_override(tagged: kcatalog.Catalog) -> None:
    handle = tagged.op("g.tag")
    with tagged.trace() as trace:
        with tagged.use({"g.tag": "big"}):
            assert handle(torch.zeros(1, 2)) == "big"
    (entry,) = trace.record.entries
    assert (entry.backend, entry.decided_by, entry.shapes) == (
        "big",
        "override use() g.tag=big",
        (TraceShape(1, 1, (1, 4)),),
    )


def test_a_fallback_is_recorded_with_its_reason(workspace: Workspace, caplog: pytest.LogCaptureFixture) -> None:
    workspace.module("trace_broken", "raise ImportError('no such library')\n\n\ndef tag(x):\n    return 'fast'\n")
    workspace.module("trace_fine", "def tag(x):\n    return 'fine'\n")
    op = workspace.op({"fast": "trace_broken:tag", "fine": "trace_fine:tag"}, reference="fine")
    workspace.write({"tag": op}, backends=["fast", "fine"])
    catalog = workspace.load(cache=False)
    with catalog.trace() as trace:
        assert catalog.op("g.tag")(torch.zeros(2, 2)) == "fine"
    (entry,) = trace.record.entries
    assert entry.backend == "fine"
    assert entry.fallbacks == (
        Fallback("fast", "import failed", "import failed on first use: ImportError: no such library"),
    )


def test_gated_calls_are_recorded_per_shape(workspace: Workspace) -> None:
    workspace.module("trace_gate_fast", "def tag(x):\n    return 'fast'\n")
    workspace.module("trace_gate_ref", "def tag(x):\n    return 'ref'\n")
    workspace.module("trace_gate", "def narrow(x):\n    return True if x.shape[-1] <= 4 else 'too wide'\n")
    backends = {"fast": {"target": "trace_gate_fast:tag", "eligible": "trace_gate:narrow"}, "ref": "trace_gate_ref:tag"}
    workspace.write({"tag": workspace.op(backends, reference="ref")}, backends=["fast", "ref"])
    catalog = workspace.load(cache=False)
    handle = catalog.op("g.tag")
    with catalog.trace() as trace:
        assert [handle(torch.zeros(2, w)) for w in (4, 8, 4)] == ["fast", "ref", "fast"]
    fast, ref = trace.record.entries
    assert (fast.backend, fast.shapes, fast.fallbacks) == ("fast", (TraceShape(2, 2, None),), ())
    assert (ref.backend, ref.shapes) == ("ref", (TraceShape(2, 1, None),))
    assert ref.fallbacks == (Fallback("fast", "gate", "not eligible for this call: too wide (trace_gate:narrow)"),)


def test_every_call_of_many_threads_is_counted(tagged: kcatalog.Catalog) -> None:
    handle = tagged.op("g.tag")
    x = torch.zeros(5, 2)
    handle(x)
    start = threading.Barrier(8)

    def calls() -> None:
        start.wait()
        for _ in range(5000):
            handle(x)

    with tagged.trace() as trace:
        threads = [threading.Thread(target=calls) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert shapes(trace.record, "big") == {5: (40_000, (5, 16))}


def test_a_trace_file_is_merged_into_not_overwritten(tagged: kcatalog.Catalog, tmp_path: Path) -> None:
    handle = tagged.op("g.tag")
    path = tmp_path / "trace.json"
    for tokens in (1, 5):
        with tagged.trace(path):
            handle(torch.zeros(tokens, 2))
            handle(torch.zeros(1, 2))
    record = TraceRecord.from_dict(json.loads(path.read_text()))
    assert shapes(record, "small") == {1: (3, (1, 4))}
    assert shapes(record, "big") == {5: (1, (5, 16))}
    assert [p.pid for p in record.processes] == [os.getpid()]  # both blocks: one process
    assert record.to_json() == path.read_text()


def test_a_path_with_pid_gets_a_file_per_process(tagged: kcatalog.Catalog, tmp_path: Path) -> None:
    with tagged.trace(tmp_path / "traces" / "{pid}-{rank}.json"):
        tagged.op("g.tag")(torch.zeros(1, 2))
    written = [p.name for p in (tmp_path / "traces").iterdir() if not p.name.startswith(".")]
    assert written == [f"{os.getpid()}-0.json"]  # the directory made


def test_a_file_that_is_no_trace_is_left_as_it_was(tagged: kcatalog.Catalog, tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text('{"mine": true}\n')
    with pytest.raises(
        CatalogError, match=r"notes\.json holds no kcatalog trace \(not a kcatalog trace .*not overwritten$"
    ):
        with tagged.trace(path):
            tagged.op("g.tag")(torch.zeros(1, 2))
    assert path.read_text() == '{"mine": true}\n'
    with pytest.raises(CatalogError, match=r"^trace path .*: only \{pid\} and \{rank\} can be filled in"):
        with tagged.trace(tmp_path / "{host}.json"):
            pass


CHILD = """
import sys, torch, kcatalog
catalog = kcatalog.load_catalog([sys.argv[1]], cache=False)
handle = catalog.op("g.tag")
for _ in range(int(sys.argv[2])):
    handle(torch.zeros(5, 2))
"""


def test_processes_tracing_into_one_file_add_up(tagged: kcatalog.Catalog, workspace: Workspace, tmp_path: Path) -> None:
    """KCATALOG_TRACE=FILE in several processes at once (the ranks of a job): one file, every call counted."""
    path = tmp_path / "ranks.json"
    env = {**workspace.child_env(), "KCATALOG_TRACE": str(path)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(workspace.catalog_dir), str(calls)],
            env={**env, "RANK": str(rank)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, calls in enumerate((10, 20, 30))
    ]
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    record = TraceRecord.from_dict(json.loads(path.read_text()))
    assert shapes(record, "big") == {5: (60, (5, 16))}
    assert sorted(p.rank for p in record.processes) == [0, 1, 2]


WRITER = """
import sys, time
from pathlib import Path
from kcatalog.runtime.trace_file import TraceEntry, TraceProcess, TraceRecord, TraceShape, Via, write_trace
path, start, rank = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
shape = TraceShape(7, 1, None)
while not start.exists():
    time.sleep(0.001)
for i in range(25):
    entry = TraceEntry("g.op", "cpu", "float32", "t", Via.HANDLE, "priority", (), (shape,))
    write_trace(path, TraceRecord((entry,), (TraceProcess(rank, rank, "a", "b"),)))
"""


def test_processes_writing_one_file_at_once_lose_no_write(workspace: Workspace, tmp_path: Path) -> None:
    """Four processes each merging 25 traces into one file as fast as they can: every call is there (the lock
    beside the file orders the read-merge-replace of each write; the file is replaced whole, write/atomic.py)."""
    path, start = tmp_path / "traces" / "shared.json", tmp_path / "start"
    env = workspace.child_env()
    children = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(start), str(rank)], env=env,
                         stderr=subprocess.PIPE, text=True)
        for rank in range(4)
    ]  # fmt: skip
    start.touch()
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    record = TraceRecord.from_dict(json.loads(path.read_text()))
    assert [(s.tokens, s.calls) for e in record.entries for s in e.shapes] == [(7, 100)]
    assert sorted(p.rank for p in record.processes) == [0, 1, 2, 3]
    assert sorted(p.name for p in path.parent.iterdir()) == [".shared.json.lock", "shared.json"]  # no temporary


def test_a_process_that_ran_nothing_writes_nothing(workspace: Workspace, tmp_path: Path) -> None:
    path = tmp_path / "idle.json"
    workspace.minimal()
    code = f"import kcatalog; kcatalog.load_catalog([{str(workspace.catalog_dir)!r}], cache=False)"
    env = {**workspace.child_env(), "KCATALOG_TRACE": str(path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert not path.exists()
