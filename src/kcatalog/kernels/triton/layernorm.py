"""Triton kernels for the normalisation layers: one fused, single-pass kernel per op.

Design (memory-bound ops, tuned on an H200):

* Each program owns ``BLOCK_M`` whole rows as a ``[BLOCK_M, BLOCK_N]`` tile held in registers, with
  ``BLOCK_N = next_power_of_2(width)``: every input element is read once and every output element written
  once, all math in float32, cast on store. Short rows share a program (``BLOCK_M > 1``) so that each
  program still moves a few KiB and the weight is loaded once per tile.
* Rows wider than ``max_fused_width`` elements do not fit in registers without spilling; the same kernel
  then loops over ``loop_block``-wide chunks (``SINGLE_PASS=False``, loads software-pipelined
  ``loop_stages`` deep): a statistics pass, then a normalising pass that reads the row again (mostly from L2).
* rms_norm and layer_norm are one kernel (``LAYER``: subtract the mean, add the bias), composed of the row
  helpers in ``_rows``; fused_add_rms_norm shares the helpers and the rms step.
* Two measured exceptions (H200): rms_norm at 8192 wide with many rows takes the chunked two-pass path
  the way inductor does (see ``NormTuning.rms_chunked_widths``), and layer_norm at ragged wide rows runs on
  a persistent grid of 4-warp programs that prefetch their next row (see ``NormTuning.ln_persistent_min_width``).
* The tunables are :data:`TUNING` (a :class:`NormTuning`); the launch configuration is :meth:`RowTiling.config`.
* Rows may be strided (``x = big[:, :n]``): only the last dim must be unit-stride; nothing is copied then.
"""

from __future__ import annotations

from collections.abc import Hashable
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
    compiled_resources,
    early_vec,
    f32_again,
    inv_rms,
    late_vec,
    load_chunk,
    load_row,
    load_vec,
    mean_rstd,
    persistent_programs,
    prefetch_tile,
    resident_per_sm,
    row_ptrs,
    row_sum_sq,
    rows_view,
    sm_limits,
    store_chunk,
    store_rows,
)


@dataclass(frozen=True)
class NormTuning(RowTiling):
    """The normalisation kernels' tunables (measured on an H200, bf16); see :class:`RowTiling` for the tiles.

    * Warps: ~16 values per thread, rounded to the nearest power of two of warps, counting the real width:
      8192 wide -> 16 warps, 7168 -> 16, 5120 -> 8 (16 was 7% slower), 4096 -> 8, 2048 -> 4 (8 was 2-4%
      slower). The steps are the geometric midpoints (2^k * sqrt(2)).
    * `late_weights_programs`: launches of at least this many programs load the weights after the row
      statistics (``LATE_W``), so that they are not held in registers during the reduction. (ptxas issues
      the early weights' loads after the row's first reduction step; making the statistics wait for them, so
      that all loads are in flight at once, was 0-8% slower at 1-64 rows: H200, 2026-12-01.)
    * `rms_chunked_widths`: rms_norm with that many programs (one row each), at a width in this range, takes
      the chunked two-pass path the way inductor does it: `rms_chunk`-wide chunks, `rms_chunk_warps` warps, no software
      pipelining, the first read kept in L2 (evict_last) for the second (evict_first). At 8192x8192 bf16:
      68.5 us (0.935 of copy bandwidth, = torch.compile) against 70.8 us single-pass.
    * `wide_load_min_width`: single-pass rows at least this wide are loaded with `wide_load_cache` (".cg":
      L2 only; ~1% at 7168/8192 wide, a loss at 2048).
    * `ln_persistent_min_width`: layer_norm at ragged widths of at least this (BLOCK_N > width) with at least
      `persistent_min_tiles_per_sm` rows per SM runs on a persistent grid of `ln_persistent_warps`-warp programs
      (at most `ln_persistent_per_sm` per SM, fewer if they do not fit), each looping over rows with the next
      row's load in flight: at 8192x7168 bf16 66.6 us against 72.1 (0.84 of copy bandwidth instead of 0.78).
      At exact power-of-two widths it was slower (0.85 vs 0.90).
    * `ln_centered_programs`: single-pass layer_norm launches of fewer programs compute the output from the
      variance's float32 ``x - mean``, as Liger-Kernel does, rather than from the row converted again. At 16
      and 64 rows of 4096 it took 0.975 and 0.949 of the time (two H200 runs, CUDA-graph replay, 2026-12-01).
      Prefill keeps the conversion: it holds layer_norm at 8192 wide to 32 registers. (Liger's load order,
      weights before x, was also tried: 0.99-1.00, within the spread; not kept.)
    """

    loop_block: int = 4096
    warp_steps: tuple[int, int, int, int] = (5793, 2896, 724, 362)
    warps_of_block: bool = False
    late_weights_programs: int = 1024
    rms_chunked_widths: tuple[int, int] = (8192, 8192)
    rms_chunk: int = 4096
    rms_chunk_warps: int = 16
    rms_chunk_stages: int = 1
    wide_load_min_width: int = 6144
    wide_load_cache: str = ".cg"
    ln_persistent_min_width: int = 6144
    ln_persistent_per_sm: int = 8
    ln_persistent_warps: int = 4
    persistent_min_tiles_per_sm: int = 8
    ln_centered_programs: int = 1024


