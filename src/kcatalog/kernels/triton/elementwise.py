"""Triton kernels for row-wise elementwise ops: softmax over the last dim in one fused kernel.

* Rows up to ``max_fused_width`` elements: one pass with whole rows in registers (``[BLOCK_M, BLOCK_N]``
  tile, ``BLOCK_N = next_power_of_2(width)``, several short rows per program): one read, one write.
* Wider rows (e.g. vocabulary-sized logits): an online-softmax loop over ``loop_block``-wide chunks keeps
  a running max and rescaled running sum (one read), then a second loop writes ``exp(x - max) / sum``
  (a second read, mostly from L2); loads are software-pipelined ``loop_stages`` deep.
* Wide rows that are too few to keep the GPU busy (decode: one to a few dozen rows of logits) are split:
  each ``split_block``-wide block of a row is a program that stores the block's max and sum; a second
  kernel combines a row's blocks and writes each block of the output. One program per row would leave
  all but a few SMs idle and read the whole row alone.
* Float32 math throughout, output cast to ``x.dtype``. The tunables are :data:`TUNING` (a
  :class:`SoftmaxTuning`); the launch configuration is :meth:`RowTiling.config`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..tracing import launch
from ._rows import RowTiling, Tunables, as_rows, cdiv, chunk_cols, load_chunk, next_power_of_2, row_ptrs, store_chunk


@dataclass(frozen=True)
class SoftmaxTuning(RowTiling):
    """Softmax's tunables; see :class:`RowTiling` for the tiles (~16 float32 values per thread, padded width).

    * `max_fused_width`: 32768 would fit (no weight to hold) but needs ~96 registers per thread at 16 warps,
      i.e. one program per SM with no overlap of loads and math; the pipelined loop keeps 2-3 programs per SM
      and its second read mostly hits L2. `loop_block`: the online-softmax loop's chunk width.
    * `split_rows_per_sm`: wide rows are split when there are fewer rows than this per SM (0: never); then
      each `split_block`-wide block of a row is a program of its own, of `split_warps` warps (the whole input
      fits in L2, so the second read is cheap).
    """

    loop_block: int = 8192
    split_rows_per_sm: int = 2
    split_block: int = 4096
    split_warps: int = 8


#: The tunables in effect; ``with TUNING.override(split_rows_per_sm=0): ...`` changes them within a block.
TUNING = Tunables(__name__, SoftmaxTuning())


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
    x_rows, row_ok = row_ptrs(x_ptr, tl.program_id(0), n_rows, stride_x, BLOCK_M)
    y_rows, _ = row_ptrs(y_ptr, tl.program_id(0), n_rows, stride_y, BLOCK_M)
    if SINGLE_PASS:
        cols, col_ok = chunk_cols(0, n_cols, BLOCK_N)
        x = load_chunk(x_rows, cols, col_ok, float("-inf"), "")
        row_max = tl.max(x, axis=1)
        e = tl.exp(x - row_max[:, None])
        inv_sum = 1.0 / tl.sum(e, axis=1)
        y = e * inv_sum[:, None]
        store_chunk(y_rows, cols, y.to(y_ptr.dtype.element_ty), row_ok, col_ok)
    else:
        # Online softmax: running max m and running sum s of exp(x - m), rescaled when m grows.
        m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        s = tl.zeros([BLOCK_M], dtype=tl.float32)
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            x = load_chunk(x_rows, cols, col_ok, float("-inf"), "")
            m_new = tl.maximum(m, tl.max(x, axis=1))
            # While a row has seen only -inf, shift by 0 instead so that no -inf - -inf NaN appears.
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)
            s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift[:, None]), axis=1)
            m = m_new
        inv_sum = 1.0 / s
        for off in tl.range(0, n_cols, BLOCK_N, num_stages=LOOP_STAGES):
            cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
            x = load_chunk(x_rows, cols, col_ok, float("-inf"), "")
            y = tl.exp(x - m[:, None]) * inv_sum[:, None]
            store_chunk(y_rows, cols, y.to(y_ptr.dtype.element_ty), row_ok, col_ok)


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


def _softmax_split(x2: torch.Tensor, out: torch.Tensor, t: SoftmaxTuning) -> None:
    """Softmax of few wide rows: a program per split_block-wide block for the statistics, then for the output."""
    m, n = x2.shape
    n_blocks = cdiv(n, t.split_block)
    maxes = torch.empty((m, n_blocks), dtype=torch.float32, device=x2.device)
    sums = torch.empty((m, n_blocks), dtype=torch.float32, device=x2.device)
    launch(_softmax_block_stats_kernel, (m, n_blocks))(
        x2, maxes, sums, n, n_blocks, x2.stride(0), BLOCK_N=t.split_block, num_warps=t.split_warps,
    )  # fmt: skip
    launch(_softmax_block_write_kernel, (m, n_blocks))(
        x2, out, maxes, sums, n, n_blocks, x2.stride(0), n,
        BLOCK_N=t.split_block, BLOCKS_P2=next_power_of_2(n_blocks), num_warps=t.split_warps,
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
    t = TUNING.get()
    sms = t.device_sms(x.device)
    block_m, block_n, num_warps, single = t.config(n, m, sms)
    if not single and m < t.split_rows_per_sm * sms:
        _softmax_split(x2, out, t)
        return out
    launch(_softmax_kernel, (cdiv(m, block_m),))(
        x2, out, m, n, x2.stride(0), n,
        BLOCK_M=block_m, BLOCK_N=block_n, SINGLE_PASS=single, LOOP_STAGES=t.loop_stages, num_warps=num_warps,
    )  # fmt: skip
    return out
