"""Triton kernel for Gemma's RMSNorm, ``x * rsqrt(mean(x^2) + eps) * (1 + weight)``: one fused, single-pass kernel.

Composed of the row helpers in ``_rows`` the way the other normalisation kernels are: each program owns
``BLOCK_M`` whole rows in registers (``BLOCK_N = next_power_of_2(width)``), reads every element once, writes
every output once, float32 math, one cast on store; rows wider than ``max_fused_width`` loop over chunks (a
statistics pass, then a normalising pass that re-reads the row, mostly from L2). The ``1 +`` is applied to the
weight in float32 after it is loaded, so the checkpoint's weight is used as it is (no offset copy). Rows may be
strided (only the last dim must be unit-stride). The launch goes through ``tracing.launch``, so that
torch.compile traces it into the graph (the backend is declared traceable).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .. import tracing
from ._rows import (
    RowTiling,
    Tunables,
    as_rows,
    as_vector,
    cdiv,
    chunk_cols,
    early_vec,
    f32_again,
    inv_rms,
    late_vec,
    load_chunk,
    load_row,
    load_vec,
    row_ptrs,
    row_sum_sq,
    store_chunk,
    store_rows,
)


@dataclass(frozen=True)
class GemmaNormTuning(RowTiling):
    """Tunables of the Gemma RMSNorm kernel; the tiles and warps of rms_norm's (see layernorm.NormTuning),
    whose memory traffic it shares exactly: ~16 values per thread, weights loaded late in launches of at
    least `late_weights_programs` programs."""

    warp_steps: tuple[int, int, int, int] = (5793, 2896, 724, 362)
    warps_of_block: bool = False
    late_weights_programs: int = 1024


#: The tunables in effect; ``with TUNING.override(programs_per_sm=0): ...`` changes them within a block.
TUNING = Tunables(__name__, GemmaNormTuning())


@triton.jit
def _gemma_norm_kernel(
    x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr, LOOP_STAGES: tl.constexpr,
    EVEN: tl.constexpr = False, LATE_W: tl.constexpr = False,
):  # fmt: skip
    """y = x * rstd * (1 + w) per row. EVEN: n_cols == BLOCK_N, no column masks."""
    x_rows, row_ok = row_ptrs(x_ptr, tl.program_id(0), n_rows, stride_x, BLOCK_M)
    y_rows, _ = row_ptrs(y_ptr, tl.program_id(0), n_rows, stride_y, BLOCK_M)
    if SINGLE_PASS:
        cols, col_ok = chunk_cols(0, n_cols, BLOCK_N)
        xr = load_row(x_rows + cols[None, :], col_ok[None, :], EVEN, "")
        w = early_vec(w_ptr + cols, col_ok, EVEN, LATE_W)
        rstd = inv_rms(row_sum_sq(xr), n_cols, eps)
        w = late_vec(w, w_ptr + cols, col_ok, EVEN, LATE_W)
        y = f32_again(xr) * rstd[:, None] * (1.0 + w[None, :])
        store_rows(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN, "")
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            x = load_chunk(x_rows, cols, col_ok, 0.0, "evict_last")
            acc += x * x
        rstd = inv_rms(tl.sum(acc, axis=1), n_cols, eps)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            x = load_chunk(x_rows, cols, col_ok, 0.0, "evict_first")
            w = load_vec(w_ptr + cols, col_ok, False)
            store_chunk(y_rows, cols, (x * rstd[:, None] * (1.0 + w[None, :])).to(y_ptr.dtype.element_ty), row_ok,
                        col_ok)  # fmt: skip


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Gemma's RMSNorm over the last dim, ``x * rsqrt(mean(x^2) + eps) * (1 + weight)``, in ``x.dtype``.

    One fused Triton kernel; the output is a new contiguous tensor of ``x``'s shape.
    """
    n = x.shape[-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    w = as_vector(weight, n, "weight")
    x2 = as_rows(x)
    m = x2.shape[0]
    t = TUNING.get()
    block_m, block_n, num_warps, single = t.config(n, m, t.device_sms(x.device))
    n_tiles = cdiv(m, block_m)
    tracing.launch(_gemma_norm_kernel, (n_tiles,))(
        x2, w, out, m, n, x2.stride(0), n, eps,
        BLOCK_M=block_m, BLOCK_N=block_n, SINGLE_PASS=single, LOOP_STAGES=t.loop_stages, EVEN=block_n == n,
        LATE_W=n_tiles >= t.late_weights_programs, num_warps=num_warps,
    )  # fmt: skip
    return out
