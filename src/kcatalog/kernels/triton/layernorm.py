"""Triton kernels for the normalisation layers: one fused, single-pass kernel per op.

Design (memory-bound ops, tuned for H100/H200-class GPUs):

* Each program owns ``BLOCK_M`` whole rows as a ``[BLOCK_M, BLOCK_N]`` tile held in registers, with
  ``BLOCK_N = next_power_of_2(width)``: every input element is read once and every output element written
  once, all math in float32, cast on store. Short rows share a program (``BLOCK_M > 1``) so that each
  program still moves a few KiB and the weight is loaded once per tile.
* Rows wider than ``MAX_FUSED_WIDTH`` elements do not fit in registers without spilling; the same kernel
  then loops over ``LOOP_BLOCK``-wide chunks (``SINGLE_PASS=False``, loads software-pipelined
  ``LOOP_STAGES`` deep): a statistics pass, then a normalising pass that reads the row again (mostly from L2).
* Two measured exceptions (H200): rms_norm at 8192 wide with many rows takes the chunked two-pass path
  the way inductor does (see ``RMS_CHUNKED_MIN_WIDTH``), and layer_norm at ragged wide rows runs on a
  persistent grid of 4-warp programs that prefetch their next row (see ``LN_PERSISTENT_MIN_WIDTH``).
* The launch configuration comes from :func:`launch_config`, a small pure-Python function meant to be tuned.
* Rows may be strided (``x = big[:, :n]``): only the last dim must be unit-stride; nothing is copied then.
* Tail programs clamp their row index to the last row for loads (so no lane reads out of bounds and no
  row mask is needed on loads) and mask only the stores.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ._rows import as_rows

#: Widest row (elements) kept whole in registers; wider rows use the chunked loop.
MAX_FUSED_WIDTH = 16384
#: Chunk width (elements) of the looped path for very wide rows.
LOOP_BLOCK = 4096
#: Software-pipelining depth of the chunk loops (loads of later chunks in flight while one is reduced).
LOOP_STAGES = 3
#: Target elements per program when several short rows share one program.
ROW_TILE = 4096
#: Upper bound on rows per program.
MAX_ROWS_PER_PROGRAM = 64
#: Do not pack rows so densely that fewer programs than this are launched (keeps every SM busy;
#: ~2 per SM on a 132-SM H100/H200).
MIN_PROGRAMS = 264


def _num_warps(elements: int) -> int:
    """Warps for a tile of `elements` values: ~16 values per thread, rounded to the nearest power of two of warps.

    Measured on an H200 (bf16): 8192 wide -> 16 warps, 7168 -> 16, 5120 -> 8 (16 was 7% slower), 4096 -> 8,
    2048 -> 4 (8 was 2-4% slower). The thresholds are the geometric midpoints (2^k * sqrt(2)).
    """
    if elements >= 5793:
        return 16
    if elements >= 2896:
        return 8
    if elements >= 724:
        return 4
    if elements >= 362:
        return 2
    return 1


@functools.lru_cache(maxsize=4096)
def launch_config(
    n_cols: int,
    n_rows: int,
    max_fused_width: int = MAX_FUSED_WIDTH,
    loop_block: int = LOOP_BLOCK,
    row_tile: int = ROW_TILE,
    min_programs: int = MIN_PROGRAMS,
    max_rows_per_program: int = MAX_ROWS_PER_PROGRAM,
) -> tuple[int, int, int, bool]:
    """Choose ``(BLOCK_M, BLOCK_N, num_warps, single_pass)`` for a ``[n_rows, n_cols]`` row-wise kernel.

    * ``n_cols <= max_fused_width``: one pass, ``BLOCK_N = next_power_of_2(n_cols)``; rows per program
      ``BLOCK_M = row_tile // BLOCK_N`` (at least 1, at most ``max_rows_per_program``), halved while that
      would launch fewer than ``min_programs`` programs, so that decode-sized batches spread over SMs.
    * wider rows: ``BLOCK_M = 1``, ``BLOCK_N = loop_block``, looping over the row.
    * ``num_warps`` grows with the values actually held (``BLOCK_M * n_cols``; 1..16), ~16 per thread.
    """
    block_n = triton.next_power_of_2(max(n_cols, 1))
    if block_n > max_fused_width:
        block_n = min(loop_block, block_n)
        return 1, block_n, _num_warps(block_n), False
    block_m = max(1, min(row_tile // block_n, max_rows_per_program))
    while block_m > 1 and triton.cdiv(n_rows, block_m) < min_programs:
        block_m //= 2
    return block_m, block_n, _num_warps(block_m * n_cols), True


def _config(n_cols: int, n_rows: int) -> tuple[int, int, int, bool]:
    """launch_config with the module's current tunables (read at call time so they can be patched)."""
    cap = MAX_ROWS_PER_PROGRAM * MIN_PROGRAMS  # beyond this the row count no longer changes the choice
    return launch_config(
        n_cols, min(n_rows, cap), MAX_FUSED_WIDTH, LOOP_BLOCK, ROW_TILE, MIN_PROGRAMS, MAX_ROWS_PER_PROGRAM
    )


