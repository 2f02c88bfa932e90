"""Triton kernels for row-wise elementwise ops: softmax over the last dim in one fused kernel.

* Rows up to ``MAX_FUSED_WIDTH`` elements: one pass with whole rows in registers (``[BLOCK_M, BLOCK_N]``
  tile, ``BLOCK_N = next_power_of_2(width)``, several short rows per program): one read, one write.
* Wider rows (e.g. vocabulary-sized logits): an online-softmax loop over ``LOOP_BLOCK``-wide chunks keeps
  a running max and rescaled running sum (one read), then a second loop writes ``exp(x - max) / sum``
  (a second read, mostly from L2); loads are software-pipelined ``LOOP_STAGES`` deep.
* Wide rows that are too few to keep the GPU busy (decode: one to a few dozen rows of logits) are split:
  each ``SPLIT_BLOCK``-wide block of a row is a program that stores the block's max and sum; a second
  kernel combines a row's blocks and writes each block of the output. One program per row would leave
  all but a few SMs idle and read the whole row alone.
* Float32 math throughout, output cast to ``x.dtype``; the launch configuration comes from
  :func:`launch_config`, a small pure-Python function meant to be tuned.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ._rows import as_rows

#: Widest row (elements) kept whole in registers. 32768 would fit (no weight to hold) but needs ~96 registers
#: per thread at 16 warps, i.e. one program per SM with no overlap of loads and math; the pipelined loop keeps
#: 2-3 programs per SM and its second read mostly hits L2.
MAX_FUSED_WIDTH = 16384
#: Chunk width (elements) of the online-softmax loop for wider rows.
LOOP_BLOCK = 8192
#: Software-pipelining depth of the chunk loops (loads of later chunks in flight while one is reduced).
LOOP_STAGES = 3
#: Target elements per program when several short rows share one program.
ROW_TILE = 4096
#: Upper bound on rows per program.
MAX_ROWS_PER_PROGRAM = 64
#: Do not pack rows so densely that fewer programs than this are launched (~2 per SM on H100/H200).
MIN_PROGRAMS = 264
#: Wide rows are split when there are fewer rows than this (0: never): then each ``SPLIT_BLOCK``-wide block
#: of a row is a program of its own (the whole input fits in L2, so the second read is cheap)...
SPLIT_MAX_ROWS = 264
SPLIT_BLOCK = 4096
#: ... of this many warps.
SPLIT_WARPS = 8


def _num_warps(elements: int) -> int:
    """Warps for a tile of `elements` values: ~16 values per thread, at most 16 warps."""
    if elements >= 8192:
        return 16
    if elements >= 2048:
        return 8
    if elements >= 512:
        return 4
    if elements >= 256:
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
    """Choose ``(BLOCK_M, BLOCK_N, num_warps, single_pass)`` for softmax over ``[n_rows, n_cols]``.

    * ``n_cols <= max_fused_width``: one pass, ``BLOCK_N = next_power_of_2(n_cols)``; rows per program
      ``BLOCK_M = row_tile // BLOCK_N`` (1..``max_rows_per_program``), halved while that would launch fewer
      than ``min_programs`` programs.
    * wider rows: ``BLOCK_M = 1``, ``BLOCK_N = loop_block``, online softmax over chunks.
    * ``num_warps`` grows with the tile (1..16), about 16 float32 values per thread.
    """
    block_n = triton.next_power_of_2(max(n_cols, 1))
    if block_n > max_fused_width:
        block_n = min(loop_block, block_n)
        return 1, block_n, _num_warps(block_n), False
    block_m = max(1, min(row_tile // block_n, max_rows_per_program))
    while block_m > 1 and triton.cdiv(n_rows, block_m) < min_programs:
        block_m //= 2
    return block_m, block_n, _num_warps(block_m * block_n), True


def _config(n_cols: int, n_rows: int) -> tuple[int, int, int, bool]:
    """launch_config with the module's current tunables (read at call time so they can be patched)."""
    cap = MAX_ROWS_PER_PROGRAM * MIN_PROGRAMS  # beyond this the row count no longer changes the choice
    return launch_config(
        n_cols, min(n_rows, cap), MAX_FUSED_WIDTH, LOOP_BLOCK, ROW_TILE, MIN_PROGRAMS, MAX_ROWS_PER_PROGRAM
    )


