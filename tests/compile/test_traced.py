"""Traceable backends: under torch.compile a torch op registered with traced=True traces into a backend declared
`traceable: true`, so the graph holds what it runs (torch ops, and Triton kernels through torch.library.wrap_triton,
as triton_op's do) instead of one opaque op; every other backend, and every op registered by default
(traced=False), stays one node.

On the CPU a traceable torch backend shows the path (the graph after AOTAutograd, and the compiled result). Torch
traces no Triton kernel that the interpreter runs (TRITON_INTERPRET=1, tests/conftest.py): such a backend stays
opaque there, with a recorded reason. The Triton kernels in the graph are checked on the GPU
(benchmarks/model_gpu.py, and the cuda-marked test below).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

import kcatalog

if TYPE_CHECKING:
    from catalog_builder import Workspace

NORM = "(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor"
FUSED = "(x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6) -> None"


def _catalog(workspace: Workspace, prefer: str = "trace", **options: Any) -> kcatalog.Catalog:
    """Two shipped norms, each with its torch reference three ways: opaque ('ref'), traceable ('trace'), and its
    Triton kernel declared traceable ('tri'); `prefer` comes first in the priority."""

    def op(name: str, signature: str, **extra: Any) -> dict[str, Any]:
        reference = f"kcatalog.kernels.torch.layernorm:{name}"
        backends = {
            "ref": reference,
            "trace": {"target": reference, "traceable": True},
            "tri": {"target": f"kcatalog.kernels.triton.layernorm:{name}", "traceable": True, "requires": ["triton"]},
        }
        return workspace.op(backends, signature=signature, reference="ref", **extra)

    ops = {
        "norm": op("rms_norm", NORM, fake="reference"),
        "fused": op("fused_add_rms_norm", FUSED, mutates=["x", "residual"]),
    }
    backends = ["ref", "trace", "tri"]
    workspace.write(ops, backends=backends, priority=[prefer, *(b for b in backends if b != prefer)])
    return workspace.load(cache=False, **options)


def _compiled(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[torch.fx.GraphModule]]:
    """fn compiled with fullgraph=True, and the graphs AOTAutograd hands the compiler (run as they are)."""
    graphs: list[torch.fx.GraphModule] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward  # type: ignore[no-any-return]

    torch._dynamo.reset()
    return torch.compile(fn, backend=aot_autograd(fw_compiler=compiler), fullgraph=True), graphs


def _targets(graphs: list[torch.fx.GraphModule]) -> list[str]:
    return [str(node.target) for gm in graphs for node in gm.graph.nodes if node.op == "call_function"]


def _opaque(targets: list[str], namespace: str, name: str) -> bool:
    return f"{namespace}.{name}.default" in targets


def test_a_traceable_backend_is_traced_into_the_graph(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    ops = catalog.register_torch_ops(namespace, traced=True)
    x, w = torch.randn(5, 64), torch.rand(64) + 0.5
    compiled, graphs = _compiled(lambda x, w: ops["g.norm"](x, w) * 2)
    out = compiled(x, w)
    targets = _targets(graphs)
    assert not _opaque(targets, namespace, "g_norm") and "aten.rsqrt.default" in targets, targets
    torch.testing.assert_close(out, catalog.kernel("g.norm", "ref")(x, w) * 2, rtol=1e-5, atol=1e-5)


def test_an_in_place_op_traced_mutates_its_arguments_as_in_eager(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    ops = catalog.register_torch_ops(namespace, traced=True)
    x, r, w = torch.randn(3, 64), torch.randn(3, 64), torch.rand(64) + 0.5
    want_x, want_r = x.clone(), r.clone()
    catalog.kernel("g.fused", "ref")(want_x, want_r, w)
    compiled, graphs = _compiled(lambda x, r, w: ops["g.fused"](x, r, w))
    compiled(x, r, w)
    targets = _targets(graphs)
    assert not _opaque(targets, namespace, "g_fused") and "aten.rsqrt.default" in targets, targets
    torch.testing.assert_close((x, r), (want_x, want_r), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["traced=False", "an opaque backend chosen", "a Triton kernel interpreted"])
def test_otherwise_the_op_stays_one_node(
    workspace: Workspace, namespace: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    if how == "a Triton kernel interpreted":
        pytest.importorskip("triton")
    catalog = _catalog(
        workspace, prefer={"an opaque backend chosen": "ref", "a Triton kernel interpreted": "tri"}.get(how, "trace")
    )
    ops = catalog.register_torch_ops(namespace, traced=how != "traced=False")
    x, w = torch.randn(5, 64), torch.rand(64) + 0.5
    compiled, graphs = _compiled(lambda x, w: ops["g.norm"](x, w))
    with caplog.at_level(logging.WARNING, logger="kcatalog"):
        out = compiled(x, w)
    assert _opaque(_targets(graphs), namespace, "g_norm"), _targets(graphs)
    torch.testing.assert_close(out, catalog.kernel("g.norm", "ref")(x, w), rtol=1e-5, atol=1e-5)
    noted = [r.getMessage() for r in caplog.records if "stays opaque under torch.compile" in r.getMessage()]
    if how == "a Triton kernel interpreted":
        assert noted == [
            "op 'g.norm': backend 'tri' stays opaque under torch.compile: torch does not trace "
            "Triton kernels run by the interpreter (TRITON_INTERPRET=1)"
        ]
    else:
        assert noted == []


def test_registering_again_with_the_other_traced_is_refused(workspace: Workspace, namespace: str) -> None:
    catalog = _catalog(workspace)
    catalog.register_torch_ops(namespace, "g.norm", traced=True)
    with pytest.raises(kcatalog.CatalogError, match=r"g\.norm are already registered .* traced=True"):
        catalog.register_torch_ops(namespace, "g.norm", traced=False)


def test_explain_says_which_backends_torch_compile_traces(workspace: Workspace, namespace: str) -> None:
    unregistered = _catalog(workspace).describe_torch_op("g.norm", namespace).bindings[0]
    assert str(unregistered) == "CPU (cpu): trace opaque, traceable (float32)"  # what the default registers
    assert (
        str(_catalog(workspace, "ref").describe_torch_op("g.norm", namespace).bindings[0])
        == "CPU (cpu): ref opaque (float32)"
    )
    catalog = _catalog(workspace)
    catalog.register_torch_ops(namespace, "g.norm")
    assert (
        str(catalog.describe_torch_op("g.norm", namespace).bindings[0])
        == "CPU (cpu): trace opaque, traceable (float32)"
    )
    catalog.register_torch_ops(namespace + "_t", "g.norm", traced=True)
    assert (
        str(catalog.describe_torch_op("g.norm", namespace + "_t").bindings[0]) == "CPU (cpu): trace in graph (float32)"
    )


# Outside the interpreter (TRITON_INTERPRET=0) wrap_triton records a kernel without running it, so the CPU can
# trace each shipped traceable launch with symbolic sizes, as AOTAutograd does under torch.compile(dynamic=True).
TRACE_EVERY_LAUNCH = """\
import json, sys
from torch.fx.experimental.proxy_tensor import make_fx
import kcatalog
from kcatalog.kernels import tracing
from kcatalog.tools.inputs import build_call, samples_of, size_sets

