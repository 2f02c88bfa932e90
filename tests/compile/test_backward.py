"""Autograd through the registered torch ops: an op's `backward:` op is registered with it and runs in autograd;
the gradients equal float64 autograd of the forward's reference; torch.compile (fullgraph) traces forward and
backward as the two custom ops; torch.library.opcheck passes, its autograd tests included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch

import kcatalog
from kcatalog.tools import gradients
from kcatalog.tools.inputs import build_call, samples_of, size_sets

if TYPE_CHECKING:
    from catalog_builder import Workspace

SHIPPED = kcatalog.load_catalog(cache=False)
WITH_BACKWARD = [op for op in SHIPPED.ops() if SHIPPED.info(op).backward is not None]


def test_rms_norm_has_its_backward() -> None:
    assert "layernorm.rms_norm" in WITH_BACKWARD
    backward = SHIPPED.info("layernorm.rms_norm").backward
    assert backward is not None and (backward.op, backward.grads, backward.saves) == (
        "layernorm.rms_norm_backward",
        ("x", "weight"),
        (),
    )


def _sample(op: str, dtype: str, seed: int = 0) -> tuple[tuple[Any, ...], dict[str, Any]]:
    info = SHIPPED.info(op)
    samples = samples_of(info)
    assert samples is not None
    wide = next(env for env in size_sets(samples) if all(type(v) is not int or v > 1 for v in env.values()))
    call = build_call(info, samples, wide, dtype, "cpu", seed)
    assert info.backward is not None
    for name in info.backward.grads:
        call.kwargs[name].requires_grad_(True)
    return call.invoke(lambda *a, **k: (a, k))


# One op here: the shipped catalog's conformance tests (tests/conformance/test_shipped_catalog.py) check every op's.
@pytest.mark.parametrize("op", ["layernorm.rms_norm"])
@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_gradients_through_the_torch_op_equal_float64_autograd_of_the_reference(
    shipped: kcatalog.Catalog, op: str, dtype: str
) -> None:
    info = shipped.info(op)
    cases, _ = gradients.plan_gradients(shipped, [op], device="cpu", dtypes=[dtype], base_seed=3)
    assert {case.backend for case in cases} == {gradients.CATALOG, gradients.GRADCHECK, "torch"}
    results = list(gradients.run_gradients(cases, shipped, "cpu"))
    assert results and all(r.passed for r in results), [r.message for r in results if not r.passed]
    tolerance = info.tolerance[dtype]
    assert all(r.relative_error is not None and r.relative_error <= tolerance for r in results if r.via == "torch op")


WRONG = """
from kcatalog.kernels.torch.norm_backward import rms_norm_backward


def halved(grad, x, weight, eps=1e-6):
    dx, dw = rms_norm_backward(grad, x, weight, eps)
    return dx, dw * 0.5
"""


def test_a_wrong_backward_fails_the_gradient_checks(workspace: Workspace, namespace: str) -> None:
    workspace.module("kc_bw_wrong", WRONG)
    shipped = SHIPPED.info("layernorm.rms_norm")
    forward = workspace.op(
        {"torch": "kcatalog.kernels.torch.layernorm:rms_norm"},
        signature=shipped.signature,
        fake="reference",
        tolerance={"float32": 1e-5},
        samples={"sizes": {"T": [3], "H": [8]}, "args": {"x": {"shape": ["T", "H"]}, "weight": {"shape": ["H"]}}},
        backward={"op": "rms_backward", "grads": ["x", "weight"]},
    )
    backward = workspace.op(
        {"torch": "kc_bw_wrong:halved"},
        signature=SHIPPED.info("layernorm.rms_norm_backward").signature,
        fake="reference",
    )
    workspace.write({"rms": forward, "rms_backward": backward}, backends=["torch"])
    catalog = workspace.load(cache=False)
    cases, _ = gradients.plan_gradients(catalog, ["g.rms"], device="cpu", base_seed=3)
    results = list(gradients.run_gradients(cases, catalog, "cpu", namespace))
    assert [(r.backend, r.passed) for r in results] == [
        (gradients.CATALOG, False),
        ("torch", False),
        (gradients.GRADCHECK, False),
    ]
    assert results[0].message.startswith("relative error ") and results[0].relative_error > 0.1  # type: ignore[operator]
    assert results[2].message.startswith("gradcheck: Jacobian mismatch")


@pytest.mark.parametrize("op", WITH_BACKWARD)
def test_opcheck_with_gradients(shipped: kcatalog.Catalog, op: str) -> None:
    args, kwargs = _sample(op, "float32")
    result = torch.library.opcheck(shipped.torch_op(op), args, kwargs)
    assert set(result.values()) == {"SUCCESS"} and len(result) == 4  # schema, autograd, fake tensors, AOT dispatch
    backward = shipped.info(op).backward
    assert backward is not None
    assert shipped.torch_op(backward.op) is not None  # registered with its forward


def test_compile_fullgraph_traces_forward_and_backward_as_the_two_ops(shipped: kcatalog.Catalog) -> None:
    from torch._functorch.aot_autograd import aot_module_simplified

    graphs: list[str] = []

    def capture(gm: torch.fx.GraphModule, example: Any) -> Any:
        from functorch.compile import make_boxed_func

        graphs.append(str(gm.graph))
        return make_boxed_func(gm.forward)

    def backend(gm: torch.fx.GraphModule, example: Any) -> Any:
        return aot_module_simplified(gm, example, fw_compiler=capture, bw_compiler=capture)

    rms_norm = shipped.torch_op("layernorm.rms_norm")

    def loss(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return (rms_norm(x, weight, 1e-6) * 3).sum()

    (x, weight, _), _ = _sample("layernorm.rms_norm", "float32")
    compiled = torch.compile(loss, fullgraph=True, backend=backend)
    compiled(x, weight).backward()
    assert len(graphs) == 2
    forward_graph, backward_graph = graphs
    assert "kcatalog.layernorm_rms_norm.default" in forward_graph
    assert "rms_norm_backward" not in forward_graph
    assert "kcatalog.layernorm_rms_norm_backward.default" in backward_graph
    x64, w64 = x.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    from kcatalog.kernels.torch.layernorm import rms_norm as reference

    (reference(x64, w64) * 3).sum().backward()
    assert x.grad is not None and weight.grad is not None
    assert torch.allclose(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-6)  # type: ignore[arg-type]
    assert torch.allclose(weight.grad.double(), w64.grad, rtol=1e-5, atol=1e-5)  # type: ignore[arg-type]


KERNELS = """
import torch


