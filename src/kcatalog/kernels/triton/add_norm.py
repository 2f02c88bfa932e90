"""Triton kernel for the functional residual add + RMSNorm: layernorm.fused_add_rms_norm's kernel with the two
results written to new tensors instead of over x and residual. It shares that kernel's tiles and tunables
(layernorm.TUNING) and its row helpers; it lives in a module of its own so that layernorm's kernel digest, which
the tuned table records, stays as it is."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import tracing
from ._rows import (
    as_rows,
    as_vector,
    cdiv,
    chunk_cols,
    early_vec,
    inv_rms,
    load_chunk,
    load_row,
    load_vec,
    row_ptrs,
    store_chunk,
    store_rows,
)
from .layernorm import TUNING, _norm_tile


@triton.jit
def _add_rms_norm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, n_rows, n_cols, stride_x, stride_r, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr, LOOP_STAGES: tl.constexpr,
    EVEN: tl.constexpr = False, LATE_W: tl.constexpr = False,
):  # fmt: skip
    """y = rms_norm(x + r) * w and s = x + r (rounded to r's dtype), y and s contiguous [n_rows, n_cols]."""
    x_rows, row_ok = row_ptrs(x_ptr, tl.program_id(0), n_rows, stride_x, BLOCK_M)
    r_rows, _ = row_ptrs(r_ptr, tl.program_id(0), n_rows, stride_r, BLOCK_M)
    y_rows, _ = row_ptrs(y_ptr, tl.program_id(0), n_rows, n_cols, BLOCK_M)
    s_rows, _ = row_ptrs(s_ptr, tl.program_id(0), n_rows, n_cols, BLOCK_M)
    if SINGLE_PASS:
        cols, col_ok = chunk_cols(0, n_cols, BLOCK_N)
        x = load_row(x_rows + cols[None, :], col_ok[None, :], EVEN, "").to(tl.float32)
        r = load_row(r_rows + cols[None, :], col_ok[None, :], EVEN, "").to(tl.float32)
        w = early_vec(w_ptr + cols, col_ok, EVEN, LATE_W)
        sr = (x + r).to(s_ptr.dtype.element_ty)  # the sum is rounded to the stored dtype before the norm
        store_rows(s_rows + cols[None, :], sr, row_ok, col_ok, BLOCK_M, EVEN, "")
        y = _norm_tile(sr, w, 0.0, w_ptr, None, cols, col_ok, n_cols, eps, EVEN, LATE_W, False)
        store_rows(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN, "")
    else:  # rows too wide for registers: the sums' squares, then the sums written and normalised from them
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            s = load_chunk(x_rows, cols, col_ok, 0.0, "") + load_chunk(r_rows, cols, col_ok, 0.0, "")
            s = s.to(s_ptr.dtype.element_ty)
            store_chunk(s_rows, cols, s, row_ok, col_ok)
            s = s.to(tl.float32)
            acc += s * s
        rstd = inv_rms(tl.sum(acc, axis=1), n_cols, eps)
        tl.debug_barrier()  # the sums this program stored are read back below
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            s = load_chunk(s_rows, cols, col_ok, 0.0, "")
            w = load_vec(w_ptr + cols, col_ok, False)
            store_chunk(y_rows, cols, (s * rstd[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), row_ok, col_ok)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``summed = x + residual`` (rounded to the residual's dtype), ``(rms_norm(summed) * weight, summed)`` in one
    fused Triton kernel: x and residual read once, the two results (new contiguous tensors of x's shape, the norm
    in x's dtype, the sum in the residual's) written once; neither input changes."""
    if x.shape != residual.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} must have the same shape")
    n = x.shape[-1]
    normed = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    summed = torch.empty(x.shape, dtype=residual.dtype, device=x.device)
    if x.numel() == 0:
        return normed, summed
    x2, r2, w = as_rows(x), as_rows(residual), as_vector(weight, n, "weight")
    m = x2.shape[0]
    t = TUNING.get()
    block_m, block_n, num_warps, single = t.config(n, m, t.device_sms(x.device))
    n_tiles = cdiv(m, block_m)
    tracing.launch(_add_rms_norm_kernel, (n_tiles,))(
        x2, r2, w, normed, summed, m, n, x2.stride(0), r2.stride(0), eps,
        BLOCK_M=block_m, BLOCK_N=block_n, SINGLE_PASS=single, LOOP_STAGES=t.loop_stages,
        EVEN=block_n == n, LATE_W=n_tiles >= t.late_weights_programs, num_warps=num_warps,
    )  # fmt: skip
    return normed, summed