def _vector(w: torch.Tensor, n: int, name: str) -> torch.Tensor:
    """Check a per-column parameter (weight/bias) has `n` elements; make it unit-stride."""
    if w.dim() == 1 and w.shape[0] == n and w.stride(0) == 1:  # the usual case: no new tensor
        return w
    if w.numel() != n:
        raise ValueError(f"{name} has {w.numel()} elements, expected {n} (the last dim of x)")
    w = w.reshape(n)
    return w if w.stride(0) == 1 else w.contiguous()


#: Launch at least this many programs before the weights are loaded after the row statistics (see LATE_W).
LATE_WEIGHTS_PROGRAMS = 1024
#: rms_norm with many rows (at least LATE_WEIGHTS_PROGRAMS) and a width in this range takes the chunked
#: two-pass path the way inductor does it: RMS_CHUNK-wide chunks, RMS_CHUNK_WARPS warps, no software
#: pipelining, the first read kept in L2 (evict_last) for the second (evict_first). Measured on an H200 at
#: 8192x8192 bf16: 68.5 us (0.935 of copy bandwidth, = torch.compile) against 70.8 us single-pass.
RMS_CHUNKED_MIN_WIDTH = 8192
RMS_CHUNKED_MAX_WIDTH = 8192
RMS_CHUNK = 4096
RMS_CHUNK_WARPS = 16
RMS_CHUNK_STAGES = 1
#: Rows at least this wide (single pass) are loaded with this cache modifier (".cg": L2 only; ~1% on an H200
#: at 7168/8192 wide, a loss at 2048).
WIDE_LOAD_MIN_WIDTH = 6144
WIDE_LOAD_CACHE = ".cg"
#: layer_norm at ragged widths of at least LN_PERSISTENT_MIN_WIDTH (BLOCK_N > width) with many rows runs on a
#: persistent grid of few-warp programs (at most LN_PERSISTENT_PER_SM per SM, fewer if they do not fit), each
#: looping over rows with the next row's load in flight: on an H200 at 8192x7168 bf16 66.6 us against 72.1
#: (0.84 of copy bandwidth instead of 0.78). At exact power-of-two widths it was slower (0.85 vs 0.90).
LN_PERSISTENT_MIN_WIDTH = 6144
LN_PERSISTENT_PER_SM = 8
LN_PERSISTENT_WARPS = 4
#: ... once there are at least this many rows per SM (prefill); decode keeps one row per program.
PERSISTENT_MIN_TILES_PER_SM = 8


@functools.lru_cache(maxsize=64)
def _num_sms(device_index: int) -> int:
    """Streaming multiprocessors of a CUDA device (cached: the property query is not free)."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def persistent_programs(n_tiles: int, num_sms: int, per_sm: int, min_tiles_per_sm: int) -> int:
    """Programs for a persistent launch over `n_tiles` tiles, or 0 to launch one program per tile.

    At most ``num_sms * per_sm`` programs, chosen so that every program gets the same number of tiles
    (within one): ``cdiv(n_tiles, cdiv(n_tiles, max_programs))``.
    """
    if per_sm <= 0 or n_tiles < num_sms * max(min_tiles_per_sm, 1):
        return 0
    per_program = triton.cdiv(n_tiles, num_sms * per_sm)
    return triton.cdiv(n_tiles, per_program)


#: Resident programs per SM of each persistent kernel variant, learnt from its first launch (registers,
#: shared memory); until then one program per SM is assumed.
_RESIDENT: dict[tuple, int] = {}


def _resident_per_sm(compiled: object, num_warps: int) -> int:
    """Blocks of `compiled` (a launched CompiledKernel) that fit on one SM of a Hopper-class GPU."""
    try:
        regs = int(compiled.n_regs)  # type: ignore[attr-defined]
        shared = int(compiled.metadata.shared)  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return 1
    warp_regs = -(-max(regs, 1) * 32 // 256) * 256  # allocated per warp in units of 256
    by_regs = 65536 // warp_regs // num_warps
    by_threads = 2048 // (32 * num_warps)
    by_shared = (228 * 1024) // (shared + 1024)
    return max(1, min(by_regs, by_threads, by_shared, 32))


def _persistent(x: torch.Tensor, n_tiles: int, per_sm: int, key: tuple) -> int:
    """persistent_programs for a launch on `x`'s device, capped by what fits (0: not on CUDA, or too few tiles)."""
    if per_sm <= 0 or x.device.type != "cuda":
        return 0
    sms = _num_sms(x.device.index if x.device.index is not None else torch.cuda.current_device())
    return persistent_programs(n_tiles, sms, min(per_sm, _RESIDENT.get(key, 1)), PERSISTENT_MIN_TILES_PER_SM)