#: The tunables in effect; ``with TUNING.override(programs_per_sm=0): ...`` changes them within a block.
TUNING = Tunables(__name__, NormTuning())


#: Resident programs per SM of each persistent kernel variant, learnt from its first launch (registers,
#: shared memory); until then one program per SM is assumed.
_RESIDENT: dict[Hashable, int] = {}


def _persistent(x: torch.Tensor, n_tiles: int, t: NormTuning, key: Hashable) -> int:
    """persistent_programs for a launch on `x`'s device, capped by what fits (0: not on a GPU, or too few tiles)."""
    if t.ln_persistent_per_sm <= 0 or x.device.type != "cuda":
        return 0
    per_sm = min(t.ln_persistent_per_sm, _RESIDENT.get(key, 1))
    return persistent_programs(n_tiles, t.device_sms(x.device), per_sm, t.persistent_min_tiles_per_sm)


def _learn_residency(key: Hashable, compiled: object, num_warps: int, device: torch.device) -> None:
    """Record how many programs of the just-launched persistent kernel `compiled` fit on one SM of `device`."""
    resources = compiled_resources(compiled)
    _RESIDENT[key] = resident_per_sm(*resources, num_warps, sm_limits(device)) if resources else 1


@triton.jit
def _norm_tile(xr, w, b, w_ptr, b_ptr, cols, col_ok, n_cols, eps, EVEN: tl.constexpr, LATE_W: tl.constexpr,
               LAYER: tl.constexpr, CENTERED: tl.constexpr = False):  # fmt: skip
    """rms_norm (or, LAYER, layer_norm) of a [BLOCK_M, BLOCK_N] tile, float32; `w`/`b` are early_vec's.

    CENTERED (layer_norm): the output is computed from the variance's ``x - mean`` (float32, live across the
    reduction, as Liger-Kernel does) instead of from the 16-bit row converted again (f32_again).
    """
    if LAYER:
        mean, rstd, xc = mean_rstd(xr, col_ok, n_cols, eps, EVEN)
        w = late_vec(w, w_ptr + cols, col_ok, EVEN, LATE_W)
        b = late_vec(b, b_ptr + cols, col_ok, EVEN, LATE_W)
        if not CENTERED:
            xc = f32_again(xr) - mean[:, None]
        return xc * rstd[:, None] * w[None, :] + b[None, :]
    else:
        rstd = inv_rms(row_sum_sq(xr), n_cols, eps)
        w = late_vec(w, w_ptr + cols, col_ok, EVEN, LATE_W)
        return f32_again(xr) * rstd[:, None] * w[None, :]


