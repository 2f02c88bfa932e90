"""Tests for the quantization group (per_token_quant_fp8).

The compared output is the dequantized value ``q.float() * scale`` against the reference's, at the
manifest's tolerance - and, stricter, the scales and the fp8 values themselves are checked for exact
equality with the reference (the kernel's division is correctly rounded, so they agree bit for bit;
zeros are compared as values, as the kernel may write +0 where the reference writes -0).

Triton kernels run under TRITON_INTERPRET=1 (tests/conftest.py). The interpreter's own float32 ->
float8e4nv cast is not round-to-nearest-even (ties away, a lost carry into odd exponents, subnormals
flushed), so on CPU tensors the kernel snaps values onto the e4m3 grid itself before the cast (see
the module docstring of kcatalog.kernels.triton.quantization); test_snap_helper_is_exact_rne checks
that helper against torch's cast over every tie of the e4m3 grid, and the exact-code tests check the
whole kernel. On the GPU the hardware cast does the rounding and the snap is compiled out.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
import yaml

from kcatalog.kernels.torch import quantization as ref
from kcatalog.testing import check_close

triton_q = pytest.importorskip("kcatalog.kernels.triton.quantization")

MANIFEST = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalog" / "quantization.yaml").read_text())
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]
FP8 = torch.float8_e4m3fn
H200_SMS = 132  # the launch configuration as on the GPU these kernels were tuned on
DEFAULTS = triton_q.TUNING.default


def tol(dtype: torch.dtype) -> float:
    """The manifest's tolerance (on dequantized values) at input `dtype`."""
    return float(MANIFEST["ops"]["per_token_quant_fp8"]["tolerance"][str(dtype).removeprefix("torch.")])


def gen(*key: object) -> torch.Generator:
    """A generator seeded from the case, so every case gets its own reproducible inputs."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def randn(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Random normal values with a per-row magnitude spread over ~6 decades (scales differ per row)."""
    mag = 10.0 ** (torch.rand(shape[:-1] + (1,), generator=g) * 6 - 3)
    return (torch.randn(shape, generator=g) * mag).to(dtype)