@triton.jit
def _softmax_kernel(
    x_ptr,
    y_ptr,
    n_rows,
    n_cols,
    stride_x,
    stride_y,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # tail programs re-read the last row; stores are masked
    x_rows = x_ptr + rows[:, None] * stride_x
    y_rows = y_ptr + rows[:, None] * stride_y
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)
        col_ok = cols < n_cols
        x = tl.load(x_rows + cols[None, :], mask=col_ok[None, :], other=float("-inf")).to(tl.float32)
        row_max = tl.max(x, axis=1)
        e = tl.exp(x - row_max[:, None])
        inv_sum = 1.0 / tl.sum(e, axis=1)
        y = e * inv_sum[:, None]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
    else:
        # Online softmax: running max m and running sum s of exp(x - m), rescaled when m grows.
        m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        s = tl.zeros([BLOCK_M], dtype=tl.float32)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols = off + tl.arange(0, BLOCK_N)
            col_ok = cols < n_cols
            x = tl.load(x_rows + cols[None, :], mask=col_ok[None, :], other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=1))
            # While a row has seen only -inf, shift by 0 instead so that no -inf - -inf NaN appears.
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)
            s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift[:, None]), axis=1)
            m = m_new
        inv_sum = 1.0 / s
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols = off + tl.arange(0, BLOCK_N)
            col_ok = cols < n_cols
            x = tl.load(x_rows + cols[None, :], mask=col_ok[None, :], other=float("-inf")).to(tl.float32)
            y = tl.exp(x - m[:, None]) * inv_sum[:, None]
            tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _softmax_block_stats_kernel(x_ptr, max_ptr, sum_ptr, n_cols, n_blocks, stride_x, BLOCK_N: tl.constexpr):
    """Max and sum of exp(x - max) over one block of one row: program (row, block)."""
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
    block_max = tl.max(x, axis=0)
    shift = tl.where(block_max == float("-inf"), 0.0, block_max)  # a block of only -inf: sum 0, no NaN
    tl.store(max_ptr + row * n_blocks + block, block_max)
    tl.store(sum_ptr + row * n_blocks + block, tl.sum(tl.exp(x - shift), axis=0))


@triton.jit
def _softmax_block_write_kernel(
    x_ptr, y_ptr, max_ptr, sum_ptr, n_cols, n_blocks, stride_x, stride_y,
    BLOCK_N: tl.constexpr, BLOCKS_P2: tl.constexpr,
):  # fmt: skip
    """exp(x - max) / sum over one block of one row, the row's max and sum combined from all its blocks."""
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    which = tl.arange(0, BLOCKS_P2)
    ok = which < n_blocks
    maxes = tl.load(max_ptr + row * n_blocks + which, mask=ok, other=float("-inf"))
    sums = tl.load(sum_ptr + row * n_blocks + which, mask=ok, other=0.0)
    row_max = tl.max(maxes, axis=0)
    shift = tl.where(maxes == float("-inf"), row_max, maxes)  # blocks of only -inf add 0, not 0 * NaN
    inv_sum = 1.0 / tl.sum(sums * tl.exp(shift - row_max), axis=0)  # a row of only -inf: NaN, as in torch
    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=col_ok, other=float("-inf")).to(tl.float32)
    y = tl.exp(x - row_max) * inv_sum
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=col_ok)


def _softmax_split(x2: torch.Tensor, out: torch.Tensor) -> None:
    """Softmax of few wide rows: a program per SPLIT_BLOCK-wide block for the statistics, then for the output."""
    m, n = x2.shape
    n_blocks = triton.cdiv(n, SPLIT_BLOCK)
    maxes = torch.empty((m, n_blocks), dtype=torch.float32, device=x2.device)
    sums = torch.empty((m, n_blocks), dtype=torch.float32, device=x2.device)
    _softmax_block_stats_kernel[(m, n_blocks)](
        x2, maxes, sums, n, n_blocks, x2.stride(0), BLOCK_N=SPLIT_BLOCK, num_warps=SPLIT_WARPS,
    )  # fmt: skip
    _softmax_block_write_kernel[(m, n_blocks)](
        x2, out, maxes, sums, n, n_blocks, x2.stride(0), n,
        BLOCK_N=SPLIT_BLOCK, BLOCKS_P2=triton.next_power_of_2(n_blocks), num_warps=SPLIT_WARPS,
    )  # fmt: skip


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim in one fused Triton kernel; float32 accumulation, output in ``x.dtype``.

    Rows may be strided (only the last dim must be unit-stride, else it is copied). Returns a new contiguous
    tensor of ``x``'s shape. A row that is entirely -inf gives NaN, as in torch.
    """
    n = x.shape[-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    x2 = as_rows(x)
    m = x2.shape[0]
    block_m, block_n, num_warps, single = _config(n, m)
    if not single and m < SPLIT_MAX_ROWS:
        _softmax_split(x2, out)
        return out
    _softmax_kernel[(triton.cdiv(m, block_m),)](
        x2, out, m, n, x2.stride(0), n,
        BLOCK_M=block_m, BLOCK_N=block_n, SINGLE_PASS=single, LOOP_STAGES=LOOP_STAGES, num_warps=num_warps,
    )  # fmt: skip
    return out