catalog, found = kcatalog.load_catalog(cache=False), {}
for op in catalog:
    info = catalog.info(op)
    for spec in info.backends.values():
        if spec.traceable:
            env = size_sets(samples_of(info))[-1]
            call = build_call(info, samples_of(info), env, "float32", "cpu", seed=0)
            args, kwargs = call.invoke(lambda *a, **k: (a, k))
            kernel = spec.load()

            def traced(*args):
                with tracing.tracing():
                    return kernel(*args, **kwargs)

            graph = make_fx(traced, tracing_mode="symbolic")(*args)
            targets = [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]
            found[f"{op} {spec.backend}"] = sum("triton_kernel_wrapper" in target for target in targets)
json.dump(found, sys.stdout)
"""


def test_every_shipped_traceable_launch_traces_with_symbolic_sizes(workspace: Workspace) -> None:
    pytest.importorskip("triton")
    env = {**workspace.child_env(), "TRITON_INTERPRET": "0"}
    child = subprocess.run([sys.executable, "-c", TRACE_EVERY_LAUNCH], capture_output=True, text=True, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    found = json.loads(child.stdout)
    catalog = kcatalog.load_catalog(cache=False)
    declared = {f"{s.op} {s.backend}" for s in catalog.specs() if s.traceable}
    assert set(found) == declared and len(declared) == 18, found
    assert all(count >= 1 for count in found.values()), found


@pytest.mark.cuda
def test_on_a_gpu_the_shipped_triton_kernels_are_in_the_graph(shipped: kcatalog.Catalog) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if os.environ.get("TRITON_INTERPRET") == "1":  # torch traces only compiled kernels
        pytest.skip("needs compiled Triton kernels: run with KCATALOG_TEST_DEVICE=cuda")
    x, w = torch.randn(7, 4096, device="cuda", dtype=torch.bfloat16), torch.rand(4096, device="cuda") + 0.5
    op = shipped.register_torch_ops("kcatalog_traced", "layernorm.rms_norm", traced=True)["layernorm.rms_norm"]
    compiled, graphs = _compiled(lambda x, w: op(x, w.to(x.dtype)))
    out = compiled(x, w)
    targets = _targets(graphs)
    assert any("triton_kernel_wrapper" in t for t in targets)
    assert not _opaque(targets, "kcatalog_traced", "layernorm_rms_norm"), targets
    want = shipped.kernel("layernorm.rms_norm", "torch")(x, w.to(x.dtype))
    torch.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)
