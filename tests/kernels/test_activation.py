"""Tests for the activation group (silu_and_mul, gelu_and_mul).

Triton kernels run under TRITON_INTERPRET=1 (tests/conftest.py) against the torch reference. Most
cases set ``programs_per_sm=0`` (TUNING.override) so short rows stack several to a program (fewer
interpreter programs, and multi-row tiles with a ragged last tile get exercised); one test keeps the
shipped config of an H200.
Shapes stay small (rows x d <= ~64k outputs). The interpreter truncates float32 -> bfloat16 (the GPU
rounds to nearest), so bf16 errors here are ~4e-3, inside the 1e-2 tolerance.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest
import torch
import yaml

from kcatalog.kernels.torch import activation as ref
from kcatalog.testing import check_close

triton_act = pytest.importorskip("kcatalog.kernels.triton.activation")

MANIFEST = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalog" / "activation.yaml").read_text())
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]
# (op name in the manifest, kwargs): gelu_and_mul is tested in both approximations.
OPS = [("silu_and_mul", {}), ("gelu_and_mul", {"approximate": "none"}), ("gelu_and_mul", {"approximate": "tanh"})]
OP_IDS = ["silu", "gelu", "gelu_tanh"]


def tol(op: str, dtype: torch.dtype) -> float:
    """The manifest's tolerance for `op` at `dtype`."""
    return float(MANIFEST["ops"][op]["tolerance"][str(dtype).removeprefix("torch.")])


