"""Op handles under torch.compile: once the op is a torch op, a handle traced by Dynamo is one node of the graph,
the registered op, with no graph break and no recompilation per call; in eager mode it still calls the kernel."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import torch
from torch._dynamo.testing import CompileCounter

import kcatalog

if TYPE_CHECKING:
    from catalog_builder import Workspace

KERNELS = """\
calls = []


def double(x, scale=1.0):
    calls.append(tuple(x.shape))
    return x * (2 * scale)
"""


def _catalog(workspace: Workspace) -> kcatalog.Catalog:
    workspace.module("kc_thc_k", KERNELS)
    op = workspace.op({"t": "kc_thc_k:double"}, signature="(x: Tensor, scale: float = 1.0) -> Tensor", fake="reference")
    workspace.write({"op": op}, backends=["t"])
    return workspace.load()


def _graph_code(fn: Any, *args: Any) -> tuple[int, str]:
    explained = torch._dynamo.explain(fn)(*args)
    return explained.graph_break_count, "\n".join(graph.code for graph in explained.graphs)


def test_a_handle_under_compile_is_the_registered_torch_op(shipped: kcatalog.Catalog) -> None:
    rms_norm = shipped.op("layernorm.rms_norm")
    x, weight = torch.randn(4, 64), torch.rand(64) + 0.5
    breaks, code = _graph_code(lambda x, w: rms_norm(x, w) * 2, x, weight)
    assert breaks == 0
    assert "torch.ops.kcatalog.layernorm_rms_norm.default(l_x_, l_w_, 1e-06)" in code


def test_a_handle_made_before_registration_is_routed_once_registered(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    handle = catalog.op("g.op")
    _, traced_through = _graph_code(lambda x: handle(x, 0.5), torch.ones(2))
    assert "torch.ops" not in traced_through  # not registered: Dynamo traces the kernel itself
    catalog.register_torch_ops(namespace)
    _, routed = _graph_code(lambda x: handle(x, 0.5), torch.ones(2))
    assert f"torch.ops.{namespace}.g_op.default(l_x_, 0.5)" in routed
    sys.modules["kc_thc_k"].calls.clear()
    assert handle(torch.ones(3), 0.5).tolist() == [1.0, 1.0, 1.0]  # eager: the kernel, called directly
    assert sys.modules["kc_thc_k"].calls == [(3,)]


def test_catalog_op_inside_a_compiled_function(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    catalog.register_torch_ops(namespace)
    compiled = torch.compile(lambda x: catalog.op("g.op")(x) + 1, fullgraph=True, backend="eager")
    assert compiled(torch.ones(2)).tolist() == [3.0, 3.0]


def test_no_recompilation_per_call(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    catalog.register_torch_ops(namespace)
    handle = catalog.op("g.op")
    counter = CompileCounter()
    compiled = torch.compile(lambda x: handle(x) - 1, backend=counter, fullgraph=True, dynamic=True)
    for rows in (3, 5, 8, 13, 21):
        assert compiled(torch.ones(rows, 4)).shape == (rows, 4)
    assert counter.frame_count == 1
    with catalog.use({"g.op": "t"}):  # a scope opened after compiling changes nothing the graph guards on
        compiled(torch.ones(2, 4))
    assert counter.frame_count == 1