@triton.jit
def _chunked_stats(x_rows, n_cols, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LOOP_STAGES: tl.constexpr,
                   EVICT: tl.constexpr, LAYER: tl.constexpr):  # fmt: skip
    """Per-row (mean, rstd) of rows too wide for registers, read in BLOCK_N-wide chunks (rms_norm: mean 0)."""
    if LAYER:
        # per-chunk mean and M2 (two-pass within the chunk), merged across chunks (Chan et al.)
        mean = tl.zeros([BLOCK_M], dtype=tl.float32)
        m2 = tl.zeros([BLOCK_M], dtype=tl.float32)
        count = tl.zeros([BLOCK_M], dtype=tl.float32)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            x = load_chunk(x_rows, cols, col_ok, 0.0, EVICT)
            n_chunk = tl.minimum(n_cols - off, BLOCK_N).to(tl.float32)
            c_mean = tl.sum(x, axis=1) / n_chunk
            d = tl.where(col_ok[None, :], x - c_mean[:, None], 0.0)
            c_m2 = tl.sum(d * d, axis=1)
            total = count + n_chunk
            delta = c_mean - mean
            mean += delta * (n_chunk / total)
            m2 += c_m2 + delta * delta * (count * n_chunk / total)
            count = total
        return mean, tl.rsqrt(m2 / n_cols + eps)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            x = load_chunk(x_rows, cols, col_ok, 0.0, EVICT)
            acc += x * x
        return 0.0, inv_rms(tl.sum(acc, axis=1), n_cols, eps)


@triton.jit
def _norm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr, LOOP_STAGES: tl.constexpr,
    LAYER: tl.constexpr, EVEN: tl.constexpr = False, LATE_W: tl.constexpr = False, LOAD_CACHE: tl.constexpr = "",
    STORE_CACHE: tl.constexpr = "", EVICT1: tl.constexpr = "", EVICT2: tl.constexpr = "",
    CENTERED: tl.constexpr = False,
):  # fmt: skip
    """rms_norm, or (LAYER) layer_norm; b_ptr is unread for rms_norm. EVEN: n_cols == BLOCK_N, no column masks.
    CENTERED: see _norm_tile."""
    x_rows, row_ok = row_ptrs(x_ptr, tl.program_id(0), n_rows, stride_x, BLOCK_M)
    y_rows, _ = row_ptrs(y_ptr, tl.program_id(0), n_rows, stride_y, BLOCK_M)
    if SINGLE_PASS:
        cols, col_ok = chunk_cols(0, n_cols, BLOCK_N)
        xr = load_row(x_rows + cols[None, :], col_ok[None, :], EVEN, LOAD_CACHE)
        w = early_vec(w_ptr + cols, col_ok, EVEN, LATE_W)
        if LAYER:
            b = early_vec(b_ptr + cols, col_ok, EVEN, LATE_W)
        else:
            b = 0.0
        y = _norm_tile(xr, w, b, w_ptr, b_ptr, cols, col_ok, n_cols, eps, EVEN, LATE_W, LAYER, CENTERED)
        store_rows(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN, STORE_CACHE)
    else:
        mean, rstd = _chunked_stats(x_rows, n_cols, eps, BLOCK_M, BLOCK_N, LOOP_STAGES, EVICT1, LAYER)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            x = load_chunk(x_rows, cols, col_ok, 0.0, EVICT2)
            w = load_vec(w_ptr + cols, col_ok, False)
            if LAYER:
                b = load_vec(b_ptr + cols, col_ok, False)
                y = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
            else:
                y = x * rstd[:, None] * w[None, :]
            store_chunk(y_rows, cols, y.to(y_ptr.dtype.element_ty), row_ok, col_ok)