def gen(*key: object) -> torch.Generator:
    """A generator seeded from the case, so every case gets its own reproducible inputs."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def randn(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator, scale: float = 2.0) -> torch.Tensor:
    """Random normal values in `dtype` (scale 2 reaches well into both tails of the activations)."""
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def fns(op: str) -> tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]:
    """(triton, reference) implementations of `op`."""
    return getattr(triton_act, op), getattr(ref, op)


H200_SMS = 132  # the launch configuration as on the GPU these kernels were tuned on
DEFAULTS = triton_act.TUNING.default


@pytest.fixture
def stacked() -> Iterator[None]:
    """Let short rows share programs even for few rows (fewer interpreter programs, multi-row tiles)."""
    with triton_act.TUNING.override(programs_per_sm=0):
        yield


# (rows, d) with x = [rows, 2d]: tiny odd, non-power-of-two with a ragged column block, many short rows
# (64 per program, ragged last row tile), a wide odd d (column blocks of 2048, 2048 and 3), and 129 rows
# of d = 8 in one 256-row tile.
SHAPES = [(1, 7), (37, 1000), (300, 64), (3, 4099), (129, 8)]


@pytest.mark.usefixtures("stacked")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rows,d", SHAPES)
@pytest.mark.parametrize("op,kwargs", OPS, ids=OP_IDS)
def test_triton_vs_reference(op: str, kwargs: dict[str, str], rows: int, d: int, dtype: torch.dtype) -> None:
    tri, reference = fns(op)
    g = gen(op, kwargs, rows, d, dtype)
    x = randn((rows, 2 * d), dtype, g)
    x0 = x.clone()
    out = tri(x, **kwargs)
    assert out.shape == (rows, d) and out.dtype == dtype and out.is_contiguous()
    check_close(f"{op}{kwargs} {rows}x{d} {dtype}", out, reference(x, **kwargs), tol(op, dtype))
    assert torch.equal(x, x0)


@pytest.mark.parametrize("op,kwargs", OPS, ids=OP_IDS)
def test_triton_default_config_decode(op: str, kwargs: dict[str, str]) -> None:
    """The shipped config on an H200: few rows of a wide d are split into column blocks across programs."""
    tri, reference = fns(op)
    bm, bn, _ = DEFAULTS.config(4, 3000, H200_SMS)
    assert bm == 1 and bn == 1024
    g = gen("decode", op, kwargs)
    x = randn((4, 6000), torch.bfloat16, g)
    with triton_act.TUNING.override(sms=H200_SMS):
        check_close(f"{op} decode", tri(x, **kwargs), reference(x, **kwargs), tol(op, torch.bfloat16))


@pytest.mark.usefixtures("stacked")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_triton_strided_rows_and_3d(dtype: torch.dtype) -> None:
    """x = big[:, off:off + 2d] (row stride != 2d, aligned and unaligned offsets) and [B, S, 2d] inputs."""
    d = 500
    g = gen("strided", dtype)
    big = randn((13, 2 * d + 40), dtype, g)
    big0 = big.clone()
    for off in (0, 3):
        x = big[:, off : off + 2 * d]
        assert not x.is_contiguous()
        for op, kwargs in OPS:
            tri, reference = fns(op)
            check_close(f"{op} strided+{off}", tri(x, **kwargs), reference(x, **kwargs), tol(op, dtype))
    assert torch.equal(big, big0)
    x3 = randn((2, 5, 2 * d), dtype, g)
    out = triton_act.silu_and_mul(x3)
    assert out.shape == (2, 5, d)
    check_close("silu 3d", out, ref.silu_and_mul(x3), tol("silu_and_mul", dtype))
    xt = randn((2 * d, 6), dtype, g).t()  # last dim not unit-stride: one copy, same answer
    check_close("silu transposed", triton_act.silu_and_mul(xt), ref.silu_and_mul(xt), tol("silu_and_mul", dtype))


def _halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    d = x.shape[-1] // 2
    return x[..., :d], x[..., d:]


F64_FORMULAS: dict[tuple[str, str | None], Callable[[torch.Tensor], torch.Tensor]] = {
    ("silu_and_mul", None): lambda x: _halves(x)[0] * torch.sigmoid(_halves(x)[0]) * _halves(x)[1],
    ("gelu_and_mul", "none"): lambda x: (
        0.5 * _halves(x)[0] * (1 + torch.special.erf(_halves(x)[0] / math.sqrt(2))) * _halves(x)[1]
    ),
    ("gelu_and_mul", "tanh"): lambda x: (
        0.5
        * _halves(x)[0]
        * (1 + torch.tanh(math.sqrt(2 / math.pi) * (_halves(x)[0] + 0.044715 * _halves(x)[0] ** 3)))
        * _halves(x)[1]
    ),
}


def test_triton_extreme_values() -> None:
    """Huge and tiny gates: the exp-based sigmoid forms never overflow to NaN and keep the limits."""
    gate = torch.tensor(
        [
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            1.0,
            -1.0,
            8.0,
            -8.0,
            20.0,
            -20.0,
            88.0,
            -88.0,
            100.0,
            -100.0,
            1e4,
            -1e4,
            1e30,
            -1e30,
            3e38,
            -3e38,
        ]
    )
    x = torch.cat([gate, torch.full_like(gate, 0.75)])[None, :]
    for op, kwargs in OPS:
        tri, reference = fns(op)
        out = tri(x, **kwargs)
        expect = reference(x, **kwargs)
        # torch's own float32 gelu overflows at 3e38 (torch 2.13 forms x * (1 + erf) before halving); there
        # the formula in float64, rounded to float32, is the value to keep.
        exact = F64_FORMULAS[(op, kwargs.get("approximate"))](x.double()).float()
        expect = torch.where(torch.isinf(expect) & torch.isfinite(exact), exact, expect)
        assert torch.isfinite(out).all(), (op, kwargs, out)
        # atol: at g = -8 the reference's 1 + tanh(u) cancels to 0 where the kernel keeps ~2e-21.
        torch.testing.assert_close(out, expect, rtol=1e-6, atol=1e-20)


def test_invalid_arguments() -> None:
    x = torch.ones(2, 8)
    for impl in (triton_act.gelu_and_mul, ref.gelu_and_mul):
        with pytest.raises(ValueError, match="approximate"):
            impl(x, approximate="fast")
    with pytest.raises(ValueError, match="even"):
        triton_act.silu_and_mul(torch.ones(2, 7))
    assert triton_act.silu_and_mul(torch.ones(0, 8)).shape == (0, 4)


def test_launch_config_shapes() -> None:
    """Power-of-two tiles, bounded warps; big shapes get 4096-element tiles, decode spreads over programs."""
    for sms in (1, 78, H200_SMS):
        for d in (4, 7, 64, 1000, 4099, 11008, 14336, 28672):
            for rows in (1, 8, 64, 300, 4096, 32768):
                bm, bn, warps = DEFAULTS.config(rows, d, sms)
                assert bn & (bn - 1) == 0 and bm & (bm - 1) == 0 and bn <= DEFAULTS.max_block_n
                assert 1 <= warps <= 8 and bm * bn <= max(DEFAULTS.tile, bn)
    assert DEFAULTS.config(8192, 14336, H200_SMS) == (
        2,
        2048,
        8,
    )  # Llama-3-8B MLP: 8 KiB in, 8 KiB out per program
    assert DEFAULTS.config(32768, 128, H200_SMS) == (32, 128, 8)
    assert DEFAULTS.config(1, 14336, H200_SMS) == (1, 1024, 4)  # decode: 14 programs of 4 warps
    assert DEFAULTS.config(64, 14336, H200_SMS) == (1, 2048, 8)  # 448 programs: spread enough
    assert DEFAULTS.config(64, 14336, 256) == (1, 1024, 4)  # ... but not on a GPU of 256 SMs


# --------------------------------------------------------------------------- reference, torch_compile


def test_reference_against_float64() -> None:
    """The references against independent float64 formulas (erf and tanh GELU written out)."""
    g = gen("f64")
    x = torch.randn(5, 2 * 300, generator=g, dtype=torch.float64) * 3
    a, b = x[:, :300], x[:, 300:]
    silu64 = a / (1 + torch.exp(-a)) * b
    gelu64 = 0.5 * a * (1 + torch.special.erf(a / math.sqrt(2))) * b
    tanh64 = 0.5 * a * (1 + torch.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))) * b
    xf = x.float()
    check_close("ref silu", ref.silu_and_mul(xf), silu64, 1e-6)
    check_close("ref gelu", ref.gelu_and_mul(xf), gelu64, 1e-6)
    check_close("ref gelu tanh", ref.gelu_and_mul(xf, "tanh"), tanh64, 1e-6)
    check_close("triton gelu tanh vs f64", triton_act.gelu_and_mul(xf, "tanh"), tanh64, 1e-6)


def test_reference_rounds_once() -> None:
    """Half-precision inputs: float32 math, one rounding to the input dtype at the end."""
    g = gen("round")
    x = randn((4, 64), torch.bfloat16, g)
    a, b = x[:, :32].float(), x[:, 32:].float()
    assert torch.equal(ref.silu_and_mul(x), (torch.nn.functional.silu(a) * b).bfloat16())


def test_torch_compile_backend() -> None:
    """One small float32 case per op: inductor's C++ compile on CPU costs seconds per graph."""
    from kcatalog.kernels.compiled import activation as compiled_act

    g = gen("compiled")
    x = randn((8, 96), torch.float32, g)
    check_close("compiled silu", compiled_act.silu_and_mul(x), ref.silu_and_mul(x), 1e-5)
    check_close("compiled gelu tanh", compiled_act.gelu_and_mul(x, "tanh"), ref.gelu_and_mul(x, "tanh"), 1e-5)
    assert compiled_act.silu_and_mul.__name__ == "silu_and_mul"
    assert compiled_act.gelu_and_mul.__doc__ == ref.gelu_and_mul.__doc__