class KernelSpy:
    """Stands in for the Triton kernel object and records each launch's (PACKED, TWO_PASS) mode."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.modes: list[tuple[bool, bool]] = []

    def __getitem__(self, grid: Any) -> Any:
        launch = self.kernel[grid]

        def run(*args: Any, **kwargs: Any) -> Any:
            self.modes.append((kwargs["PACKED"], kwargs["TWO_PASS"]))
            return launch(*args, **kwargs)

        return run


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[KernelSpy]:
    """Record which kernel mode each call ran; rows stack onto programs even for few rows."""
    s = KernelSpy(triton_q._per_token_quant_fp8_kernel)
    monkeypatch.setattr(triton_q, "_per_token_quant_fp8_kernel", s)
    with triton_q.TUNING.override(programs_per_sm=0):
        yield s


def check_quant(name: str, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> None:
    """Against the reference: dequantized values within tolerance, then scales and fp8 values exactly."""
    q_ref, s_ref = ref.per_token_quant_fp8(x)
    assert q.dtype == FP8 and q.shape == x.shape
    assert scale.dtype == torch.float32 and scale.shape == (*x.shape[:-1], 1)
    check_close(f"{name} dequantized", q.float() * scale, q_ref.float() * s_ref, tol(x.dtype))
    assert torch.equal(scale, s_ref), f"{name}: scales differ"
    bad = q.float() != q_ref.float()  # values, so +0 == -0; no NaN: check_close rejected those
    assert not bad.any(), f"{name}: {int(bad.sum())} codes differ, e.g. x/scale={(x.float() / s_ref)[bad][:5].tolist()}"


# (rows, width): tiny odd, non-power-of-two (packed as 500 words), short rows stacked 64 per program,
# odd 4099 (unpacked path, 8192 block), even 4098, and 28672 (the Llama-70B MLP width: one pass packed
# for 16-bit inputs, two passes for float32).
SHAPES = [(1, 7), (37, 1000), (300, 64), (3, 4099), (4, 4098), (1, 28672)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rows,width", SHAPES)
def test_triton_vs_reference(spy: KernelSpy, rows: int, width: int, dtype: torch.dtype) -> None:
    g = gen("quant", rows, width, dtype)
    x = randn((rows, width), dtype, g)
    x0 = x.clone()
    q, scale = triton_q.per_token_quant_fp8(x)
    check_quant(f"{rows}x{width} {dtype}", x, q, scale)
    assert torch.equal(x, x0)
    packed = dtype != torch.float32 and width % 2 == 0
    assert spy.modes == [(packed, not packed and width > DEFAULTS.max_fused_block)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("odd", [False, True], ids=["even", "odd"])
def test_triton_rounding_exact(spy: KernelSpy, odd: bool, dtype: torch.dtype) -> None:
    """A row whose absmax is 448 (scale exactly 1), so x / scale = x: ties to even, the carry of
    1.9375 -> 2 into an odd exponent, e4m3 subnormals and their ties, the top of the range - every
    case the interpreter's raw cast gets wrong - must come out as torch's own RNE cast."""
    special = [
        448.0,
        -448.0,
        1.0625,
        1.1875,
        -1.1875,
        1.9375,
        -1.9375,
        3.875,
        0.46875,
        0.0029296875,
        2.0**-10,
        3 * 2.0**-11,
        -3 * 2.0**-11,
        2.0**-12,
        0.001,
        432.0,
        -424.0,
        15.5,
        17.0,
        19.0,
        232.0,
        240.0,
        0.0,
        1e-7,
        0.015625 - 2.0**-12,
        0.0166015625,
        7.25,
        300.0,
    ]
    if odd:
        special.append(-0.75)
    x = torch.tensor([special, [v / 4 for v in special]]).to(dtype)  # row 2: scale 0.25, same codes
    q, scale = triton_q.per_token_quant_fp8(x)
    check_quant(f"rounding {dtype}", x, q, scale)
    assert scale.flatten().tolist() == [1.0, 0.25]
    expect = x[:1].float().to(FP8)  # scale is exactly 1: torch's cast of x itself
    nonzero = x[0] != 0
    assert torch.equal(q[0][nonzero].view(torch.uint8), expect[0][nonzero].view(torch.uint8))
    assert torch.equal(q[1].view(torch.uint8), q[0].view(torch.uint8))
    assert spy.modes[-1] == (dtype != torch.float32 and not odd, False)


def test_triton_zero_and_tiny_rows() -> None:
    """An all-zero row and a row below 448 / 512 hit the scale floor 1 / (448 * 512): no 0/0, no inf."""
    x = torch.zeros(3, 64, dtype=torch.bfloat16)
    x[1] = torch.linspace(-1e-3, 1e-3, 64)
    x[2, 5] = 3.0
    q, scale = triton_q.per_token_quant_fp8(x)
    check_quant("zero/tiny rows", x, q, scale)
    assert scale[0, 0].item() == scale[1, 0].item() == torch.tensor(ref.MIN_SCALE, dtype=torch.float32).item()
    assert (q[0].float() == 0).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_triton_two_pass(spy: KernelSpy, dtype: torch.dtype) -> None:
    """Rows wider than the register thresholds (forced small here): two passes over 256-wide chunks."""
    g = gen("two_pass", dtype)
    for rows, width in ((2, 1000), (1, 1203)):
        x = randn((rows, width), dtype, g)
        with triton_q.TUNING.override(max_packed_block=256, max_fused_block=512, chunk=256):
            q, scale = triton_q.per_token_quant_fp8(x)
        check_quant(f"two-pass {rows}x{width} {dtype}", x, q, scale)
    assert spy.modes == [(False, True), (False, True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_triton_strided_rows_and_3d(spy: KernelSpy, dtype: torch.dtype) -> None:
    """x = big[:, off:off + n] (row stride != width; offset 1 breaks the 4-byte pairing) and [B, S, H]."""
    g = gen("strided", dtype)
    big = randn((13, 1040), dtype, g)
    big0 = big.clone()
    for off in (0, 1):
        x = big[:, off : off + 1000]
        assert not x.is_contiguous()
        check_quant(f"strided+{off} {dtype}", x, *triton_q.per_token_quant_fp8(x))
    assert torch.equal(big, big0)
    packed = dtype != torch.float32
    assert spy.modes == [(packed, False), (False, False)]
    x3 = randn((2, 5, 256), dtype, g)
    check_quant(f"3d {dtype}", x3, *triton_q.per_token_quant_fp8(x3))
    xt = randn((256, 6), dtype, g).t()  # last dim not unit-stride: one copy
    check_quant(f"transposed {dtype}", xt, *triton_q.per_token_quant_fp8(xt))


def test_triton_default_config() -> None:
    """The shipped config on an H200 (no stacking below 2 programs per SM) on a decode-sized batch."""
    assert DEFAULTS.config(8, 2048, True, H200_SMS) == (1, 2048, False, 4)
    x = randn((8, 4096), torch.bfloat16, gen("default"))
    with triton_q.TUNING.override(sms=H200_SMS):
        q, scale = triton_q.per_token_quant_fp8(x)
    check_quant("default config", x, q, scale)


def test_launch_config_shapes() -> None:
    """Rows held in registers up to the thresholds (16 warps at the top), two passes beyond."""
    sms = H200_SMS
    assert DEFAULTS.config(8192, 28672 // 2, True, sms) == (1, 16384, False, 16)  # bf16 28672: one pass
    assert DEFAULTS.config(8192, 28672, False, sms) == (1, DEFAULTS.chunk, True, 8)  # fp32 28672
    assert DEFAULTS.config(8192, 4096 // 2, True, sms) == (2, 2048, False, 4)
    assert DEFAULTS.config(32768, 7, False, sms)[:2] == (64, 8)  # 512 programs of 64 rows
    assert DEFAULTS.config(32768, 7, False, 512)[:2] == (32, 8)  # ... 1024 on a GPU of 512 SMs
    for units in (3, 64, 500, 2049, 8192, 16384, 20000):
        for rows in (1, 64, 4096):
            for packed in (False, True):
                bm, bn, two_pass, warps = DEFAULTS.config(rows, units, packed, sms)
                assert bn & (bn - 1) == 0 and bm & (bm - 1) == 0 and 4 <= warps <= 16
                assert two_pass or bn >= units
                assert bm == 1 or -(-rows // bm) >= DEFAULTS.programs_per_sm * sms


@triton.jit
def _snap_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, triton_q._snap_to_e4m3_grid(x), mask=offs < n)


def test_snap_helper_is_exact_rne() -> None:
    """The interpreter workaround on its own: every e4m3 value, every midpoint between neighbours
    (ties), one float32 ulp either side of each, and random values, all signs: the snapped float32
    value must equal torch's round-to-nearest-even cast (a float32 -> e4m3 -> float32 round trip)."""
    grid = torch.arange(127, dtype=torch.uint8).view(FP8).float()  # codes 0..126: 0 .. 448
    mids = (grid[:-1] + grid[1:]) / 2
    up, down = torch.nextafter(mids, torch.tensor(1e9)), torch.nextafter(mids, torch.tensor(0.0))
    rand = 448.0 * torch.rand(4000, generator=gen("snap")) ** 8  # dense near 0, reaches 448
    v = torch.cat([grid, mids, up, down, rand])
    v = torch.cat([v, -v]).contiguous()
    y = torch.empty_like(v)
    _snap_kernel[(triton.cdiv(v.numel(), 4096),)](v, y, v.numel(), BLOCK=4096)
    expect = v.to(FP8).float()
    assert torch.equal(y, expect), f"{int((y != expect).sum())} values differ"
    assert torch.equal(torch.signbit(y), torch.signbit(expect))  # -0 stays -0