@triton.jit
def _fused_add_rms_norm_kernel(
    x_ptr, r_ptr, w_ptr, n_rows, n_cols, stride_x, stride_r, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr, LOOP_STAGES: tl.constexpr,
    EVEN: tl.constexpr = False, LATE_W: tl.constexpr = False, LOAD_CACHE: tl.constexpr = "",
    STORE_CACHE: tl.constexpr = "",
):  # fmt: skip
    x_rows, row_ok = row_ptrs(x_ptr, tl.program_id(0), n_rows, stride_x, BLOCK_M)
    r_rows, _ = row_ptrs(r_ptr, tl.program_id(0), n_rows, stride_r, BLOCK_M)
    if SINGLE_PASS:
        cols, col_ok = chunk_cols(0, n_cols, BLOCK_N)
        x = load_row(x_rows + cols[None, :], col_ok[None, :], EVEN, LOAD_CACHE).to(tl.float32)
        r = load_row(r_rows + cols[None, :], col_ok[None, :], EVEN, LOAD_CACHE).to(tl.float32)
        w = early_vec(w_ptr + cols, col_ok, EVEN, LATE_W)
        sr = (x + r).to(r_ptr.dtype.element_ty)  # the sum is rounded to the stored dtype before the norm
        store_rows(r_rows + cols[None, :], sr, row_ok, col_ok, BLOCK_M, EVEN, STORE_CACHE)
        y = _norm_tile(sr, w, 0.0, w_ptr, None, cols, col_ok, n_cols, eps, EVEN, LATE_W, False)
        store_rows(x_rows + cols[None, :], y.to(x_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN, STORE_CACHE)
    else:
        # Pass 1 only reads; pass 2 re-reads the original x and residual, then writes both, so no lane ever
        # reads a value another lane has already overwritten.
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            x = load_chunk(x_rows, cols, col_ok, 0.0, "")
            s = (x + load_chunk(r_rows, cols, col_ok, 0.0, "")).to(r_ptr.dtype.element_ty).to(tl.float32)
            acc += s * s
        rstd = inv_rms(tl.sum(acc, axis=1), n_cols, eps)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            x = load_chunk(x_rows, cols, col_ok, 0.0, "")
            r = load_chunk(r_rows, cols, col_ok, 0.0, "")
            w = load_vec(w_ptr + cols, col_ok, False)
            s = (x + r).to(r_ptr.dtype.element_ty)
            store_chunk(r_rows, cols, s, row_ok, col_ok)
            y = s.to(tl.float32) * rstd[:, None] * w[None, :]
            store_chunk(x_rows, cols, y.to(x_ptr.dtype.element_ty), row_ok, col_ok)


@triton.jit
def _layer_norm_persistent_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr = False, LOAD_CACHE: tl.constexpr = "",
    STORE_CACHE: tl.constexpr = "",
):  # fmt: skip
    """layer_norm on a persistent grid: a grid-stride loop over row tiles, the next tile's load issued before
    the current tile is reduced (rows past the end are masked off, so the last prefetch moves no data)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_tiles = tl.cdiv(n_rows, BLOCK_M)
    cols, col_ok = chunk_cols(0, n_cols, BLOCK_N)
    xr = prefetch_tile(x_ptr, pid, n_rows, stride_x, cols, col_ok, BLOCK_M, LOAD_CACHE)
    for tile in range(pid, n_tiles, nprog):
        xn = prefetch_tile(x_ptr, tile + nprog, n_rows, stride_x, cols, col_ok, BLOCK_M, LOAD_CACHE)
        y = _norm_tile(xr, 0.0, 0.0, w_ptr, b_ptr, cols, col_ok, n_cols, eps, EVEN, True, True)
        y_rows, row_ok = row_ptrs(y_ptr, tile, n_rows, stride_y, BLOCK_M)
        store_rows(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN, STORE_CACHE)
        xr = xn


def _wide_load(t: NormTuning, single: bool, n: int) -> str:
    """The single-pass row loads' cache modifier for rows `n` wide."""
    return t.wide_load_cache if single and n >= t.wide_load_min_width else ""


