"""Fake implementations: `fake: reference` runs the op's torch reference on fake tensors (so the shipped references
that declare it must be meta-safe), `fake: module:attr` is a target like any other, and ops that return nothing
need none."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pytest
import torch

import kcatalog
from kcatalog.tools.inputs import Call, build_call, samples_of, size_sets

if TYPE_CHECKING:
    from catalog_builder import Workspace


def _outputs(result: Any) -> list[torch.Tensor]:
    return [] if result is None else list(result) if isinstance(result, tuple) else [result]


def test_every_shipped_op_has_a_fake_or_returns_nothing(shipped: kcatalog.Catalog) -> None:
    for op in shipped:
        info = shipped.info(op)
        assert info.torch_problems == ()
        assert info.torch_schema is not None
        has_fake = info.fake_reference or info.fake is not None
        assert has_fake != info.torch_schema.endswith("-> ()"), op


@pytest.mark.parametrize("op", kcatalog.load_catalog(cache=False).ops())
def test_the_shipped_fakes_are_meta_safe(shipped: kcatalog.Catalog, op: str) -> None:
    """Run on meta tensors, each op's fake (its reference, for `fake: reference`; else its fake target) gives the
    shapes and dtypes the reference gives on real ones (or, for an op that returns nothing, runs at all)."""
    info = shipped.info(op)
    samples = samples_of(info)
    assert samples is not None
    reference = info.backends[info.reference].load()
    fake_of = reference if info.fake_reference or info.fake is None else info.fake.load()
    for index, env in enumerate(size_sets(samples)[:4]):
        for dtype in ("float32", "bfloat16"):
            call = build_call(info, samples, env, dtype, "cpu", seed=index)
            meta = Call(
                {name: v.to("meta") if isinstance(v, torch.Tensor) else v for name, v in call.kwargs.items()},
                call.positional,
            )
            real, fake = _outputs(call.invoke(reference)), _outputs(meta.invoke(fake_of))
            assert [(t.shape, t.dtype) for t in fake] == [(t.shape, t.dtype) for t in real], (op, env, dtype)
            assert all(t.device.type == "meta" for t in fake)


FAKES = """\
import torch

traced = []


def fake(x):
    traced.append(tuple(x.shape))
    return torch.empty_like(x)
"""


def _with_fake(
    workspace: Workspace, fake: str | None, signature: str = "(x: Tensor) -> Tensor", **extra: Any
) -> kcatalog.Catalog:
    """g.op, its kernel doubling x (or, returning nothing, adding 1 to it in place), with this fake; loaded."""
    workspace.module("kc_fakes_k", "def double(x):\n    return x * 2\n\n\ndef bump(x):\n    x.add_(1)\n")
    kernel = "kc_fakes_k:double" if signature.endswith("Tensor") else "kc_fakes_k:bump"
    declared = {} if fake is None else {"fake": fake}
    workspace.write({"op": workspace.op({"t": kernel}, signature=signature, **declared, **extra)}, backends=["t"])
    return workspace.load(allowed_modules=["kc_fakes_k", "kc_fakes_f"])


def test_a_fake_target_is_imported_when_torch_compile_first_traces(workspace: Workspace, namespace: str) -> None:
    workspace.module("kc_fakes_f", FAKES)
    catalog = _with_fake(workspace, "kc_fakes_f:fake")
    op = catalog.register_torch_ops(namespace)["g.op"]
    assert "kc_fakes_f" not in sys.modules
    compiled = torch.compile(lambda x: op(x) + 1, fullgraph=True, backend="aot_eager")
    assert compiled(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
    assert sys.modules["kc_fakes_f"].traced[0] == (3,)


def test_a_fake_target_is_checked_statically_at_load(workspace: Workspace) -> None:
    with pytest.raises(kcatalog.CatalogError) as excinfo:
        _with_fake(workspace, "kc_fakes_k:no_such_fake")
    assert [(d.code, d.location.line if d.location else 0) for d in excinfo.value.diagnostics] == [("KC302", 13)]


def test_a_fake_target_obeys_the_allow_list(workspace: Workspace) -> None:
    with pytest.raises(kcatalog.CatalogError, match=r"KC305 target 'os:getcwd' is outside the allowed modules"):
        _with_fake(workspace, "os:getcwd")


def test_an_op_that_returns_nothing_needs_only_its_schema(workspace: Workspace, namespace: str) -> None:
    catalog = _with_fake(workspace, None, signature="(x: Tensor) -> None", mutates=["x"])
    op = catalog.register_torch_ops(namespace)["g.op"]

    def step(x: torch.Tensor) -> torch.Tensor:
        op(x)
        return x * 10

    x = torch.zeros(2)
    assert torch.compile(step, fullgraph=True, backend="aot_eager")(x).tolist() == [10.0, 10.0]
    assert x.tolist() == [1.0, 1.0]  # the mutation reaches the caller's tensor