# --------------------------------------------------------------------------- reference, torch_compile


def e4m3_rne_float64(v: torch.Tensor) -> torch.Tensor:
    """Round float64 values (|v| <= 448) to the nearest e4m3 value, ties to the even code: by search
    over the 127 non-negative codes, independently of torch's float8 cast."""
    grid = torch.arange(127, dtype=torch.uint8).view(FP8).double()
    a = v.abs()
    hi_i = torch.searchsorted(grid, a).clamp(max=126)
    lo_i = (hi_i - 1).clamp(min=0)
    lo, hi = grid[lo_i], grid[hi_i]
    take_hi = (hi - a < a - lo) | ((hi - a == a - lo) & (hi_i % 2 == 0))
    return torch.where(take_hi, hi, lo) * v.sign()


def test_reference_against_float64() -> None:
    """The reference against the formula in float64 with an independent e4m3 rounding."""
    g = gen("f64")
    x = randn((16, 300), torch.float32, g)
    q, scale = ref.per_token_quant_fp8(x)
    x64 = x.double()
    scale64 = (x64.abs().amax(-1, keepdim=True) / 448).clamp(min=1 / (448 * 512))
    assert torch.equal(scale, scale64.float())  # IEEE float32 division is the correctly rounded quotient
    expect = e4m3_rne_float64((x64 / scale.double()).clamp(-448, 448))
    assert torch.equal(q.double(), expect)


def test_torch_compile_backend() -> None:
    """One small case: inductor's C++ compile on CPU costs seconds per graph."""
    from kcatalog.kernels.compiled import quantization as compiled_q

    x = randn((8, 96), torch.bfloat16, gen("compiled"))
    q, scale = compiled_q.per_token_quant_fp8(x)
    q_ref, s_ref = ref.per_token_quant_fp8(x)
    assert q.dtype == FP8 and scale.shape == (8, 1)
    check_close("compiled dequantized", q.float() * scale, q_ref.float() * s_ref, tol(torch.bfloat16))
    torch.testing.assert_close(scale, s_ref, rtol=1e-6, atol=0)
    assert compiled_q.per_token_quant_fp8.__name__ == "per_token_quant_fp8"