def _norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """rms_norm (bias None) or layer_norm: one launch of _norm_kernel, or of the persistent layer_norm kernel."""
    n = x.shape[-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    x2 = as_rows(x)
    w = as_vector(weight, n, "weight")
    b = None if bias is None else as_vector(bias, n, "bias")
    m = x2.shape[0]
    t = TUNING.get()
    block_m, block_n, num_warps, single = t.config(n, m, t.device_sms(x.device))
    n_tiles = cdiv(m, block_m)
    load_cache = _wide_load(t, single, n)
    stages, evict1, evict2 = t.loop_stages, "", ""
    prefill = block_m == 1 and n_tiles >= t.late_weights_programs
    if b is None and single and prefill and t.rms_chunked_widths[0] <= n <= t.rms_chunked_widths[1]:
        # inductor's scheme at this width (see rms_chunked_widths): two reads of each row, the second from L2
        block_n, num_warps, single, load_cache = min(t.rms_chunk, block_n), t.rms_chunk_warps, False, ""
        stages, evict1, evict2 = t.rms_chunk_stages, "evict_last", "evict_first"
    elif b is not None and single and block_n != n and n >= t.ln_persistent_min_width and not tracing.active():
        # (not in a compiled graph: sizing the persistent grid reads the compiled kernel's registers)
        key = (x.dtype, x.device.index, block_m, block_n, t.ln_persistent_warps, load_cache)
        progs = _persistent(x2, n_tiles, t, key)
        if progs:
            compiled = _layer_norm_persistent_kernel[(progs,)](
                x2, w, b, out, m, n, x2.stride(0), n, eps,
                BLOCK_M=block_m, BLOCK_N=block_n, EVEN=False, LOAD_CACHE=load_cache, num_warps=t.ln_persistent_warps,
            )  # fmt: skip
            if key not in _RESIDENT:
                _learn_residency(key, compiled, t.ln_persistent_warps, x.device)
            return out
    # rms_norm passes w for the unread b_ptr: Inductor's launcher of a kernel in a graph takes no None pointer
    tracing.launch(_norm_kernel, (n_tiles,))(
        x2, w, w if b is None else b, out, m, n, x2.stride(0), n, eps,
        BLOCK_M=block_m, BLOCK_N=block_n, SINGLE_PASS=single, LOOP_STAGES=stages, LAYER=b is not None,
        EVEN=block_n == n, LATE_W=n_tiles >= t.late_weights_programs, LOAD_CACHE=load_cache,
        EVICT1=evict1, EVICT2=evict2, CENTERED=b is not None and n_tiles < t.ln_centered_programs,
        num_warps=num_warps,
    )  # fmt: skip
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim: ``y = x * rsqrt(mean(x^2, -1) + eps) * weight``, returned in ``x.dtype``.

    One fused Triton kernel; rows may be strided (only the last dim must be unit-stride, else it is copied).
    The output is a new contiguous tensor of ``x``'s shape.
    """
    return _norm(x, weight, None, eps)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
    """Residual add then RMSNorm, in place as in vLLM/SGLang, in one fused Triton kernel.

    ``residual <- x + residual`` (rounded to the residual's dtype), then ``x <- rms_norm(residual) * weight``.
    Each of ``x`` and ``residual`` is read once and written once. Strided rows are updated in place; a tensor
    whose rows cannot be viewed as ``[rows, width]`` with a unit last stride is processed through a temporary
    and copied back.
    """
    if x.shape != residual.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} must have the same shape")
    n = x.shape[-1]
    if x.numel() == 0:
        return
    x_view, r_view = rows_view(x), rows_view(residual)
    x2 = as_rows(x) if x_view is None else x_view
    r2 = as_rows(residual) if r_view is None else r_view
    w = as_vector(weight, n, "weight")
    m = x2.shape[0]
    t = TUNING.get()
    block_m, block_n, num_warps, single = t.config(n, m, t.device_sms(x.device))
    n_tiles = cdiv(m, block_m)
    tracing.launch(_fused_add_rms_norm_kernel, (n_tiles,))(
        x2, r2, w, m, n, x2.stride(0), r2.stride(0), eps,
        BLOCK_M=block_m, BLOCK_N=block_n, SINGLE_PASS=single, LOOP_STAGES=t.loop_stages,
        EVEN=block_n == n, LATE_W=n_tiles >= t.late_weights_programs, num_warps=num_warps,
    )  # fmt: skip
    # Where no in-place view exists, the kernel updated a copy: write it back.
    if x_view is None:
        x.copy_(x2.view(x.shape))
    if r_view is None:
        residual.copy_(r2.view(residual.shape))


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim: ``(x - mean) * rsqrt(var + eps) * weight + bias`` in one Triton kernel.

    Biased variance, float32 statistics, output a new contiguous tensor in ``x.dtype``.
    """
    return _norm(x, weight, bias, eps)
