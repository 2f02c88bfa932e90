"""Activation quantization as a Triton kernel (backend `triton`): dynamic per-token FP8 (e4m3fn).

One fused kernel, three compile-time modes picked by `QuantTuning.config`:

- PACKED (fp16/bf16, even width, 4-byte aligned rows, width <= 2 * max_packed_block): the row
  is loaded as 32-bit words, two values per word, and *kept packed* in registers while its absmax
  is reduced on the raw bits; each word is then unpacked, quantized and stored as one 16-bit pair
  of fp8 codes. Holding 2 values per register is what lets a 28672-wide bf16 row live in
  registers at 16 warps with room for 2 programs per SM (51 registers per thread in an offline
  sm_90 compile with triton 3.9; unpacked it needs ~90: 1 program per SM, whose load / reduce /
  store phases then never overlap).
- one pass from registers (fp32, odd widths, widths <= max_fused_block): same, one value per
  register; short rows are stacked several per program.
- TWO_PASS (wider rows): absmax over `chunk`-wide chunks, then a second pass that re-reads the
  row (from L2, normally) to quantize it.

Each row's scale is ``max(absmax / 448, 1 / (448 * 512))`` with IEEE division, and the elements
use a correctly rounded ``x / scale`` (reciprocal multiply plus one fma correction), so the codes
are bit-identical to the torch reference's (and vLLM's) true division, not just close.

float8 rounding: on CUDA the float32 -> float8e4nv cast is the hardware's round-to-nearest-even,
saturating ``cvt.rn.satfinite.e4m3x2.f32`` (sm_89+). The Triton *interpreter*'s cast (seen on
triton 3.9, ``interpreter._convert_float``) is not: it rounds ties away from zero (17 -> 18), drops
the mantissa carry when rounding up crosses into an odd exponent (1.9375 -> 1.0 instead of 2.0),
and truncates results in the e4m3 subnormal range (0.001 -> 0, 0.005 -> 0.0039) - a few percent
to over 10% of codes, depending on the data, come out wrong. So when the kernel runs on CPU
tensors (which only the interpreter can do) it first snaps each value onto the e4m3 grid itself,
round-to-nearest-even in float32 arithmetic, which makes the interpreter's cast exact; compiled
GPU kernels skip that step (SNAP is a constexpr, False for CUDA tensors) and let the hardware do
the same rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..torch.quantization import MIN_SCALE
from ._rows import Spread, Tunables, as_rows, cdiv, next_power_of_2

#: A quantization launch: rows and load units per program, two passes or one, warps.
QuantConfig = NamedTuple("QuantConfig", [("block_m", int), ("block_n", int), ("two_pass", bool), ("num_warps", int)])


@dataclass(frozen=True)
class QuantTuning(Spread):
    """The quantization kernel's tunables and launch configuration (:meth:`config`).

    `max_packed_block`: widest padded row, in 2-value words, held in registers by the PACKED mode (32768
    values); `max_fused_block`: widest padded row, in values, held in registers by the unpacked one-pass
    mode; `tile`: load units (values or words) per program for short rows (several rows share a program);
    `chunk`: chunk width of the TWO_PASS mode.
    """

    max_packed_block: int = 16384
    max_fused_block: int = 16384
    tile: int = 4096
    chunk: int = 8192

    def config(self, n_rows: int, n_units: int, packed: bool, sms: int) -> QuantConfig:
        """(BLOCK_M, BLOCK_N, TWO_PASS, num_warps) for rows of n_units load units on `sms` SMs: pure, tunable.

        A load unit is a 2-value word in PACKED mode, else one value. One pass while the padded row
        fits (`max_packed_block` words / `max_fused_block` values), at ~32 units per thread (4 warps up
        to 4096 units, 16 warps from 16384): the whole row in registers, several 16-byte loads in
        flight per thread, and (measured with ptxas for sm_90, bf16) 50 registers at 16384 words x
        16 warps, so 2 programs fit per SM. Short rows are stacked up to `tile` units per program
        unless that leaves fewer than `programs_per_sm` programs per SM. Wider rows: TWO_PASS over
        `chunk`-wide chunks, one row per program, 8 warps.
        """
        block_n = next_power_of_2(n_units)
        if block_n > (self.max_packed_block if packed else self.max_fused_block):
            return QuantConfig(1, self.chunk, True, 8)
        block_m = min(next_power_of_2(n_rows), max(1, self.tile // block_n))
        while block_m > 1 and cdiv(n_rows, block_m) < self.programs_per_sm * sms:
            block_m //= 2
        return QuantConfig(block_m, block_n, False, max(4, min(16, (block_m * block_n) // 1024)))


#: The tunables in effect; ``with TUNING.override(programs_per_sm=0): ...`` changes them within a block.
TUNING = Tunables(__name__, QuantTuning())


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
def _scaled(x, scale, inv_scale, SNAP: tl.constexpr):
    """clamp(x / scale, -448, 448) in float32, ready for the float8 cast; scale/inv_scale are [BLOCK_M, 1].

    Correctly rounded x / scale without a per-element division (Markstein): q0 = RN(x * inv) with
    inv = RN(1 / scale) is within 1 ulp, the fma residual x - q0 * scale is exact, and one fma
    correction rounds correctly - two fmas instead of a division. (A zero may come out as +0
    where the division gives -0.)
    """
    q0 = x * inv_scale
    y = tl.fma(tl.fma(-q0, scale, x), inv_scale, q0)
    y = tl.minimum(tl.maximum(y, -448.0), 448.0)
    if SNAP:
        y = _snap_to_e4m3_grid(y)
    return y


@triton.jit
def _fp8_code(x, scale, inv_scale, SNAP: tl.constexpr):
    """The float8_e4m3fn bit pattern of clamp(x / scale), widened to uint32 for packing."""
    return _scaled(x, scale, inv_scale, SNAP).to(tl.float8e4nv).to(tl.uint8, bitcast=True).to(tl.uint32)


@triton.jit
def _half_bits_to_f32(bits, IS_BF16: tl.constexpr):
    """float32 value of a 16-bit float held in the low half of a uint32."""
    if IS_BF16:
        return (bits << 16).to(tl.float32, bitcast=True)
    else:
        return bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _row_absmax(x):
    """Row-wise max |x| of a [BLOCK_M, BLOCK_N] tile, float32 [BLOCK_M].

    Reduced on the sign-cleared bit patterns: for non-negative IEEE floats integer order is float
    order, so this is exactly the float absmax (a NaN, having the largest pattern, propagates).
    """
    if x.dtype == tl.float32:
        bits = x.to(tl.int32, bitcast=True) & 0x7FFFFFFF
        return tl.max(bits, axis=1).to(tl.float32, bitcast=True)
    else:
        bits = x.to(tl.int16, bitcast=True) & 0x7FFF
        return tl.max(bits, axis=1).to(tl.int16).to(x.dtype, bitcast=True).to(tl.float32)


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
    PACKED: tl.constexpr,
    IS_BF16: tl.constexpr,
    TWO_PASS: tl.constexpr,
    SNAP: tl.constexpr,
):
    # In PACKED mode n_cols, strides and BLOCK_N count 2-value words, not values.
    row0 = tl.program_id(0) * BLOCK_M
    rows = tl.arange(0, BLOCK_M)
    rmask = (row0 + rows) < n_rows
    cols = tl.arange(0, BLOCK_N)
    if PACKED:
        xw = x_ptr.to(tl.pointer_type(tl.uint32)) + row0.to(tl.int64) * stride_x
        qw = q_ptr.to(tl.pointer_type(tl.uint16)) + row0.to(tl.int64) * stride_q
        m = rmask[:, None] & (cols < n_cols)[None, :]
        w = tl.load(xw + rows[:, None] * stride_x + cols[None, :], mask=m, other=0)
        amax_bits = tl.max(tl.maximum(w & 0x7FFF, (w >> 16) & 0x7FFF), axis=1)
        amax = _half_bits_to_f32(amax_bits, IS_BF16)
    else:
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
            x = tl.load(x_rows + cols[None, :], mask=m, other=0.0)
            amax = _row_absmax(x)
    # Per-row scalars with IEEE division, so the scale is bit-identical to the reference's.
    scale = tl.maximum(tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32)), min_scale)
    tl.store(scale_ptr + row0 + rows, scale, mask=rmask)
    inv_scale = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)[:, None]
    scale = scale[:, None]
    if PACKED:
        lo = _fp8_code(_half_bits_to_f32(w & 0xFFFF, IS_BF16), scale, inv_scale, SNAP)
        hi = _fp8_code(_half_bits_to_f32(w >> 16, IS_BF16), scale, inv_scale, SNAP)
        tl.store(qw + rows[:, None] * stride_q + cols[None, :], (lo | (hi << 8)).to(tl.uint16), mask=m)
    elif TWO_PASS:
        for c0 in range(0, n_cols, BLOCK_N):
            m = rmask[:, None] & ((c0 + cols) < n_cols)[None, :]
            x = tl.load(x_rows + c0 + cols[None, :], mask=m, other=0.0).to(tl.float32)
            y = _scaled(x, scale, inv_scale, SNAP)
            tl.store(q_rows + c0 + cols[None, :], y.to(q_ptr.dtype.element_ty), mask=m)
    else:
        y = _scaled(x.to(tl.float32), scale, inv_scale, SNAP)
        tl.store(q_rows + cols[None, :], y.to(q_ptr.dtype.element_ty), mask=m)


def per_token_quant_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token (per-row) FP8 quantization, as vLLM's ``dynamic_per_token_scaled_fp8_quant``.

    x: [T, H] float32/float16/bfloat16 (rows may be strided). Returns (q, scale): q float8_e4m3fn
    [T, H] and scale float32 [T, 1], ``scale = max(absmax(row) / 448, 1 / (448 * 512))`` and
    ``q = clamp(x / scale, -448, 448)`` rounded to nearest even. The division is correctly
    rounded, so codes match the reference's exactly (zeros up to sign).
    """
    n_cols = x.shape[-1]
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
    if q.numel() == 0:
        return q, scale
    x2 = as_rows(x)
    q2 = q.view(-1, n_cols)
    n_rows = x2.shape[0]
    stride_x, stride_q = x2.stride(0), q2.stride(0)
    t = TUNING.get()
    packed = (
        x.dtype in (torch.float16, torch.bfloat16)
        and n_cols % 2 == 0
        and (stride_x % 2 == 0 or n_rows == 1)
        and x2.data_ptr() % 4 == 0
        and n_cols // 2 <= t.max_packed_block
    )
    if packed:
        n_units, stride_x, stride_q = n_cols // 2, stride_x // 2, stride_q // 2
    else:
        n_units = n_cols
    block_m, block_n, two_pass, num_warps = t.config(n_rows, n_units, packed, t.device_sms(x.device))
    _per_token_quant_fp8_kernel[(cdiv(n_rows, block_m),)](
        x2,
        q2,
        scale,
        n_rows,
        n_units,
        stride_x,
        stride_q,
        MIN_SCALE,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        PACKED=packed,
        IS_BF16=x.dtype == torch.bfloat16,
        TWO_PASS=two_pass,
        SNAP=x.device.type == "cpu",
        num_warps=num_warps,
    )
    return q, scale
