"""Tests for the layernorm group (rms_norm, fused_add_rms_norm, layer_norm) and the lazy_compile helper.

Triton kernels run under TRITON_INTERPRET=1 (tests/conftest.py) against the torch reference. The
interpreter runs one program at a time, so most cases set ``programs_per_sm=0`` (through the module's
TUNING.override): short rows are then packed many to a program, which also exercises multi-row tiles and
the clamped tail program. Shapes stay
small (rows x width <= ~64k elements). Note: the interpreter truncates float32 -> bfloat16 instead of
rounding to nearest (the GPU rounds), so bf16 errors here are ~4e-3, inside the 1e-2 tolerance.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from kcatalog.kernels.aten import layernorm as aten_ln
from kcatalog.kernels.torch import layernorm as ref
from kcatalog.testing import check_close

triton_ln = pytest.importorskip("kcatalog.kernels.triton.layernorm")

MANIFEST = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalog" / "layernorm.yaml").read_text())
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]


def tol(op: str, dtype: torch.dtype) -> float:
    """The manifest's tolerance for `op` at `dtype`."""
    return float(MANIFEST["ops"][op]["tolerance"][str(dtype).removeprefix("torch.")])


def gen(*key: object) -> torch.Generator:
    """A generator seeded from the case, so every case gets its own reproducible inputs."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def randn(
    shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator, scale: float = 1.0, shift: float = 0.0
) -> torch.Tensor:
    """Random normal values (never all zeros) in `dtype`."""
    return (torch.randn(shape, generator=g) * scale + shift).to(dtype)


H200_SMS = 132  # the launch configuration as on the GPU these kernels were tuned on
DEFAULTS = triton_ln.TUNING.default


@pytest.fixture
def packed() -> Iterator[None]:
    """Pack short rows many to a program even for few rows (fewer interpreter programs, multi-row tiles)."""
    with triton_ln.TUNING.override(programs_per_sm=0, row_tile=16384, max_rows_per_program=128):
        yield


# (rows, width): tiny odd (1 real row, 127 clamped), non-power-of-two with a ragged tail tile, many short
# power-of-two rows (128 rows per program, tail clamped), and 4099 -> BLOCK_N 8192.
SHAPES = [(1, 7), (37, 1000), (300, 64), (3, 4099)]


# ---------------------------------------------------------------------------------------------- triton


@pytest.mark.usefixtures("packed")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rows,width", SHAPES)
def test_triton_rms_norm(rows: int, width: int, dtype: torch.dtype) -> None:
    g = gen("rms", rows, width, dtype)
    x = randn((rows, width), dtype, g, scale=2.0)
    w = randn((width,), dtype, g, shift=1.0)
    x0, w0 = x.clone(), w.clone()
    out = triton_ln.rms_norm(x, w, 1e-6)
    assert out.shape == x.shape and out.dtype == dtype
    check_close(f"rms_norm {rows}x{width} {dtype}", out, ref.rms_norm(x, w, 1e-6), tol("rms_norm", dtype))
    assert torch.equal(x, x0) and torch.equal(w, w0)


@pytest.mark.usefixtures("packed")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rows,width", SHAPES)
def test_triton_fused_add_rms_norm(rows: int, width: int, dtype: torch.dtype) -> None:
    g = gen("fused", rows, width, dtype)
    x = randn((rows, width), dtype, g)
    residual = randn((rows, width), dtype, g, scale=3.0)
    w = randn((width,), dtype, g, shift=1.0)
    w0 = w.clone()
    x_ref, r_ref = x.clone(), residual.clone()
    ref.fused_add_rms_norm(x_ref, r_ref, w, 1e-6)
    assert triton_ln.fused_add_rms_norm(x, residual, w, 1e-6) is None
    t = tol("fused_add_rms_norm", dtype)
    check_close(f"fused_add residual {rows}x{width} {dtype}", residual, r_ref, t)
    check_close(f"fused_add x {rows}x{width} {dtype}", x, x_ref, t)
    assert torch.equal(w, w0)


@pytest.mark.usefixtures("packed")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rows,width", SHAPES)
def test_triton_layer_norm(rows: int, width: int, dtype: torch.dtype) -> None:
    g = gen("ln", rows, width, dtype)
    x = randn((rows, width), dtype, g, scale=2.0, shift=4.0)  # a large mean tests the centring
    w = randn((width,), dtype, g, shift=1.0)
    b = randn((width,), dtype, g)
    x0 = x.clone()
    out = triton_ln.layer_norm(x, w, b, 1e-5)
    assert out.shape == x.shape and out.dtype == dtype
    check_close(f"layer_norm {rows}x{width} {dtype}", out, ref.layer_norm(x, w, b, 1e-5), tol("layer_norm", dtype))
    assert torch.equal(x, x0)


def run_all_ops_checked(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> None:
    """The three ops against the reference, on these inputs."""
    check_close("rms_norm", triton_ln.rms_norm(x, w), ref.rms_norm(x, w), tol("rms_norm", dtype))
    check_close("layer_norm", triton_ln.layer_norm(x, w, b), ref.layer_norm(x, w, b), tol("layer_norm", dtype))
    xt, rt, xr, rr = x.clone(), r.clone(), x.clone(), r.clone()
    triton_ln.fused_add_rms_norm(xt, rt, w)
    ref.fused_add_rms_norm(xr, rr, w)
    check_close("fused_add x", xt, xr, tol("fused_add_rms_norm", dtype))
    check_close("fused_add residual", rt, rr, tol("fused_add_rms_norm", dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16], ids=["bf16"])
def test_triton_default_config_few_rows(dtype: torch.dtype) -> None:
    """The shipped config on an H200 (one row per program for decode-sized batches) on short rows."""
    g = gen("default", dtype)
    x = randn((6, 96), dtype, g)
    r = randn((6, 96), dtype, g)
    w = randn((96,), dtype, g, shift=1.0)
    b = randn((96,), dtype, g)
    assert triton_ln.TUNING.get().config(96, 6, H200_SMS).block_m == 1
    with triton_ln.TUNING.override(sms=H200_SMS):
        run_all_ops_checked(x, r, w, b, dtype)


@pytest.mark.parametrize(
    "width,max_fused,loop_block,dtype",
    [
        (1000, 512, 256, torch.float32),
        (1000, 512, 256, torch.float16),
        (1000, 512, 256, torch.bfloat16),
        (4099, 2048, 1024, torch.float32),
        (17000, None, None, torch.bfloat16),
    ],
    ids=["1000-fp32", "1000-fp16", "1000-bf16", "4099-fp32", "17000-bf16"],
)
def test_triton_looped_wide_rows(width: int, max_fused: int | None, loop_block: int | None, dtype: torch.dtype) -> None:
    """The chunked path for rows wider than max_fused_width (forced small, and the real threshold once)."""
    small = {"max_fused_width": max_fused, "loop_block": loop_block} if max_fused is not None else {}
    rows = 3 if width < 17000 else 1
    g = gen("wide", width, dtype)
    x = randn((rows, width), dtype, g, scale=2.0, shift=3.0)
    r = randn((rows, width), dtype, g)
    w = randn((width,), dtype, g, shift=1.0)
    b = randn((width,), dtype, g)
    with triton_ln.TUNING.override(**small):
        assert not triton_ln.TUNING.get().config(width, rows, 1).single_pass
        run_all_ops_checked(x, r, w, b, dtype)


@pytest.mark.usefixtures("packed")
@pytest.mark.parametrize("dtype", [torch.bfloat16], ids=["bf16"])
def test_triton_strided_rows(dtype: torch.dtype) -> None:
    """x = big[:, :n] (row stride != width): read in place, no copy; outputs contiguous."""
    rows, n = 45, 1000
    g = gen("strided", dtype)
    big = randn((rows, n + 40), dtype, g, scale=2.0, shift=1.0)
    x = big[:, 17 : 17 + n]
    assert not x.is_contiguous()
    w = randn((n,), dtype, g, shift=1.0)
    b = randn((n,), dtype, g)
    big0 = big.clone()
    check_close("rms_norm strided", triton_ln.rms_norm(x, w), ref.rms_norm(x, w), tol("rms_norm", dtype))
    check_close("layer_norm strided", triton_ln.layer_norm(x, w, b), ref.layer_norm(x, w, b), tol("layer_norm", dtype))
    assert torch.equal(big, big0)


@pytest.mark.usefixtures("packed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_triton_fused_add_strided_in_place(dtype: torch.dtype) -> None:
    """In-place on strided views: the views change as the reference says, the rest of each buffer stays."""
    rows, n = 33, 1000
    g = gen("fused_strided", dtype)
    big_x = randn((rows, n + 24), dtype, g)
    big_r = randn((rows, n + 8), dtype, g, scale=2.0)
    w = randn((n,), dtype, g, shift=1.0)
    w0 = w.clone()
    bx, br = big_x.clone(), big_r.clone()
    ref.fused_add_rms_norm(bx[:, 24:], br[:, :n], w)
    triton_ln.fused_add_rms_norm(big_x[:, 24:], big_r[:, :n], w)
    t = tol("fused_add_rms_norm", dtype)
    check_close("fused_add strided x", big_x[:, 24:], bx[:, 24:], t)
    check_close("fused_add strided residual", big_r[:, :n], br[:, :n], t)
    assert torch.equal(big_x[:, :24], bx[:, :24]) and torch.equal(big_r[:, n:], br[:, n:])
    assert torch.equal(w, w0)


@pytest.mark.usefixtures("packed")
def test_triton_fused_add_non_viewable_3d() -> None:
    """3-D strided tensors that cannot be viewed as rows go through a temporary and are written back."""
    g = gen("3d")
    big_x = randn((3, 10, 70), torch.float32, g)
    big_r = randn((3, 10, 64), torch.float32, g)
    x, r = big_x[:, 2:9, 3:67], big_r[:, 1:8, :]
    w = randn((64,), torch.float32, g, shift=1.0)
    bx, br = big_x.clone(), big_r.clone()
    ref.fused_add_rms_norm(bx[:, 2:9, 3:67], br[:, 1:8, :], w)
    triton_ln.fused_add_rms_norm(x, r, w)
    check_close("fused_add 3d x", big_x, bx, 1e-5)
    check_close("fused_add 3d residual", big_r, br, 1e-5)
    assert torch.equal(big_x[:, :2], bx[:, :2]) and torch.equal(big_r[:, 8:], br[:, 8:])


@pytest.mark.usefixtures("packed")
def test_triton_3d_input_and_mixed_weight_dtype() -> None:
    """[batch, tokens, hidden] input; a float32 weight with bfloat16 activations keeps the bf16 output."""
    g = gen("mixed")
    x = randn((2, 5, 1000), torch.bfloat16, g)
    w = randn((1000,), torch.float32, g, shift=1.0)
    b = randn((1000,), torch.float32, g)
    out = triton_ln.rms_norm(x, w)
    assert out.shape == x.shape and out.dtype == torch.bfloat16
    check_close("rms_norm 3d", out, ref.rms_norm(x, w), tol("rms_norm", torch.bfloat16))
    out = triton_ln.layer_norm(x, w, b)
    assert out.dtype == torch.bfloat16
    check_close("layer_norm 3d", out, ref.layer_norm(x, w, b), tol("layer_norm", torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("rows,width", [(5, 1000), (2, 4096)])  # multi-row tile with masked columns; exact width
def test_triton_layer_norm_centred_epilogue_at_decode_sizes(
    rows: int, width: int, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Launches of fewer than `ln_centered_programs` programs take Liger-Kernel's layer_norm epilogue (the output
    from the float32 x - mean), others convert the row again; rms_norm has no such variant. Both match the
    reference, and each other bit for bit (the same arithmetic: a 16-bit row converts exactly)."""
    g = gen("ln-centred", rows, width, dtype)
    x = randn((rows, width), dtype, g, scale=2.0, shift=4.0)
    w = randn((width,), dtype, g, shift=1.0)
    b = randn((width,), dtype, g)
    seen: list[dict[str, object]] = []
    launch = triton_ln.tracing.launch

    def spy(kernel: object, grid: object) -> object:
        run = launch(kernel, grid)
        return lambda *args, **kwargs: (seen.append(kwargs), run(*args, **kwargs))[1]

    monkeypatch.setattr(triton_ln.tracing, "launch", spy)
    centred, rms = triton_ln.layer_norm(x, w, b, 1e-5), triton_ln.rms_norm(x, w, 1e-6)
    with triton_ln.TUNING.override(ln_centered_programs=0):
        again = triton_ln.layer_norm(x, w, b, 1e-5)
    assert [k["CENTERED"] for k in seen] == [True, False, False]
    check_close("layer_norm centred", centred, ref.layer_norm(x, w, b, 1e-5), tol("layer_norm", dtype))
    check_close("rms_norm", rms, ref.rms_norm(x, w, 1e-6), tol("rms_norm", dtype))
    assert torch.equal(centred, again)


