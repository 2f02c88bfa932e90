"""Activation quantization as a Triton kernel (backend `triton`): dynamic per-token FP8 (e4m3fn).

Rows up to _MAX_FUSED_BLOCK elements are quantized in one pass from registers: the row (or a
few short rows) is loaded once, reduced to its absmax, scaled and stored as float8, so the
input is read exactly once. Longer rows fall back to two passes over chunks (absmax, then
quantize); the second read of the row usually hits L2.

On CUDA the float32 -> float8e4nv cast is the hardware's round-to-nearest-even, saturating
conversion (``cvt.rn.satfinite.e4m3x2.f32``, sm_89+). The Triton *interpreter*'s cast (triton
3.6-3.9, ``_convert_float``) is not: it rounds ties away from zero, drops the mantissa carry when
rounding up crosses into an odd exponent (1.9375 -> 1.0 instead of 2.0) and flushes e4m3
subnormals to zero - about 1 in 9 of random codes come out wrong. So when the kernel runs on CPU
tensors (which only the interpreter can do) it first snaps each value onto the e4m3 grid itself,
round-to-nearest-even in float32 arithmetic, making the interpreter's cast exact; compiled GPU
kernels skip that step (the SNAP constexpr is False) and the hardware does the same rounding.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FP8_E4M3_MAX = 448.0
MIN_SCALE = 1.0 / (FP8_E4M3_MAX * 512.0)

_MAX_FUSED_BLOCK = 32768
"""Widest padded row held in registers for the one-pass kernel (rows of 28672 at 16 warps)."""
_TILE = 4096
"""Elements per program for short rows: several rows are stacked into one program."""
_CHUNK = 8192
"""Chunk width of the two-pass kernel for rows wider than _MAX_FUSED_BLOCK."""
_MIN_PROGRAMS = 264
"""Aim for at least this many programs (2 per SM of an H100/H200) before row stacking."""


@triton.jit
def _snap_to_e4m3_grid(y):
    """Round float32 ``y`` (|y| <= 448) to the nearest float8_e4m3fn value, ties to even; stays float32.

    The e4m3 spacing at |y| in [2^e, 2^(e+1)) is 2^(e-3), and 2^-9 in the subnormal range
    (|y| < 2^-6). Adding and subtracting 1.5 * 2^23 * spacing rounds |y| to a multiple of that
    spacing with float32's own round-to-nearest-even. The sign is copied back bitwise so -0 stays -0.
    """
    bits = y.to(tl.uint32, bitcast=True)
    sign = bits & 0x80000000
    mag = (bits & 0x7FFFFFFF).to(tl.float32, bitcast=True)
    pow2 = (bits & 0x7F800000).to(tl.float32, bitcast=True)  # 2^floor(log2|y|), 0 for 0/denormals
    spacing = tl.maximum(pow2 * 0.125, 0.001953125)
    magic = spacing * 12582912.0
    rounded = (mag + magic) - magic
    return (rounded.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def _quantize_store(q_ptrs, x, scale, inv_scale, mask, SNAP: tl.constexpr):
    """Store clamp(x / scale) as float8; scale and inv_scale = RN(1 / scale) are [BLOCK_M, 1]."""
    # Correctly rounded x / scale without a per-element division (Markstein): q0 = RN(x * inv) is
    # within 1 ulp, the fma residual x - q0 * scale is exact, and one fma correction rounds
    # correctly - bit-identical to the reference's (and vLLM's) true division, for 2 extra fmas.
    # (A zero x may come out as +0 instead of -0.)
    q0 = x * inv_scale
    y = tl.fma(tl.fma(-q0, scale, x), inv_scale, q0)
    y = tl.minimum(tl.maximum(y, -448.0), 448.0)
    if SNAP:
        y = _snap_to_e4m3_grid(y)
    tl.store(q_ptrs, y.to(q_ptrs.dtype.element_ty), mask=mask)


@triton.jit
def _per_token_quant_fp8_kernel(
    x_ptr,
    q_ptr,
    scale_ptr,
    n_rows,
    n_cols,
    stride_x,
    stride_q,
    min_scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TWO_PASS: tl.constexpr,
    SNAP: tl.constexpr,
):
    row0 = tl.program_id(0) * BLOCK_M
    rows = tl.arange(0, BLOCK_M)
    rmask = (row0 + rows) < n_rows
    cols = tl.arange(0, BLOCK_N)
    x_rows = x_ptr + row0.to(tl.int64) * stride_x + rows[:, None] * stride_x
    q_rows = q_ptr + row0.to(tl.int64) * stride_q + rows[:, None] * stride_q
    if TWO_PASS:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for c0 in range(0, n_cols, BLOCK_N):
            m = rmask[:, None] & ((c0 + cols) < n_cols)[None, :]
            x = tl.load(x_rows + c0 + cols[None, :], mask=m, other=0.0).to(tl.float32)
            acc = tl.maximum(acc, tl.abs(x))
        amax = tl.max(acc, axis=1)
    else:
        m = rmask[:, None] & (cols < n_cols)[None, :]
        x = tl.load(x_rows + cols[None, :], mask=m, other=0.0).to(tl.float32)
        amax = tl.max(tl.abs(x), axis=1)
    # Per-row scalars: IEEE division, so the scale is bit-identical to the torch reference's.
    scale = tl.maximum(tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32)), min_scale)
    tl.store(scale_ptr + row0 + rows, scale, mask=rmask)
    inv_scale = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)[:, None]
    scale = scale[:, None]
    if TWO_PASS:
        for c0 in range(0, n_cols, BLOCK_N):
            m = rmask[:, None] & ((c0 + cols) < n_cols)[None, :]
            x = tl.load(x_rows + c0 + cols[None, :], mask=m, other=0.0).to(tl.float32)
            _quantize_store(q_rows + c0 + cols[None, :], x, scale, inv_scale, m, SNAP)
    else:
        _quantize_store(q_rows + cols[None, :], x, scale, inv_scale, m, SNAP)


def _launch_config(n_rows: int, n_cols: int) -> tuple[int, int, bool, int]:
    """(BLOCK_M, BLOCK_N, TWO_PASS, num_warps): pure, so it can be tuned or tested.

    One pass while the padded row fits _MAX_FUSED_BLOCK, at ~32 elements per thread (4 warps
    for <= 4096, 16 warps at 16384; 64 per thread at 32768): the whole row in registers, each
    thread with several 16-byte loads in flight. Short rows are stacked up to _TILE elements per
    program unless that leaves fewer than ~2 programs per SM. Wider rows: two passes over
    _CHUNK-wide chunks, one row per program.
    """
    block_n = triton.next_power_of_2(n_cols)
    if block_n > _MAX_FUSED_BLOCK:
        return 1, _CHUNK, True, 8
    block_m = min(triton.next_power_of_2(n_rows), max(1, _TILE // block_n))
    while block_m > 1 and triton.cdiv(n_rows, block_m) < _MIN_PROGRAMS:
        block_m //= 2
    num_warps = max(4, min(16, (block_m * block_n) // 1024))
    return block_m, block_n, False, num_warps


def per_token_quant_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token (per-row) FP8 quantization, as vLLM's ``dynamic_per_token_scaled_fp8_quant``.

    x: [T, H] float32/float16/bfloat16 (rows may be strided). Returns (q, scale): q float8_e4m3fn
    [T, H] and scale float32 [T, 1], ``scale = max(absmax(row) / 448, 1 / (448 * 512))`` and
    ``q = clamp(x / scale, -448, 448)`` rounded to nearest even; the division is correctly
    rounded (as the reference's and vLLM's), so codes match them exactly (zeros up to sign).
    """
    n_cols = x.shape[-1]
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
    if q.numel() == 0:
        return q, scale
    if x.stride(-1) != 1:
        x = x.contiguous()
    x2 = x if x.dim() == 2 else x.reshape(-1, n_cols)
    q2 = q.view(-1, n_cols)
    n_rows = x2.shape[0]
    block_m, block_n, two_pass, num_warps = _launch_config(n_rows, n_cols)
    _per_token_quant_fp8_kernel[(triton.cdiv(n_rows, block_m),)](
        x2, q2, scale, n_rows, n_cols, x2.stride(0), q2.stride(0), MIN_SCALE,
        BLOCK_M=block_m, BLOCK_N=block_n, TWO_PASS=two_pass,
        SNAP=x.device.type == "cpu", num_warps=num_warps,
    )
    return q, scale
