"""torch.library.opcheck passes for every shipped op on the CPU, with each of its torch and aten backends bound
(through a scoped override, which the torch op honours at call time): schema (mutations declared, no aliasing),
fake tensors against the real kernel, and AOT dispatch with static and dynamic shapes."""

from __future__ import annotations

import pytest
import torch

import kcatalog
from kcatalog.tools.inputs import build_call, samples_of, size_sets

CASES = [
    (op, backend)
    for op in kcatalog.load_catalog(cache=False).ops()
    for backend in ("torch", "aten")
    if backend in kcatalog.load_catalog(cache=False).info(op).backends
]


@pytest.mark.parametrize(("op", "backend"), CASES, ids=[f"{op}-{backend}" for op, backend in CASES])
def test_opcheck(shipped: kcatalog.Catalog, op: str, backend: str) -> None:
    info = shipped.info(op)
    samples = samples_of(info)
    assert samples is not None
    torch_op = shipped.torch_op(op)
    kernel = shipped.kernel(op, backend=backend)
    # Two of the declared sample sizes, one dtype each (opcheck traces several times per call): the first, and the
    # first with no size of 1, which dynamic shapes would specialise.
    sizes = size_sets(samples)
    wide = next(env for env in sizes if all(type(v) is not int or v > 1 for v in env.values()))
    for index, (env, dtype) in enumerate(zip((sizes[0], wide), ("float32", "bfloat16"))):
        call = build_call(info, samples, env, dtype, "cpu", seed=index)
        args, kwargs = call.invoke(lambda *a, **k: (a, k))
        with shipped.use({op: backend}):
            torch.library.opcheck(torch_op, args, kwargs)
            # ...and the op ran this backend: the same result as calling its kernel.
            ours, theirs = call.clone(), call.clone()
            got, want = ours.invoke(torch_op), theirs.invoke(kernel)
        pairs = [*zip(_outputs(got), _outputs(want)), *zip(ours.tensors().values(), theirs.tensors().values())]
        assert pairs and all(torch.equal(a.float(), b.float()) for a, b in pairs), (op, backend, env, dtype)


def _outputs(result: object) -> list[torch.Tensor]:
    return [] if result is None else list(result) if isinstance(result, tuple) else [result]  # type: ignore[list-item]


@pytest.mark.parametrize("backend", ["torch", "sdpa_flash", "sdpa_math"])
@pytest.mark.parametrize("batch", [1, 3])
def test_attention_output_has_the_fakes_strides(shipped: kcatalog.Catalog, backend: str, batch: int) -> None:
    # A torch op's output must have its fake's strides (the reference run on fake tensors), or torch.compile fails
    # at run time; one sequence's [T, H, D] out of SDPA's [1, H, T, D] is a non-contiguous view unless copied.
    generator = torch.Generator().manual_seed(1)
    heads = 4
    q = torch.randn(batch * 5, heads, 16, generator=generator)
    k, v = (torch.randn(batch, 2, 9, 16, generator=generator) for _ in range(2))
    op = shipped.torch_op("attention.decode")
    with shipped.use({"attention.decode": backend}):
        assert op(q, k, v).is_contiguous()
        torch.library.opcheck(op, (q, k, v), {})
