"""Triton kernels for the normalisation layers' gradients: rms_norm, gemma_rms_norm, add_rms_norm and layer_norm.

One kernel (``_norm_backward_kernel``), composed of the row helpers in ``_rows`` as the forward kernels are:

* Each program loops over tiles of ``BLOCK_M`` rows (``tile = pid, pid + programs, ...``). A tile reads x (for
  add_rms_norm: the forward's summed output, which autograd keeps instead of x and the residual) and the incoming
  gradient once, recomputes the row statistics in registers (nothing else saved by the forward), and writes dx
  once (add_rms_norm: dx plus the summed output's gradient, for x and for the residual).
* The weight (and bias) gradients are per-row products summed over the rows: each program accumulates its rows
  in float32 registers and writes one row of a ``[programs, width]`` float32 buffer, which torch sums (as
  Liger-Kernel does; no atomics, so the result is deterministic). The launch has a bounded number of programs
  (``programs_per_sm`` per SM), so the buffer stays small against the tensors.
* Rows wider than ``max_fused_width`` loop over ``loop_block``-wide chunks: the statistics, then the two row
  sums of the gradient, then dx, each pass re-reading the row (mostly from L2); the program's weight-gradient
  row is updated in place chunk by chunk (it belongs to this program alone).

Kept apart from the forward kernels (kernels/triton/layernorm.py): the shipped tuned table records the source digest
of every kernel module it timed, and a backward added there would make its entries stale.
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
    load_chunk,
    load_row,
    load_vec,
    mean_rstd,
    row_ptrs,
    store_chunk,
    store_rows,
)


@dataclass(frozen=True)
class NormBackwardTuning(RowTiling):
    """Tunables of the normalisation gradients; the tiles of the forward kernels (layernorm.NormTuning), a
    bounded grid of `programs_per_sm` programs per SM (each loops over its tiles, keeping its weight-gradient
    rows in registers), ~16 values per thread counting the real width. Not yet measured on a GPU."""

    programs_per_sm: int = 4
    warp_steps: tuple[int, int, int, int] = (5793, 2896, 724, 362)
    warps_of_block: bool = False


#: The tunables in effect; ``with TUNING.override(programs_per_sm=1): ...`` changes them within a block.
TUNING = Tunables(__name__, NormBackwardTuning())

_RMS, _GEMMA, _LAYER = 0, 1, 2


@triton.jit
def _norm_backward_kernel(
    g_ptr, x_ptr, gs_ptr, w_ptr, dx_ptr, dr_ptr, dw_ptr, db_ptr,
    n_rows, n_cols, stride_g, stride_x, stride_gs, eps,
    KIND: tl.constexpr, ADD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr, LOOP_STAGES: tl.constexpr, EVEN: tl.constexpr = False,
):  # fmt: skip
    """dx (dr: the same for add_rms_norm's residual), and this program's row of the dw (db) partial sums.

    KIND: rms (scale w), gemma (scale 1 + w) or layer norm (mean subtracted; db too). ADD: x is add_rms_norm's
    summed output, and its gradient (gs_ptr) is added to dx, written to dx and dr. dx, dr are contiguous
    [n_rows, n_cols]; dw, db are [programs, n_cols] float32 (zeros for the chunked path, which adds to them).
    Pointers that a KIND or ADD does not read are never dereferenced.
    """
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_tiles = tl.cdiv(n_rows, BLOCK_M)
    if SINGLE_PASS:
        cols, col_ok = chunk_cols(0, n_cols, BLOCK_N)
        w = load_vec(w_ptr + cols, col_ok, EVEN)
        if KIND == 1:
            w = w + 1.0  # padding columns: g is 0 there
        dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        db = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for tile in range(pid, n_tiles, nprog):
            x_rows, row_ok = row_ptrs(x_ptr, tile, n_rows, stride_x, BLOCK_M)
            g_rows, _ = row_ptrs(g_ptr, tile, n_rows, stride_g, BLOCK_M)
            x = load_row(x_rows + cols[None, :], col_ok[None, :], EVEN, "").to(tl.float32)
            g = load_row(g_rows + cols[None, :], col_ok[None, :], EVEN, "").to(tl.float32)
            if KIND == 2:
                _, rstd, xc = mean_rstd(x, col_ok, n_cols, eps, EVEN)
                xhat = xc * rstd[:, None]
            else:
                rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
                xhat = x * rstd[:, None]
            gw = g * w[None, :]
            dxr = gw - xhat * (tl.sum(gw * xhat, axis=1) / n_cols)[:, None]
            if KIND == 2:
                dxr -= (tl.sum(gw, axis=1) / n_cols)[:, None]
            dxr = dxr * rstd[:, None]
            # tail tiles re-read the last row (row_ptrs clamps): their products must not count twice
            valid = row_ok[:, None]
            dw += tl.where(valid, g * xhat, 0.0)
            if KIND == 2:
                db += tl.where(valid, g, 0.0)
            dx_rows, _ = row_ptrs(dx_ptr, tile, n_rows, n_cols, BLOCK_M)
            if ADD:
                gs_rows, _ = row_ptrs(gs_ptr, tile, n_rows, stride_gs, BLOCK_M)
                dxr += load_row(gs_rows + cols[None, :], col_ok[None, :], EVEN, "").to(tl.float32)
                dr_rows, _ = row_ptrs(dr_ptr, tile, n_rows, n_cols, BLOCK_M)
                store_rows(dr_rows + cols[None, :], dxr.to(dr_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN, "")
            store_rows(dx_rows + cols[None, :], dxr.to(dx_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN, "")
        part = pid.to(tl.int64) * n_cols + cols
        tl.store(dw_ptr + part, tl.sum(dw, axis=0), mask=col_ok)
        if KIND == 2:
            tl.store(db_ptr + part, tl.sum(db, axis=0), mask=col_ok)
    else:  # BLOCK_M == 1: passes over each row in chunks (layer norm's mean, the variance, the gradient's sums, dx)
        dw_row = dw_ptr + pid.to(tl.int64) * n_cols
        db_row = db_ptr + pid.to(tl.int64) * n_cols
        for tile in range(pid, n_tiles, nprog):
            x_rows, row_ok = row_ptrs(x_ptr, tile, n_rows, stride_x, BLOCK_M)
            g_rows, _ = row_ptrs(g_ptr, tile, n_rows, stride_g, BLOCK_M)
            gs_rows, _ = row_ptrs(gs_ptr, tile, n_rows, stride_gs, BLOCK_M)
            dx_rows, _ = row_ptrs(dx_ptr, tile, n_rows, n_cols, BLOCK_M)
            dr_rows, _ = row_ptrs(dr_ptr, tile, n_rows, n_cols, BLOCK_M)
            mean = tl.zeros([BLOCK_M], dtype=tl.float32)
            if KIND == 2:
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
                    cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
                    acc += load_chunk(x_rows, cols, col_ok, 0.0, "")
                mean = tl.sum(acc, axis=1) / n_cols
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
                cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
                xc = tl.where(col_ok[None, :], load_chunk(x_rows, cols, col_ok, 0.0, "") - mean[:, None], 0.0)
                acc += xc * xc
            rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            acc_gw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
                cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
                xc = tl.where(col_ok[None, :], load_chunk(x_rows, cols, col_ok, 0.0, "") - mean[:, None], 0.0)
                w = load_vec(w_ptr + cols, col_ok, False)
                if KIND == 1:
                    w = w + 1.0
                gw = load_chunk(g_rows, cols, col_ok, 0.0, "") * w[None, :]
                acc += gw * xc
                acc_gw += gw
            c1 = tl.sum(acc, axis=1) * rstd / n_cols
            c2 = tl.sum(acc_gw, axis=1) / n_cols
            for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
                cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
                xhat = (load_chunk(x_rows, cols, col_ok, 0.0, "") - mean[:, None]) * rstd[:, None]
                w = load_vec(w_ptr + cols, col_ok, False)
                if KIND == 1:
                    w = w + 1.0
                g = load_chunk(g_rows, cols, col_ok, 0.0, "")
                dxr = g * w[None, :] - xhat * c1[:, None]
                if KIND == 2:
                    dxr -= c2[:, None]
                dxr = dxr * rstd[:, None]
                if ADD:
                    dxr += load_chunk(gs_rows, cols, col_ok, 0.0, "")
                    store_chunk(dr_rows, cols, dxr.to(dr_ptr.dtype.element_ty), row_ok, col_ok)
                store_chunk(dx_rows, cols, dxr.to(dx_ptr.dtype.element_ty), row_ok, col_ok)
                # BLOCK_M == 1 and the row index is never clamped here (tile < n_tiles): every row counts once
                tl.store(dw_row + cols, tl.load(dw_row + cols, mask=col_ok) + tl.sum(g * xhat, axis=0), mask=col_ok)
                if KIND == 2:
                    tl.store(db_row + cols, tl.load(db_row + cols, mask=col_ok) + tl.sum(g, axis=0), mask=col_ok)


def _backward(
    kind: int,
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    grad_summed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:
    """One launch: (dx, dweight) (+ dbias for layer norm); with grad_summed (x: add_rms_norm's summed output),
    (dx, dresidual, dweight), dx in grad's dtype and dresidual in grad_summed's."""
    if grad.shape != x.shape:
        raise ValueError(f"grad {tuple(grad.shape)} must have x's shape {tuple(x.shape)}")
    if grad_summed is not None and grad_summed.shape != x.shape:
        raise ValueError(f"grad_summed {tuple(grad_summed.shape)} must have summed's shape {tuple(x.shape)}")
    n = x.shape[-1]
    w = as_vector(weight, n, "weight")
    dx = torch.empty(x.shape, dtype=x.dtype if grad_summed is None else grad.dtype, device=x.device)
    dr = None if grad_summed is None else torch.empty(x.shape, dtype=grad_summed.dtype, device=x.device)
    x2, g2 = as_rows(x), as_rows(grad)
    m = x2.shape[0]
    t = TUNING.get()
    sms = t.device_sms(x.device)
    block_m, block_n, num_warps, single = t.config(n, m, sms)
    programs = max(1, min(cdiv(m, block_m), sms * max(t.programs_per_sm, 1)))
    alloc = torch.empty if single and m else torch.zeros  # the chunked path adds to its rows
    dw = alloc((programs, n), dtype=torch.float32, device=x.device)
    db = alloc((programs, n), dtype=torch.float32, device=x.device) if kind == _LAYER else dw
    if m:
        gs2 = g2 if grad_summed is None else as_rows(grad_summed)
        # unread pointers get a tensor of the right kind: Inductor's launcher of a kernel in a graph takes no None
        tracing.launch(_norm_backward_kernel, (programs,))(
            g2, x2, gs2, w, dx, dx if dr is None else dr, dw, db,
            m, n, g2.stride(0), x2.stride(0), gs2.stride(0), eps,
            KIND=kind, ADD=grad_summed is not None, BLOCK_M=block_m, BLOCK_N=block_n, SINGLE_PASS=single,
            LOOP_STAGES=t.loop_stages, EVEN=block_n == n, num_warps=num_warps,
        )  # fmt: skip
    dweight = dw.sum(0).to(weight.dtype).reshape(weight.shape)
    if kind == _LAYER:
        return dx, dweight, db.sum(0)
    return (dx, dweight) if dr is None else (dx, dr, dweight)


def rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients (dx, dweight) of RMSNorm ``x * rsqrt(mean(x^2) + eps) * weight``, in x's and weight's dtypes; one
    fused pass over x and grad per row, float32 math (see the module's docstring for the scheme)."""
    dx, dw = _backward(_RMS, grad, x, weight, eps)
    return dx, dw


def gemma_rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients (dx, dweight) of Gemma's RMSNorm ``x * rsqrt(mean(x^2) + eps) * (1 + weight)``, in x's and
    weight's dtypes; one fused pass over x and grad per row, float32 math."""
    dx, dw = _backward(_GEMMA, grad, x, weight, eps)
    return dx, dw


def add_rms_norm_backward(
    grad_out: torch.Tensor, grad_summed: torch.Tensor, weight: torch.Tensor, eps: float, summed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dx, dresidual, dweight) of add_rms_norm from its summed output ``s = x + residual`` (kept for
    backward instead of x and residual): ``ds = rms_norm_backward(grad_out, s) + grad_summed``, written for x (in
    grad_out's dtype) and for the residual (in grad_summed's)."""
    dx, dr, dw = _backward(_RMS, grad_out, summed, weight, eps, grad_summed)
    return dx, dr, dw


def layer_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dx, dweight, dbias) of LayerNorm (biased variance), in x's, weight's and bias's dtypes."""
    as_vector(bias, x.shape[-1], "bias")
    dx, dw, db = _backward(_LAYER, grad, x, weight, eps)
    return dx, dw, db.to(bias.dtype).reshape(bias.shape)
