"""Tests for the elementwise group (softmax over the last dim).

Triton kernels run under TRITON_INTERPRET=1 (tests/conftest.py) against the torch reference; most cases
set ``programs_per_sm=0`` (through TUNING.override) so short rows are packed many to a program (fewer
interpreter programs, and the multi-row tile and clamped tail program get exercised). The interpreter truncates float32 -> bfloat16
(the GPU rounds to nearest), so bf16 errors here are ~4e-3, inside the 1e-2 tolerance.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from kcatalog.kernels.aten import elementwise as aten_ew
from kcatalog.kernels.torch import elementwise as ref
from kcatalog.testing import check_close

triton_ew = pytest.importorskip("kcatalog.kernels.triton.elementwise")

MANIFEST = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalog" / "elementwise.yaml").read_text())
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]


def tol(dtype: torch.dtype) -> float:
    """The manifest's softmax tolerance at `dtype`."""
    return float(MANIFEST["ops"]["softmax"]["tolerance"][str(dtype).removeprefix("torch.")])


def gen(*key: object) -> torch.Generator:
    """A generator seeded from the case, so every case gets its own reproducible inputs."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def randn(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """Random normal values in `dtype`."""
    return (torch.randn(shape, generator=g) * scale).to(dtype)


H200_SMS = 132  # the launch configuration as on the GPU these kernels were tuned on
DEFAULTS = triton_ew.TUNING.default
PACKED = {"programs_per_sm": 0, "row_tile": 16384, "max_rows_per_program": 128}


@pytest.fixture
def packed() -> Iterator[None]:
    """Pack short rows many to a program even for few rows (fewer interpreter programs, multi-row tiles)."""
    with triton_ew.TUNING.override(**PACKED):
        yield


SHAPES = [(1, 7), (37, 1000), (300, 64), (3, 4099)]


@pytest.mark.usefixtures("packed")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rows,width", SHAPES)
def test_triton_softmax(rows: int, width: int, dtype: torch.dtype) -> None:
    g = gen("softmax", rows, width, dtype)
    x = randn((rows, width), dtype, g, scale=4.0)
    x0 = x.clone()
    out = triton_ew.softmax(x)
    assert out.shape == x.shape and out.dtype == dtype
    check_close(f"softmax {rows}x{width} {dtype}", out, ref.softmax(x), tol(dtype))
    assert torch.equal(x, x0)


@pytest.mark.parametrize("dtype", [torch.bfloat16], ids=["bf16"])
def test_triton_softmax_default_config_few_rows(dtype: torch.dtype) -> None:
    """The shipped config on an H200 (one row per program for decode-sized batches)."""
    x = randn((5, 200), dtype, gen("default", dtype), scale=3.0)
    assert triton_ew.TUNING.get().config(200, 5, H200_SMS).block_m == 1
    with triton_ew.TUNING.override(sms=H200_SMS):
        check_close("softmax default config", triton_ew.softmax(x), ref.softmax(x), tol(dtype))


@pytest.mark.parametrize(
    "width,max_fused,loop_block,dtype",
    [
        (1000, 256, 128, torch.float32),
        (1000, 256, 128, torch.float16),
        (1000, 256, 128, torch.bfloat16),
        (4099, 2048, 1024, torch.float32),
        (17000, None, None, torch.bfloat16),
    ],
    ids=["1000-fp32", "1000-fp16", "1000-bf16", "4099-fp32", "17000-bf16"],
)
def test_triton_softmax_online_loop(
    width: int, max_fused: int | None, loop_block: int | None, dtype: torch.dtype
) -> None:
    """Online softmax for rows wider than max_fused_width (forced small, and the real threshold once)."""
    small = {"max_fused_width": max_fused, "loop_block": loop_block} if max_fused is not None else {}
    rows = 3 if width < 17000 else 1
    g = gen("online", width, dtype)
    x = randn((rows, width), dtype, g, scale=5.0)
    # A growing trend makes the running max rise chunk after chunk (exercises the rescaling).
    x = (x.float() + torch.linspace(-8.0, 8.0, width)).to(dtype)
    with triton_ew.TUNING.override(split_rows_per_sm=0, **small):  # one program per row, however few rows
        assert not triton_ew.TUNING.get().config(width, rows, 1).single_pass
        check_close(f"softmax online {rows}x{width} {dtype}", triton_ew.softmax(x), ref.softmax(x), tol(dtype))


def record_splits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows of each softmax that takes the split path, in call order."""
    calls: list[int] = []
    split = triton_ew._softmax_split
    monkeypatch.setattr(triton_ew, "_softmax_split", lambda x2, out, t: calls.append(x2.shape[0]) or split(x2, out, t))
    return calls


@pytest.fixture
def split_wide() -> Iterator[None]:
    """Rows wider than 256 split into 128-wide blocks, below 264 rows (as on an H200)."""
    with triton_ew.TUNING.override(sms=H200_SMS, max_fused_width=256, split_block=128):
        yield


@pytest.mark.parametrize(
    "width,rows,block,dtype",
    [
        (1000, 1, 128, torch.float32),  # a last block of 104
        (1000, 5, 128, torch.bfloat16),
        (1024, 3, 256, torch.float16),  # whole blocks only
        (40000, 2, None, torch.bfloat16),  # the shipped block size, vocabulary-wide
    ],
    ids=["1000x1-fp32", "1000x5-bf16", "1024x3-fp16", "40000x2-bf16"],
)
def test_triton_softmax_split_rows(
    monkeypatch: pytest.MonkeyPatch, width: int, rows: int, block: int | None, dtype: torch.dtype
) -> None:
    """Few wide rows (as on an H200: fewer than 264): one program per block for the statistics, then per block
    for the output."""
    calls = record_splits(monkeypatch)
    x = randn((rows, width), dtype, gen("split", width, rows), scale=5.0)
    x = (x.float() + torch.linspace(-8.0, 8.0, width)).to(dtype)  # the row's max is in its last block
    with triton_ew.TUNING.override(sms=H200_SMS, max_fused_width=512, split_block=block or DEFAULTS.split_block):
        check_close(f"softmax split {rows}x{width} {dtype}", triton_ew.softmax(x), ref.softmax(x), tol(dtype))
    assert calls == [rows]