@triton.jit
def _f32_again(x):
    """16-bit floats to float32 again, by a different instruction path than ``.to(tl.float32)``.

    The single-pass kernels convert the row once for its statistics and once more for the output, so that
    only the packed 16-bit row stays live across the reduction (two values per register) instead of its
    float32 copy: on an H200 this took layer_norm at 8192 wide from ~94 to 32 registers per thread (4
    programs per SM instead of 1) and from 0.67 to 0.89 of copy bandwidth. A plain second ``.to`` would be
    merged with the first. bf16 -> f32 is a 16-bit shift; fp16/fp32 keep the ordinary conversion.
    """
    if x.dtype == tl.bfloat16:
        return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        return x.to(tl.float32)


@triton.jit
def _load_row(ptrs, col_ok, EVEN: tl.constexpr, CACHE: tl.constexpr):
    """Load a [BLOCK_M, BLOCK_N] tile (or a [BLOCK_N] vector), masked on columns unless the width is exact."""
    if EVEN:
        return tl.load(ptrs, cache_modifier=CACHE)
    else:
        return tl.load(ptrs, mask=col_ok, other=0.0, cache_modifier=CACHE)


@triton.jit
def _row_offsets(tile, n_rows, stride, BLOCK_M: tl.constexpr):
    """Element offsets ``[BLOCK_M, 1]`` of the rows of `tile` (clamped to the last row) and their validity."""
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    return rows[:, None] * stride, row_ok


@triton.jit
def _prefetch_tile(x_ptr, tile, n_rows, stride, cols, col_ok, BLOCK_M: tl.constexpr, CACHE: tl.constexpr):
    """Load the rows of tile `tile` that exist (the loop's next tile); no memory traffic past the last row."""
    offs, row_ok = _row_offsets(tile, n_rows, stride, BLOCK_M)
    ok = row_ok[:, None] & col_ok[None, :]
    return tl.load(x_ptr + offs + cols[None, :], mask=ok, other=0.0, cache_modifier=CACHE)


@triton.jit
def _load_vec(ptrs, col_ok, EVEN: tl.constexpr):
    """Load a per-column parameter as float32, kept in L2 (every program reads it)."""
    if EVEN:
        return tl.load(ptrs, eviction_policy="evict_last").to(tl.float32)
    else:
        return tl.load(ptrs, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)


@triton.jit
def _store_rows(ptrs, value, row_ok, col_ok, BLOCK_M: tl.constexpr, EVEN: tl.constexpr, CACHE: tl.constexpr):
    """Store a tile; no mask at all when it is one whole row of exact width (the row index is never clamped)."""
    if EVEN and BLOCK_M == 1:
        tl.store(ptrs, value, cache_modifier=CACHE)
    else:
        tl.store(ptrs, value, mask=row_ok[:, None] & col_ok[None, :], cache_modifier=CACHE)


