"""The Triton rms_norm backward under TRITON_INTERPRET=1 (tests/conftest.py), on tiny shapes: dx and dweight against
float64 autograd of the forward's torch reference, within the manifest's tolerance, spread over several programs (so
that the weight gradient's per-program partial sums are reduced), strided rows included; and bitwise repeatable."""

from __future__ import annotations

import pytest
import torch

from kcatalog.kernels.torch import layernorm as ref
from kcatalog.kernels.torch import norm_backward as ref_backward

triton_backward = pytest.importorskip("kcatalog.kernels.triton.norm_backward")

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}  # catalog/layernorm.yaml's


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(got.double() - want) / torch.linalg.vector_norm(want))


def _autograd(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    ref.rms_norm(x64, w64).backward(g.double())
    assert x64.grad is not None and w64.grad is not None
    return x64.grad, w64.grad


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(("rows", "width", "programs"), [(5, 64, 2), (7, 100, 3), (1, 48, 1)])
def test_gradients_match_float64_autograd(dtype: torch.dtype, rows: int, width: int, programs: int) -> None:
    generator = torch.Generator().manual_seed(rows * 1000 + width)
    x = torch.randn(rows, width, generator=generator).to(dtype)
    w = (torch.rand(width, generator=generator) + 0.5).to(dtype)
    g = torch.randn(rows, width, generator=generator).to(dtype)
    want_dx, want_dw = _autograd(g, x, w)
    with triton_backward.TUNING.override(sms=programs):
        dx, dw = triton_backward.rms_norm_backward(g, x, w)
        again = triton_backward.rms_norm_backward(g, x, w)
    assert (dx.dtype, dw.dtype, dx.shape, dw.shape) == (dtype, dtype, x.shape, w.shape)
    assert _relative(dx, want_dx) <= TOLERANCE[dtype] and _relative(dw, want_dw) <= TOLERANCE[dtype]
    assert torch.equal(dx, again[0]) and torch.equal(dw, again[1])  # no atomics: deterministic
    ref_dx, ref_dw = ref_backward.rms_norm_backward(g, x, w)
    assert _relative(ref_dx, want_dx) <= TOLERANCE[dtype] and _relative(ref_dw, want_dw) <= TOLERANCE[dtype]


def test_strided_rows_and_a_leading_batch() -> None:
    generator = torch.Generator().manual_seed(7)
    big = torch.randn(2, 3, 80, generator=generator)
    x = big[..., :64]  # rows 80 apart: only the last dim is unit-stride
    w = torch.rand(64, generator=generator) + 0.5
    g = torch.randn(2, 3, 64, generator=generator)
    want_dx, want_dw = _autograd(g, x, w)
    with triton_backward.TUNING.override(sms=4):
        dx, dw = triton_backward.rms_norm_backward(g, x, w)
    assert dx.shape == x.shape and _relative(dx, want_dx) <= 1e-5 and _relative(dw, want_dw) <= 1e-5