def test_triton_softmax_split_only_for_few_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """At split_rows_per_sm rows per SM and more, wide rows take one program each again (the loop)."""
    calls = record_splits(monkeypatch)
    small = {"max_fused_width": 256, "loop_block": 128, "split_block": 128}
    with triton_ew.TUNING.override(sms=2, split_rows_per_sm=2, **small):  # split below 4 rows
        for rows in (3, 4):
            x = randn((rows, 600), torch.float32, gen("threshold", rows), scale=5.0)
            check_close(f"softmax {rows}x600", triton_ew.softmax(x), ref.softmax(x), tol(torch.float32))
    assert calls == [3]


@pytest.mark.usefixtures("split_wide")
def test_triton_softmax_split_masked_and_strided() -> None:
    """Split rows: blocks of only -inf add nothing, a row of only -inf is NaN (as in torch), strides honoured."""
    big = randn((4, 1200), torch.float32, gen("split masked"), scale=30.0)
    x = big[:, :1000]  # strided rows
    x[:, :300] = float("-inf")  # the first two blocks, and part of the third, of every row
    x[1, 700:] = float("-inf")
    x[3] = float("-inf")
    out = triton_ew.softmax(x)
    expected = ref.softmax(x)
    check_close("softmax split masked", out[:3], expected[:3], tol(torch.float32))
    assert torch.equal(out[:3, :300], torch.zeros(3, 300))
    assert out[3].isnan().all() and expected[3].isnan().all()


@pytest.mark.parametrize("single_pass", [True, False], ids=["single", "online"])
def test_triton_softmax_masked_logits(single_pass: bool) -> None:
    """-inf logits (masked tokens) give exact zeros, including a leading all--inf chunk in the online loop."""
    looped = {} if single_pass else {"max_fused_width": 256, "loop_block": 128, "split_rows_per_sm": 0}
    x = randn((4, 1000), torch.float32, gen("masked"), scale=30.0)  # large logits: needs the max shift
    x[:, :300] = float("-inf")
    x[2, 500:] = float("-inf")
    with triton_ew.TUNING.override(**PACKED, **looped):
        out = triton_ew.softmax(x)
    check_close("softmax masked", out, ref.softmax(x), tol(torch.float32))
    assert torch.equal(out[:, :300], torch.zeros(4, 300))


@pytest.mark.usefixtures("packed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_triton_softmax_strided_and_3d(dtype: torch.dtype) -> None:
    """x = big[:, :n] (row stride != width) read in place; 3-D input keeps its shape."""
    g = gen("strided", dtype)
    big = randn((45, 1040), dtype, g, scale=3.0)
    big0 = big.clone()
    x = big[:, 13:1013]
    out = triton_ew.softmax(x)
    assert out.is_contiguous()
    check_close("softmax strided", out, ref.softmax(x), tol(dtype))
    assert torch.equal(big, big0)
    x3 = randn((2, 6, 300), dtype, g, scale=3.0)
    out3 = triton_ew.softmax(x3)
    assert out3.shape == x3.shape
    check_close("softmax 3d", out3, ref.softmax(x3), tol(dtype))


def test_launch_config_shapes() -> None:
    """Power-of-two tiles covering the row, bounded warps, online loop beyond max_fused_width."""
    for sms in (1, 78, H200_SMS):
        for n in (7, 64, 1000, 4099, 16384):
            for rows in (1, 64, 300, 32768):
                bm, bn, warps, single = triton_ew.TUNING.get().config(n, rows, sms)
                assert single and bn >= n and bn & (bn - 1) == 0 and bm & (bm - 1) == 0 and 1 <= warps <= 16
                assert bm == 1 or -(-rows // bm) >= DEFAULTS.programs_per_sm * sms
    assert triton_ew.TUNING.get().config(8192, 8192, H200_SMS) == (1, 8192, 16, True)
    bm, bn, _, single = triton_ew.TUNING.get().config(152064, 16, H200_SMS)
    assert (bm, bn, single) == (1, DEFAULTS.loop_block, False)


def test_reference_against_float64() -> None:
    x = torch.randn(9, 500, generator=gen("f64"), dtype=torch.float64) * 6
    e = (x - x.max(-1, keepdim=True).values).exp()
    check_close("ref softmax", ref.softmax(x.float()), e / e.sum(-1, keepdim=True), 1e-6)
    check_close("ref softmax bf16", ref.softmax(x.bfloat16()), torch.softmax(x.bfloat16().double(), -1), 1e-2)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_aten_backend(dtype: torch.dtype) -> None:
    x = randn((33, 1000), dtype, gen("aten", dtype), scale=4.0)
    check_close("aten softmax", aten_ew.softmax(x), ref.softmax(x), tol(dtype))


def test_torch_compile_backend() -> None:
    """One small float32 case: inductor's C++ compile on CPU costs seconds per graph."""
    from kcatalog.kernels.compiled import elementwise as compiled_ew

    x = randn((8, 96), torch.float32, gen("compiled"), scale=4.0)
    check_close("compiled softmax", compiled_ew.softmax(x), ref.softmax(x), 1e-5)
    assert compiled_ew.softmax.__name__ == "softmax"