@triton.jit
def _layer_norm_rows(xr, w_ptr, b_ptr, cols, col_ok, n_cols, eps, EVEN: tl.constexpr):
    """LayerNorm of a [BLOCK_M, BLOCK_N] tile (exact two-pass variance in registers; float32 result)."""
    x = xr.to(tl.float32)
    mean = tl.sum(x, axis=1) / n_cols
    xc = x - mean[:, None]
    if not EVEN:
        xc = tl.where(col_ok[None, :], xc, 0.0)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
    w = _load_vec(w_ptr + cols, col_ok, EVEN)
    b = _load_vec(b_ptr + cols, col_ok, EVEN)
    return (_f32_again(xr) - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    n_rows,
    n_cols,
    stride_x,
    stride_y,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    EVEN: tl.constexpr = False,
    LATE_W: tl.constexpr = False,
    LOAD_CACHE: tl.constexpr = "",
    STORE_CACHE: tl.constexpr = "",
    EVICT1: tl.constexpr = "",
    EVICT2: tl.constexpr = "",
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    x_rows = x_ptr + rows[:, None] * stride_x
    y_rows = y_ptr + rows[:, None] * stride_y
    if SINGLE_PASS:
        # EVEN: n_cols == BLOCK_N, no column masks. LATE_W (many programs): the weight is loaded after the
        # reduction, so it is not held in registers meanwhile; at decode sizes it is loaded up front instead,
        # off the critical path.
        cols = tl.arange(0, BLOCK_N)
        col_ok = cols < n_cols
        xr = _load_row(x_rows + cols[None, :], col_ok[None, :], EVEN, LOAD_CACHE)
        if not LATE_W:
            w = _load_vec(w_ptr + cols, col_ok, EVEN)
        x = xr.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
        if LATE_W:
            w = _load_vec(w_ptr + cols, col_ok, EVEN)
        y = _f32_again(xr) * rstd[:, None] * w[None, :]
        _store_rows(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN, STORE_CACHE)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols = off + tl.arange(0, BLOCK_N)
            col_ok = cols < n_cols
            x = tl.load(x_rows + cols[None, :], mask=col_ok[None, :], other=0.0, eviction_policy=EVICT1).to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols = off + tl.arange(0, BLOCK_N)
            col_ok = cols < n_cols
            x = tl.load(x_rows + cols[None, :], mask=col_ok[None, :], other=0.0, eviction_policy=EVICT2).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
            y = x * rstd[:, None] * w[None, :]
            tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _fused_add_rms_norm_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    n_rows,
    n_cols,
    stride_x,
    stride_r,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    EVEN: tl.constexpr = False,
    LATE_W: tl.constexpr = False,
    LOAD_CACHE: tl.constexpr = "",
    STORE_CACHE: tl.constexpr = "",
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    x_rows = x_ptr + rows[:, None] * stride_x
    r_rows = r_ptr + rows[:, None] * stride_r
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)
        col_ok = cols < n_cols
        x = _load_row(x_rows + cols[None, :], col_ok[None, :], EVEN, LOAD_CACHE).to(tl.float32)
        r = _load_row(r_rows + cols[None, :], col_ok[None, :], EVEN, LOAD_CACHE).to(tl.float32)
        if not LATE_W:
            w = _load_vec(w_ptr + cols, col_ok, EVEN)
        sr = (x + r).to(r_ptr.dtype.element_ty)  # the sum is rounded to the stored dtype before the norm
        _store_rows(r_rows + cols[None, :], sr, row_ok, col_ok, BLOCK_M, EVEN, STORE_CACHE)
        s = sr.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(s * s, axis=1) / n_cols + eps)
        if LATE_W:
            w = _load_vec(w_ptr + cols, col_ok, EVEN)
        y = _f32_again(sr) * rstd[:, None] * w[None, :]
        _store_rows(x_rows + cols[None, :], y.to(x_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN, STORE_CACHE)
    else:
        # Pass 1 only reads; pass 2 re-reads the original x and residual, then writes both, so no lane ever
        # reads a value another lane has already overwritten.
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols = off + tl.arange(0, BLOCK_N)
            col_ok = cols < n_cols
            x = tl.load(x_rows + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            r = tl.load(r_rows + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            s = (x + r).to(r_ptr.dtype.element_ty).to(tl.float32)
            acc += s * s
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols = off + tl.arange(0, BLOCK_N)
            col_ok = cols < n_cols
            mask = row_ok[:, None] & col_ok[None, :]
            x = tl.load(x_rows + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            r = tl.load(r_rows + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
            s = (x + r).to(r_ptr.dtype.element_ty)
            tl.store(r_rows + cols[None, :], s, mask=mask)
            y = s.to(tl.float32) * rstd[:, None] * w[None, :]
            tl.store(x_rows + cols[None, :], y.to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layer_norm_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    n_rows,
    n_cols,
    stride_x,
    stride_y,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    EVEN: tl.constexpr = False,
    LATE_W: tl.constexpr = False,
    LOAD_CACHE: tl.constexpr = "",
    STORE_CACHE: tl.constexpr = "",
    EVICT1: tl.constexpr = "",
    EVICT2: tl.constexpr = "",
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    x_rows = x_ptr + rows[:, None] * stride_x
    y_rows = y_ptr + rows[:, None] * stride_y
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)
        col_ok = cols < n_cols
        xr = _load_row(x_rows + cols[None, :], col_ok[None, :], EVEN, LOAD_CACHE)
        if not LATE_W:
            w = _load_vec(w_ptr + cols, col_ok, EVEN)
            b = _load_vec(b_ptr + cols, col_ok, EVEN)
        x = xr.to(tl.float32)
        mean = tl.sum(x, axis=1) / n_cols
        xc = x - mean[:, None]  # exact two-pass variance, in registers
        if not EVEN:
            xc = tl.where(col_ok[None, :], xc, 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        if LATE_W:
            w = _load_vec(w_ptr + cols, col_ok, EVEN)
            b = _load_vec(b_ptr + cols, col_ok, EVEN)
        y = (_f32_again(xr) - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
        _store_rows(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN, STORE_CACHE)
    else:
        # Pass 1: per-chunk mean and M2 (two-pass within the chunk), merged across chunks (Chan et al.).
        mean = tl.zeros([BLOCK_M], dtype=tl.float32)
        m2 = tl.zeros([BLOCK_M], dtype=tl.float32)
        count = tl.zeros([BLOCK_M], dtype=tl.float32)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols = off + tl.arange(0, BLOCK_N)
            col_ok = cols < n_cols
            x = tl.load(x_rows + cols[None, :], mask=col_ok[None, :], other=0.0, eviction_policy=EVICT1).to(tl.float32)
            n_chunk = tl.minimum(n_cols - off, BLOCK_N).to(tl.float32)
            c_mean = tl.sum(x, axis=1) / n_chunk
            d = tl.where(col_ok[None, :], x - c_mean[:, None], 0.0)
            c_m2 = tl.sum(d * d, axis=1)
            total = count + n_chunk
            delta = c_mean - mean
            mean += delta * (n_chunk / total)
            m2 += c_m2 + delta * delta * (count * n_chunk / total)
            count = total
        rstd = tl.rsqrt(m2 / n_cols + eps)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols = off + tl.arange(0, BLOCK_N)
            col_ok = cols < n_cols
            x = tl.load(x_rows + cols[None, :], mask=col_ok[None, :], other=0.0, eviction_policy=EVICT2).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
            b = tl.load(b_ptr + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
            tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _layer_norm_persistent_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    n_rows,
    n_cols,
    stride_x,
    stride_y,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    EVEN: tl.constexpr = False,
    LOAD_CACHE: tl.constexpr = "",
    STORE_CACHE: tl.constexpr = "",
):
    """layer_norm on a persistent grid: a grid-stride loop over row tiles, the next tile's load issued before
    the current tile is reduced (rows past the end are masked off, so the last prefetch moves no data)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_tiles = tl.cdiv(n_rows, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    xr = _prefetch_tile(x_ptr, pid, n_rows, stride_x, cols, col_ok, BLOCK_M, LOAD_CACHE)
    for tile in range(pid, n_tiles, nprog):
        xn = _prefetch_tile(x_ptr, tile + nprog, n_rows, stride_x, cols, col_ok, BLOCK_M, LOAD_CACHE)
        y = _layer_norm_rows(xr, w_ptr, b_ptr, cols, col_ok, n_cols, eps, EVEN)
        y_offs, row_ok = _row_offsets(tile, n_rows, stride_y, BLOCK_M)
        _store_rows(y_ptr + y_offs + cols[None, :], y.to(y_ptr.dtype.element_ty), row_ok, col_ok, BLOCK_M, EVEN,
                    STORE_CACHE)  # fmt: skip
        xr = xn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim: ``y = x * rsqrt(mean(x^2, -1) + eps) * weight``, returned in ``x.dtype``.

    One fused Triton kernel; rows may be strided (only the last dim must be unit-stride, else it is copied).
    The output is a new contiguous tensor of ``x``'s shape.
    """
    n = x.shape[-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    x2 = as_rows(x)
    w = _vector(weight, n, "weight")
    m = x2.shape[0]
    block_m, block_n, num_warps, single = _config(n, m)
    n_tiles = triton.cdiv(m, block_m)
    stages, evict1, evict2 = LOOP_STAGES, "", ""
    prefill = block_m == 1 and n_tiles >= LATE_WEIGHTS_PROGRAMS
    if single and prefill and RMS_CHUNKED_MIN_WIDTH <= n <= RMS_CHUNKED_MAX_WIDTH:
        # inductor's scheme at this width (see RMS_CHUNKED_MIN_WIDTH): two reads of each row, the second from L2
        block_n, num_warps, single = min(RMS_CHUNK, block_n), RMS_CHUNK_WARPS, False
        stages, evict1, evict2 = RMS_CHUNK_STAGES, "evict_last", "evict_first"
    _rms_norm_kernel[(n_tiles,)](
        x2, w, out, m, n, x2.stride(0), n, eps,
        BLOCK_M=block_m, BLOCK_N=block_n, SINGLE_PASS=single, LOOP_STAGES=stages,
        EVEN=block_n == n, LATE_W=n_tiles >= LATE_WEIGHTS_PROGRAMS,
        LOAD_CACHE=WIDE_LOAD_CACHE if single and n >= WIDE_LOAD_MIN_WIDTH else "", EVICT1=evict1, EVICT2=evict2,
        num_warps=num_warps,
    )  # fmt: skip
    return out


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
    x2 = as_rows(x)
    r2 = as_rows(residual)
    w = _vector(weight, n, "weight")
    m = x2.shape[0]
    block_m, block_n, num_warps, single = _config(n, m)
    _fused_add_rms_norm_kernel[(triton.cdiv(m, block_m),)](
        x2, r2, w, m, n, x2.stride(0), r2.stride(0), eps,
        BLOCK_M=block_m, BLOCK_N=block_n, SINGLE_PASS=single, LOOP_STAGES=LOOP_STAGES,
        EVEN=block_n == n, LATE_W=triton.cdiv(m, block_m) >= LATE_WEIGHTS_PROGRAMS, num_warps=num_warps,
    )  # fmt: skip
    # as_rows only copies when no in-place view exists; write such temporaries back.
    if x2.data_ptr() != x.data_ptr():
        x.copy_(x2.view(x.shape))
    if r2.data_ptr() != residual.data_ptr():
        residual.copy_(r2.view(residual.shape))


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim: ``(x - mean) * rsqrt(var + eps) * weight + bias`` in one Triton kernel.

    Biased variance, float32 statistics, output a new contiguous tensor in ``x.dtype``.
    """
    n = x.shape[-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    x2 = as_rows(x)
    w = _vector(weight, n, "weight")
    b = _vector(bias, n, "bias")
    m = x2.shape[0]
    block_m, block_n, num_warps, single = _config(n, m)
    n_tiles = triton.cdiv(m, block_m)
    load_cache = WIDE_LOAD_CACHE if single and n >= WIDE_LOAD_MIN_WIDTH else ""
    progs = 0
    if single and block_n != n and n >= LN_PERSISTENT_MIN_WIDTH:
        key = (x.dtype, x.device.index, block_m, block_n, LN_PERSISTENT_WARPS, load_cache)
        progs = _persistent(x2, n_tiles, LN_PERSISTENT_PER_SM, key)
    if progs:
        compiled = _layer_norm_persistent_kernel[(progs,)](
            x2, w, b, out, m, n, x2.stride(0), n, eps,
            BLOCK_M=block_m, BLOCK_N=block_n, EVEN=False, LOAD_CACHE=load_cache, num_warps=LN_PERSISTENT_WARPS,
        )  # fmt: skip
        if key not in _RESIDENT:
            _RESIDENT[key] = _resident_per_sm(compiled, LN_PERSISTENT_WARPS)
        return out
    _layer_norm_kernel[(n_tiles,)](
        x2, w, b, out, m, n, x2.stride(0), n, eps,
        BLOCK_M=block_m, BLOCK_N=block_n, SINGLE_PASS=single, LOOP_STAGES=LOOP_STAGES,
        EVEN=block_n == n, LATE_W=n_tiles >= LATE_WEIGHTS_PROGRAMS, LOAD_CACHE=load_cache, num_warps=num_warps,
    )  # fmt: skip
    return out
