"""Gated activations as Triton kernels (backend `triton`): one fused pass, act(gate) * up.

``x[..., 2d] = [gate | up]`` is read once and ``out[..., d]`` written once; math in float32,
one rounding to the input dtype. The kernel tiles the (rows, d) output in 2-D: each program
owns a [BLOCK_M, BLOCK_N] tile; one 1-D grid numbers the tiles with column blocks fastest (one
scalar division per program, none per element), and each thread issues 16-byte loads
of both halves and 16-byte stores (ld/st.global.v4.b32 in an offline sm_90 compile, triton 3.9). The up half
sits at column offset d; Triton knows it is aligned when d is a multiple of 16, which its
divisible-by-16 argument specialisation detects (true of every real intermediate size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..tracing import launch
from ._rows import Spread, Tunables, as_rows, cdiv, next_power_of_2

_ACT_SILU = 0
_ACT_GELU_ERF = 1
_ACT_GELU_TANH = 2


#: An activation launch: output rows and columns per program, and warps.
ActConfig = NamedTuple("ActConfig", [("block_m", int), ("block_n", int), ("num_warps", int)])


@dataclass(frozen=True)
class ActTuning(Spread):
    """The gated activations' tunables and launch configuration (:meth:`config`).

    `tile`: output elements per program at large shapes (per input half: 8 KiB of bf16 read, 8 KiB written);
    `min_tile`: never shrink a tile below this many elements when spreading a small problem over the GPU;
    `max_block_n`: the widest column block (divides the common intermediate sizes: 11008, 14336, 28672 / 2).
    """

    tile: int = 4096
    min_tile: int = 1024
    max_block_n: int = 2048

    def config(self, n_rows: int, d: int, sms: int) -> ActConfig:
        """(BLOCK_M, BLOCK_N, num_warps) for an (n_rows, d) output on `sms` SMs: pure, so it can be tuned or tested.

        Big problems get ~`tile`-element tiles (BLOCK_N up to 2048 columns, the rest as rows), i.e.
        16 elements per thread at 8 warps: two 16-byte vectors of gate and two of up in flight per
        thread, with registers to spare for several resident programs per SM (on an H200 the tile
        shape hardly matters there: 1x1024 .. 4x1024 .. 2x2048 within 0.3%). Short rows stack up to
        tile // BLOCK_N rows per program. Small (decode) problems shrink the tile, rows first, until
        there are `programs_per_sm` programs per SM or the tile reaches `min_tile` elements; they get ~8
        elements per thread (1x1024 at 4 warps: 1.3 us under CUDA-graph replay at 1 x 2*14336, against
        1.6 us at 2 warps, where each thread's serial exp/divide chain sets the latency).
        """
        block_n = min(next_power_of_2(d), self.max_block_n)
        block_m = min(next_power_of_2(n_rows), max(1, self.tile // block_n))

        def programs() -> int:
            return cdiv(n_rows, block_m) * cdiv(d, block_n)

        while programs() < self.programs_per_sm * sms and block_m * block_n > self.min_tile:
            if block_m > 1:
                block_m //= 2
            else:
                block_n //= 2
        return ActConfig(block_m, block_n, max(1, min(8, (block_m * block_n) // 256)))


#: The tunables in effect; ``with TUNING.override(programs_per_sm=0): ...`` changes them within a block.
TUNING = Tunables(__name__, ActTuning())


@triton.jit
def _normal_cdf(x):
    """Phi(x), the standard normal CDF, in float32: gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).

    Phi(-t) = 2^P(t) for t = |x|, P a degree-10 polynomial fit (Chebyshev nodes, float32 coefficients) of
    log2 Phi(-t) on [0, 5.5]; Phi(x) = 1 - Phi(-x) for x >= 0. One exp2 and ten fmas instead of libdevice's
    erff (two polynomials and per-element coefficient selects): on an H200 the erf GeGLU kernel issued ~41
    instructions per element, enough to make it compute-bound (0.81 of copy bandwidth at 8192 x 2*28672 bf16,
    vs 0.96 for SiLU); this form issues ~24 (0.97). Accuracy (float32 evaluation): relative error of Phi(-t)
    <= 1.1e-6 on [0, 4], <= 2.8e-6 on [0, 5.5] (the exponent reaches -27 there), plus ex2.approx's ~2e-7 on
    the GPU; ||gelu - exact|| / ||exact|| ~5e-8 on N(0, s^2) inputs, below torch's own float32 gelu (8e-8).
    Past t = 5.5 the tail (< 2e-8) is returned as 0, as float32 1 + erf(x / sqrt 2) rounds it there.
    """
    t = tl.minimum(tl.abs(x), 5.5)
    p = -1.7253190875976543e-08
    p = p * t + 5.477612603499438e-07
    p = p * t - 7.4583854257070925e-06
    p = p * t + 5.484552457346581e-05
    p = p * t - 0.00020051063620485365
    p = p * t - 0.00017613508680369705
    p = p * t + 0.0071806274354457855
    p = p * t - 0.05261562019586563
    p = p * t - 0.4591561555862427
    p = p * t - 1.1511132717132568
    p = p * t - 0.9999998211860657
    tail = tl.where(tl.abs(x) < 5.5, tl.exp2(p), 0.0)
    return tl.where(x < 0, tail, 1.0 - tail)


@triton.jit
def _mul_sigmoid(g, z):
    """g * sigmoid(z), overflow-free: exp only ever sees -|z| <= 0, so it lies in (0, 1]."""
    e = tl.exp(-tl.abs(z))
    return tl.where(z >= 0, g, g * e) / (1.0 + e)


@triton.jit
def _act_and_mul_kernel(
    x_ptr,
    out_ptr,
    n_rows,
    d,
    stride_x,
    stride_out,
    ACT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # One 1-D grid, column blocks varying fastest: consecutive programs stream consecutive memory (a row's
    # column blocks, then the next rows), as torch.compile's flat pointwise kernels do.
    n_col_blocks = tl.cdiv(d, BLOCK_N)
    pid = tl.program_id(0)
    pid_m = pid // n_col_blocks
    pid_n = pid - pid_m * n_col_blocks
    row0 = pid_m * BLOCK_M
    rows = tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = ((row0 + rows) < n_rows)[:, None] & (cols < d)[None, :]
    # 64-bit base offset once per program; in-tile offsets stay 32-bit.
    x_tile = x_ptr + row0.to(tl.int64) * stride_x + rows[:, None] * stride_x + cols[None, :]
    gate = tl.load(x_tile, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_tile + d, mask=mask, other=0.0).to(tl.float32)
    if ACT == 0:
        act = _mul_sigmoid(gate, gate)  # silu(g) = g * sigmoid(g)
    elif ACT == 1:
        act = gate * _normal_cdf(gate)
    else:
        # gelu_tanh(g) = 0.5 g (1 + tanh(u)) = g * sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3):
        # no tanh and no 1 - tanh cancellation; accurate to a few float32 ulps everywhere. The cubic
        # sees g clamped to +-20 (|2u| >= 600 there: sigmoid is exactly 0 or 1 in float32 either
        # way), so g^3 cannot overflow either.
        gc = tl.minimum(tl.maximum(gate, -20.0), 20.0)
        two_u = gc * (1.5957691216057308 + 0.07135481627260025 * gc * gc)
        act = _mul_sigmoid(gate, two_u)
    y = act * up
    out_tile = out_ptr + row0.to(tl.int64) * stride_out + rows[:, None] * stride_out + cols[None, :]
    tl.store(out_tile, y.to(out_ptr.dtype.element_ty), mask=mask)


def _act_and_mul(x: torch.Tensor, act: int) -> torch.Tensor:
    """Shared wrapper: flatten leading dims (a view when possible), allocate, launch."""
    if x.shape[-1] % 2:
        raise ValueError(f"last dim must be even (gate and up halves), got {x.shape[-1]}")
    d = x.shape[-1] // 2
    out = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    x2 = as_rows(x)
    out2 = out.view(-1, d)
    n_rows = x2.shape[0]
    t = TUNING.get()
    block_m, block_n, num_warps = t.config(n_rows, d, t.device_sms(x.device))
    grid = (cdiv(n_rows, block_m) * cdiv(d, block_n),)
    launch(_act_and_mul_kernel, grid)(
        x2,
        out2,
        n_rows,
        d,
        x2.stride(0),
        out2.stride(0),
        ACT=act,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=num_warps,
    )
    return out


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU: ``silu(x[..., :d]) * x[..., d:]`` with ``d = x.shape[-1] // 2``; output in x.dtype.

    Rows may be strided (``x = big[:, :2 * d]``); a non-unit last-dim stride costs one copy.
    """
    return _act_and_mul(x, _ACT_SILU)


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GeGLU: ``gelu(x[..., :d], approximate) * x[..., d:]``; approximate is "none" (erf) or "tanh"."""
    if approximate == "none":
        return _act_and_mul(x, _ACT_GELU_ERF)
    if approximate == "tanh":
        return _act_and_mul(x, _ACT_GELU_TANH)
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