def scaled(x, *, scale=2.0):
    return x * scale, x.abs()


def scaled_backward(grad, x, *, scale=2.0, magnitude):
    assert not magnitude.requires_grad
    return grad * scale + 0 * magnitude
"""


def test_saved_outputs_and_keyword_only_parameters(workspace: Workspace, namespace: str) -> None:
    """A forward with a keyword-only parameter and a saved output: autograd hands the saved output to the backward
    (not differentiable), the keyword-only parameter by keyword, and no gradient to what `grads` leaves out."""
    workspace.module("kc_bw_k", KERNELS)
    signature = "(x: Tensor, *, scale: float = 2.0) -> tuple[Tensor, Tensor]"
    forward = workspace.op(
        {"torch": "kc_bw_k:scaled"},
        signature=signature,
        fake="reference",
        backward={"op": "scaled_backward", "grads": ["x"], "saves": ["return.1"]},
    )
    backward = workspace.op(
        {"torch": "kc_bw_k:scaled_backward"},
        signature="(grad: Tensor, x: Tensor, *, scale: float = 2.0, magnitude: Tensor) -> Tensor",
        fake="reference",
    )
    workspace.write({"scaled": forward, "scaled_backward": backward}, backends=["torch"])
    catalog = workspace.load(cache=False)
    ops = catalog.register_torch_ops(namespace, "g.scaled")
    assert list(ops) == ["g.scaled"] and catalog.torch_op("g.scaled_backward", namespace) is not None
    x = torch.randn(4, 3, requires_grad=True)
    y, magnitude = ops["g.scaled"](x, scale=3.0)
    assert not magnitude.requires_grad
    y.sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.full_like(x, 3.0))


SUMMED = """
import torch


def squared_sum(a, b, scale):
    s = a + b
    return s * s * scale, s


def squared_sum_backward(grad_sq, grad_s, scale, s):
    grad = 2 * scale * s * grad_sq + grad_s
    return grad, grad.clone()
