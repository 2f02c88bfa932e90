"""Gemma's (1 + weight) RMSNorm: the torch reference against float64 and transformers' own formula, the Triton
kernel (under TRITON_INTERPRET=1, tests/conftest.py) against the reference: single pass, multi-row tiles, the
chunked path for wide rows, strided rows, 3-D inputs."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from kcatalog.kernels.torch import layernorm as ref
from kcatalog.testing import check_close

triton_gn = pytest.importorskip("kcatalog.kernels.triton.gemma_norm")

MANIFEST = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalog" / "layernorm.yaml").read_text())
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]


def tol(dtype: torch.dtype) -> float:
    return float(MANIFEST["ops"]["gemma_rms_norm"]["tolerance"][str(dtype).removeprefix("torch.")])


def randn(shape: tuple[int, ...], dtype: torch.dtype, *key: object, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(zlib.crc32(repr((shape, dtype, key)).encode()))
    return (torch.randn(shape, generator=g) * scale).to(dtype)


@pytest.fixture
def packed() -> Iterator[None]:
    """Many short rows to a program (few interpreter programs, multi-row tiles, a clamped tail tile)."""
    with triton_gn.TUNING.override(programs_per_sm=0, row_tile=16384, max_rows_per_program=128):
        yield


def test_reference_against_float64_and_transformers_formula() -> None:
    x = torch.randn(7, 300, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w = torch.randn(300, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 0.3
    expected = x / (x.square().mean(-1, keepdim=True) + 1e-6).sqrt() * (1 + w)
    check_close("gemma ref", ref.gemma_rms_norm(x.float(), w.float()), expected, 1e-6)
    # GemmaRMSNorm.forward: float32 norm, times (1 + weight) in float32, cast once; bit for bit in bf16
    xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
    xf = xb.float()
    hf = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + wb.float())).type_as(xb)
    assert torch.equal(ref.gemma_rms_norm(xb, wb, 1e-6), hf)
    # a zero weight is the plain RMSNorm with weight one, not zero
    check_close(
        "zero weight", ref.gemma_rms_norm(x.float(), torch.zeros(300)), ref.rms_norm(x.float(), torch.ones(300)), 1e-6
    )


@pytest.mark.usefixtures("packed")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rows,width", [(1, 7), (37, 1000), (300, 64), (3, 4099)])
def test_triton_gemma_rms_norm(rows: int, width: int, dtype: torch.dtype) -> None:
    x = randn((rows, width), dtype, "x", scale=2.0)
    w = randn((width,), dtype, "w", scale=0.5)
    x0, w0 = x.clone(), w.clone()
    out = triton_gn.gemma_rms_norm(x, w, 1e-6)
    assert out.shape == x.shape and out.dtype == dtype
    check_close(f"gemma {rows}x{width} {dtype}", out, ref.gemma_rms_norm(x, w, 1e-6), tol(dtype))
    assert torch.equal(x, x0) and torch.equal(w, w0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_triton_chunked_wide_rows(dtype: torch.dtype) -> None:
    """Rows wider than max_fused_width (forced small here) take the two-pass chunked loop."""
    x = randn((3, 1000), dtype, "wide", scale=2.0)
    w = randn((1000,), dtype, "wide-w", scale=0.5)
    with triton_gn.TUNING.override(max_fused_width=512, loop_block=256):
        assert not triton_gn.TUNING.get().config(1000, 3, 1).single_pass
        check_close("gemma chunked", triton_gn.gemma_rms_norm(x, w), ref.gemma_rms_norm(x, w), tol(dtype))


@pytest.mark.usefixtures("packed")
def test_triton_strided_and_3d_inputs() -> None:
    """x = big[:, :n] is read in place; a [B, T, H, D] head-norm input (Qwen3/Gemma3 q_norm) keeps its shape."""
    big = randn((45, 1200), torch.bfloat16, "big")
    x, w = big[:, :1000], randn((1000,), torch.bfloat16, "w")
    check_close("strided", triton_gn.gemma_rms_norm(x, w), ref.gemma_rms_norm(x, w), tol(torch.bfloat16))
    heads = randn((2, 3, 4, 64), torch.float32, "heads")
    hw = randn((64,), torch.float32, "hw")
    out = triton_gn.gemma_rms_norm(heads, hw)
    assert out.shape == heads.shape
    check_close("heads", out, ref.gemma_rms_norm(heads, hw), tol(torch.float32))


def test_triton_rejects_a_weight_of_the_wrong_size() -> None:
    with pytest.raises(ValueError, match=r"^weight has 5 elements, expected 4 \(the last dim of x\)$"):
        triton_gn.gemma_rms_norm(torch.ones(2, 4), torch.ones(5))
