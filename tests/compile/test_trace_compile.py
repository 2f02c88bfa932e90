"""Traces under torch.compile: a graph holds the same nodes traced or not (no graph break); an op that is one node
of the graph (its torch op) records each run, a backend traced into the graph (traced=True) records when it is
traced, a handle torch.compile traces through (no torch ops registered) records nothing; and a CUDA graph records
its capture, not its replays."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.testing import CompileCounter

import kcatalog
from kcatalog.runtime.trace_file import TraceShape, Via

if TYPE_CHECKING:
    from catalog_builder import Workspace

KERNELS = """\
def double(x, scale=1.0):
    return x * (2 * scale)
"""


def _catalog(workspace: Workspace) -> kcatalog.Catalog:
    workspace.module("kc_trc_k", KERNELS)
    backends = {"t": {"target": "kc_trc_k:double", "traceable": True}}
    op = workspace.op(backends, signature="(x: Tensor, scale: float = 1.0) -> Tensor", fake="reference")
    workspace.write({"op": op}, backends=["t"])
    return workspace.load(cache=False)


def _calls(trace: Any) -> list[tuple[Via, tuple[TraceShape, ...]]]:
    return [(entry.via, entry.shapes) for entry in trace.record.entries]


def _graph(fn: Any, *args: Any) -> tuple[int, str]:
    explained = torch._dynamo.explain(fn)(*args)
    return explained.graph_break_count, "\n".join(graph.code for graph in explained.graphs)


def test_a_node_of_a_compiled_graph_records_each_run(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    catalog.register_torch_ops(namespace)
    handle = catalog.op("g.op")
    counter = CompileCounter()
    compiled = torch.compile(lambda x: handle(x, 0.5) + 1, backend=counter, fullgraph=True, dynamic=True)
    compiled(torch.ones(3))
    with catalog.trace() as trace:
        for rows in (3, 5, 5):
            assert compiled(torch.ones(rows)).tolist() == [2.0] * rows
    assert _calls(trace) == [(Via.TORCH_OP, (TraceShape(3, 1, None), TraceShape(5, 2, None)))]
    assert counter.frame_count == 2  # opening the first trace swaps the handle's code: one recompilation, once
    compiled(torch.ones(3))
    with catalog.trace():
        compiled(torch.ones(3))
    assert counter.frame_count == 2  # each code has its compilation, kept


def test_a_graph_compiled_inside_a_trace_holds_the_same_nodes(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    catalog.register_torch_ops(namespace)
    handle = catalog.op("g.op")
    untraced = _graph(lambda x: handle(x, 0.5) + 1, torch.ones(4))
    with catalog.trace():
        traced = _graph(lambda x: handle(x, 0.5) + 1, torch.ones(4))
    assert traced == untraced
    assert untraced[0] == 0 and f"torch.ops.{namespace}.g_op.default(l_x_, 0.5)" in untraced[1]


def test_a_handle_traced_through_records_nothing(workspace: Workspace) -> None:
    """Without torch ops, torch.compile traces the handle into its kernel: no Python of it runs per call."""
    catalog = _catalog(workspace)
    handle = catalog.op("g.op")
    handle(torch.ones(2))  # the first call resolves, under locks torch.compile cannot trace
    untraced = _graph(lambda x: handle(x, 0.5) + 1, torch.ones(4))
    with catalog.trace() as trace:
        assert _graph(lambda x: handle(x, 0.5) + 1, torch.ones(4)) == untraced
        compiled = torch.compile(lambda x: handle(x, 0.5) + 1, backend="eager", fullgraph=True)
        assert compiled(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]
    assert untraced[0] == 0 and "torch.ops" not in untraced[1]
    assert trace.record.entries == ()


def test_a_backend_traced_into_the_graph_records_when_traced(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    catalog.register_torch_ops(namespace, traced=True)
    handle = catalog.op("g.op")
    torch._dynamo.reset()
    # AOTAutograd with a compiler of our own: no compile cache (a graph from a cache is never traced here)
    backend = aot_autograd(fw_compiler=lambda gm, example_inputs: gm.forward)
    with catalog.trace() as trace:
        compiled = torch.compile(lambda x: handle(x, 0.5) + 1, backend=backend, fullgraph=True)
        for _ in range(5):
            assert compiled(torch.ones(4)).tolist() == [2.0] * 4
    ((via, shapes),) = _calls(trace)
    assert via is Via.COMPILED and shapes[0].tokens == 4
    assert 1 <= shapes[0].calls < 5  # when traced (AOTAutograd may trace twice), not per run
    assert any("counts the times torch.compile traced the backend" in note for note in trace.record.notes)


@pytest.mark.cuda
def test_a_cuda_graph_records_its_capture_not_its_replays(workspace: Workspace, namespace: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    catalog = _catalog(workspace)
    handle = catalog.op("g.op")
    x = torch.ones(4, device="cuda")
    handle(x)  # resolved outside the capture
    graph = torch.cuda.CUDAGraph()
    with catalog.trace() as trace:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            handle(x)  # warm-up on a side stream, as capture needs
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            out = handle(x, 0.5)
        for _ in range(3):
            graph.replay()
    torch.cuda.synchronize()
    assert out.tolist() == [1.0] * 4
    assert sorted((e.via, e.calls) for e in trace.record.entries) == [(Via.CAPTURED, 1), (Via.HANDLE, 1)]