"""


def test_autograd_keeps_only_the_inputs_and_outputs_the_backward_takes(workspace: Workspace, namespace: str) -> None:
    """`inputs: [scale]` and `outputs: [return.1]`: autograd keeps the forward's second output (still
    differentiable: its gradient reaches the backward) and the float, never the input tensors a and b."""
    workspace.module("kc_bw_sum", SUMMED)
    forward = workspace.op(
        {"torch": "kc_bw_sum:squared_sum"},
        signature="(a: Tensor, b: Tensor, scale: float) -> tuple[Tensor, Tensor]",
        fake="reference",
        backward={"op": "squared_sum_backward", "grads": ["a", "b"], "inputs": ["scale"], "outputs": ["return.1"]},
    )
    backward = workspace.op(
        {"torch": "kc_bw_sum:squared_sum_backward"},
        signature="(grad_sq: Tensor, grad_s: Tensor, scale: float, s: Tensor) -> tuple[Tensor, Tensor]",
        fake="reference",
    )
    workspace.write({"squared_sum": forward, "squared_sum_backward": backward}, backends=["torch"])
    catalog = workspace.load(cache=False)
    linked = catalog.info("g.squared_sum").backward
    assert linked is not None and (linked.inputs, linked.outputs, linked.saves) == (("scale",), (1,), ())
    op = catalog.register_torch_ops(namespace, "g.squared_sum")["g.squared_sum"]
    a, b = (torch.randn(3, 4, requires_grad=True) for _ in range(2))
    packed: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        squared, summed = op(a, b, 1.5)
    assert [t.untyped_storage().data_ptr() for t in packed] == [summed.untyped_storage().data_ptr()]
    assert summed.requires_grad
    (squared.sum() + (summed * 3).sum()).backward()
    want = 2 * 1.5 * (a + b).detach() + 3
    assert a.grad is not None and b.grad is not None
    assert torch.allclose(a.grad, want) and torch.allclose(b.grad, want)
    result = torch.library.opcheck(op, (a.detach().requires_grad_(), b.detach().requires_grad_(), 1.5))
    assert set(result.values()) == {"SUCCESS"}


def test_the_shipped_rotary_and_residual_norm_keep_only_what_their_backward_reads() -> None:
    rotary, add_norm = SHIPPED.info("attention.apply_rotary").backward, SHIPPED.info("layernorm.add_rms_norm").backward
    assert rotary is not None and (rotary.inputs, rotary.outputs) == (("cos", "sin"), ())
    assert add_norm is not None and (add_norm.inputs, add_norm.outputs) == (("weight", "eps"), (1,))
    rms = SHIPPED.info("layernorm.rms_norm").backward
    assert rms is not None and (rms.inputs, rms.outputs) == (("x", "weight", "eps"), ())  # left out: all of them


def test_explain_says_which_backward_op_and_backend_run(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from kcatalog.tools.cli import main

    assert main(["explain", "layernorm.rms_norm", "--platform", "cuda:9.0", "--dtype", "bfloat16"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  backward:")]
    assert lines == [
        "  backward: layernorm.rms_norm_backward runs triton (kcatalog.kernels.triton.norm_backward:rms_norm_backward), "
        "by catalog default priority; gradients of x, weight"
    ]
    assert main(["explain", "layernorm.rms_norm", "--platform", "cpu", "--output-format", "json"]) == 0
    backward = json.loads(capsys.readouterr().out)[0]["backward"]
    assert {k: backward[k] for k in ("op", "grads", "saves", "chosen")} == {
        "op": "layernorm.rms_norm_backward",
        "grads": ["x", "weight"],
        "saves": [],
        "chosen": "torch",
    }
    assert main(["explain", "layernorm.add_rms_norm", "--platform", "cpu"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  backward:"))
    assert line.endswith("; gradients of x, residual, weight; keeps weight, eps, return.1")
    assert main(["explain", "attention.apply_rotary", "--platform", "cpu", "--output-format", "json"]) == 0
    backward = json.loads(capsys.readouterr().out)[0]["backward"]
    assert (backward["inputs"], backward["outputs"], backward["saves"]) == (["cos", "sin"], [], [])
    assert main(["explain", "quantization.per_token_quant_fp8", "--platform", "cpu", "--output-format", "json"]) == 0
    assert "backward" not in json.loads(capsys.readouterr().out)[0]


def test_the_readmes_backward_example_is_the_shipped_format() -> None:
    import re
    from pathlib import Path

    import yaml

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- backward-example -->\n```yaml\n(.*?)```", readme, re.DOTALL)
    assert block is not None
    ops = yaml.safe_load(block[1])
    for op, decl in ops.items():
        assert decl["signature"] == SHIPPED.info(f"layernorm.{op}").signature
    backward = SHIPPED.info("layernorm.rms_norm").backward
    assert backward is not None
    assert ops["rms_norm"]["backward"] == {"op": backward.op.partition(".")[2], "grads": list(backward.grads)}


def test_gradient_checks_of_another_catalog_run_where_the_shipped_one_holds_the_namespace(
    shipped: kcatalog.Catalog,
) -> None:
    # `shipped` registered torch.ops.kcatalog.* (as kernelize does); a second Catalog of the same files cannot take
    # those names, so its checks register under a spare namespace instead of all failing.
    other = kcatalog.load_catalog(cache=False)
    cases, _ = gradients.plan_gradients(other, ["layernorm.rms_norm"], device="cpu", dtypes=["float32"], base_seed=5)
    results = [r for r in gradients.run_gradients(cases, other, "cpu") if r.via == "torch op"]
    assert results and all(r.passed for r in results), [r.message for r in results if not r.passed]


def test_kcatalog_test_leaves_the_kcatalog_namespace_to_the_shipped_catalog(tmp_path: Path) -> None:
    # `kcatalog test` run in a process first (as the pytest plugin or a notebook does), then kernelize's Catalog
    # registering torch.ops.kcatalog.*: the checks registered under a namespace of their own, not 'kcatalog'.
    code = (
        "from kcatalog.tools.cli import main\n"
        "assert main(['test', 'layernorm.rms_norm', '--backend', 'torch', '--dtype', 'float32']) == 0\n"
        "from kcatalog.integrations.kernelize import default_catalog\n"
        "default_catalog().register_torch_ops()\n"
    )
    env = {**os.environ, "KCATALOG_CACHE_DIR": str(tmp_path / "cache")}
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert child.returncode == 0, child.stderr[-2000:]