def test_launch_config_shapes() -> None:
    """The launch heuristic: power-of-two tiles covering the row, bounded warps, decode spread over programs."""
    for sms in (1, 78, H200_SMS):
        for n in (7, 64, 128, 1000, 4096, 4099, 8192, 16384):
            for rows in (1, 8, 64, 300, 4096, 32768):
                bm, bn, warps, single = triton_ln.TUNING.get().config(n, rows, sms)
                assert single and bn >= n and bn & (bn - 1) == 0 and bm & (bm - 1) == 0
                assert 1 <= warps <= 16 and bm * bn <= max(DEFAULTS.row_tile, bn)
                assert bm == 1 or -(-rows // bm) >= DEFAULTS.programs_per_sm * sms
    assert triton_ln.TUNING.get().config(8192, 8192, H200_SMS) == (1, 8192, 16, True)
    assert triton_ln.TUNING.get().config(128, 32768, H200_SMS)[:2] == (32, 128)
    bm, bn, warps, single = triton_ln.TUNING.get().config(20000, 64, H200_SMS)
    assert (bm, single) == (1, False) and bn == DEFAULTS.loop_block


def test_launch_config_follows_the_sm_count() -> None:
    """Programs per launch scale with the device's SMs, not a fixed GPU: 264 rows of 128 pack 2 to a
    program on a 66-SM part (132 programs, 2 per SM) and 1 per program on a 132-SM H200."""
    assert triton_ln.TUNING.get().config(128, 264, 66).block_m == 2
    assert triton_ln.TUNING.get().config(128, 264, H200_SMS).block_m == 1
    with triton_ln.TUNING.override(programs_per_sm=1):
        assert triton_ln.TUNING.get().config(128, 264, H200_SMS).block_m == 2
    assert triton_ln.TUNING.get() is DEFAULTS


# ------------------------------------------------------------------------------------ reference, aten


def test_reference_against_float64() -> None:
    """The torch references against independent float64 formulas."""
    g = gen("f64")
    x = torch.randn(7, 300, generator=g, dtype=torch.float64)
    r = torch.randn(7, 300, generator=g, dtype=torch.float64)
    w = torch.randn(300, generator=g, dtype=torch.float64) + 1.0
    b = torch.randn(300, generator=g, dtype=torch.float64)
    rms64 = x / (x.square().sum(-1, keepdim=True) / 300 + 1e-6).sqrt() * w
    check_close("ref rms_norm", ref.rms_norm(x.float(), w.float()), rms64, 1e-6)
    mu = x.sum(-1, keepdim=True) / 300
    var = ((x - mu) ** 2).sum(-1, keepdim=True) / 300
    check_close(
        "ref layer_norm", ref.layer_norm(x.float(), w.float(), b.float()), (x - mu) / (var + 1e-5).sqrt() * w + b, 1e-6
    )
    xs, rs = x.float().clone(), r.float().clone()
    ref.fused_add_rms_norm(xs, rs, w.float())
    s = x + r
    check_close("ref fused residual", rs, s, 1e-6)
    check_close("ref fused x", xs, s / (s.square().mean(-1, keepdim=True) + 1e-6).sqrt() * w, 1e-6)


def test_reference_rounds_sum_before_norm() -> None:
    """fused_add_rms_norm normalises the residual as stored in bf16, not the float32 sum."""
    g = gen("round")
    x = randn((4, 256), torch.bfloat16, g)
    r = randn((4, 256), torch.bfloat16, g)
    w = randn((256,), torch.bfloat16, g, shift=1.0)
    xs, rs = x.clone(), r.clone()
    ref.fused_add_rms_norm(xs, rs, w)
    assert torch.equal(rs, (x.float() + r.float()).bfloat16())
    assert torch.equal(xs, ref.rms_norm(rs, w))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_aten_backend(dtype: torch.dtype) -> None:
    g = gen("aten", dtype)
    x = randn((33, 1000), dtype, g, scale=2.0, shift=1.0)
    w = randn((1000,), dtype, g, shift=1.0)
    b = randn((1000,), dtype, g)
    check_close("aten rms_norm", aten_ln.rms_norm(x, w, 1e-6), ref.rms_norm(x, w, 1e-6), tol("rms_norm", dtype))
    check_close(
        "aten layer_norm", aten_ln.layer_norm(x, w, b, 1e-5), ref.layer_norm(x, w, b, 1e-5), tol("layer_norm", dtype)
    )


def test_torch_compile_backend() -> None:
    """One small float32 case per op: inductor's C++ compile on CPU costs seconds per graph."""
    from kcatalog.kernels.compiled import layernorm as compiled_ln

    g = gen("compiled")
    x = randn((8, 96), torch.float32, g)
    r = randn((8, 96), torch.float32, g)
    w = randn((96,), torch.float32, g, shift=1.0)
    b = randn((96,), torch.float32, g)
    check_close("compiled rms_norm", compiled_ln.rms_norm(x, w), ref.rms_norm(x, w), 1e-5)
    check_close("compiled layer_norm", compiled_ln.layer_norm(x, w, b), ref.layer_norm(x, w, b), 1e-5)
    xc, rc, xr, rr = x.clone(), r.clone(), x.clone(), r.clone()
    assert compiled_ln.fused_add_rms_norm(xc, rc, w) is None
    ref.fused_add_rms_norm(xr, rr, w)
    check_close("compiled fused_add x", xc, xr, 1e-5)
    check_close("compiled fused_add residual", rc, rr, 1e-5)
    assert compiled_ln.rms_norm.__name__ == "rms_norm" and compiled_ln.rms_norm.__doc__ == ref.rms_norm.__doc__


# ------------------------------------------------------------------------------------------ lazy_compile


def test_lazy_compile_compiles_once_on_first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """No compile at wrap time; exactly one compile under concurrent first calls; dynamic=False."""
    from kcatalog.kernels.compiled._lazy import lazy_compile

    calls: list[dict[str, object]] = []
    started = threading.Event()

    def fake_compile(fn, **kwargs):  # noqa: ANN001, ANN003, ANN202
        calls.append(kwargs)
        started.wait(timeout=1.0)  # widen the race window
        return lambda *a, **k: ("compiled", fn(*a, **k))

    def double(v: int) -> int:
        """Doubles."""
        return 2 * v

    monkeypatch.setattr(torch, "compile", fake_compile)
    wrapped = lazy_compile(double)
    assert calls == [] and wrapped.__name__ == "double" and wrapped.__doc__ == "Doubles."
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(wrapped(3))) for _ in range(8)]
    for t in threads:
        t.start()
    started.set()
    for t in threads:
        t.join()
    assert results == [("compiled", 6)] * 8
    assert calls == [{"dynamic": False}]
    assert wrapped(5) == ("compiled", 10) and len(calls) == 1
