"""Fused linear cross-entropy in Triton (backend `triton`): the LM head's GEMM and the loss, the [T, V] logits
never materialised.

The vocabulary is cut into column blocks of `cols` rows of the weight, so that a ``[T, cols]`` block of logits
is about as large as x (``cols ~ H``, at least `min_block_elements` in all; one block when V is small):

* forward: per block, ``logits = x @ W[v0:v1].T`` (torch's GEMM, in x's dtype) and one kernel that folds the
  block into each row's running max, running sum of ``exp(logit - max)`` and the target's logit; the last
  block's launch writes each row's logsumexp and loss. One GEMM over the vocabulary, no write of the logits.
* backward, from the forward's logsumexp: per block, the same GEMM again, one kernel that overwrites the block
  in place with ``(softmax - onehot) * grad / n`` (0 on ignored rows), then ``grad_W[v0:v1] = g.T @ x``
  (written once: the whole token reduction is inside one GEMM, float32-accumulated) and ``grad_x += g @
  W[v0:v1]`` into a float32 [T, H] accumulator.

Why blocks of the vocabulary and not of the tokens (Liger-Kernel chunks the tokens and computes the gradients
in the forward, 3 GEMMs instead of 4): a token chunk sized like x is ~T*H/V rows (128 for Llama-3 at 4096
tokens), so each of its GEMMs re-reads the whole [V, H] weight, and the weight gradient's accumulator (read
and written by every chunk) makes the GEMMs memory-bound; and gradients made in the forward must be kept,
[V, H], from the forward to the backward, where a custom op must copy them to scale by the incoming
gradient (a torch op's outputs may not alias its inputs). Here every GEMM has K or N = T or H, nothing of
size [V, H] lives between forward and backward, and the weight gradient is allocated once, in the backward,
and handed to autograd as is.

Float32 math in the kernels for bf16/fp16/fp32 logits; the number of rows that count is a device tensor
read by the kernel (no host sync). Nothing is atomic: results are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..torch.loss import check_inputs, valid_rows
from ..tracing import launch
from ._rows import Spread, Tunables, cdiv, chunk_cols, load_chunk, next_power_of_2, row_ptrs, store_chunk


@dataclass(frozen=True)
class LossTuning(Spread):
    """The loss kernels' tunables.

    `block_factor`: a block of logits holds about this many times x's elements (Liger's memory bound, 1);
    `min_block_elements`: but at least this many (few tokens: fewer, wider blocks); `col_align`: block widths
    are multiples of this (GEMM tiles); `block_n`: columns per step of the kernels' loop; `tile`: elements per
    program (narrow blocks stack rows); `num_warps`: warps per program.
    """

    block_factor: float = 1.0
    min_block_elements: int = 1 << 22
    col_align: int = 256
    block_n: int = 4096
    tile: int = 8192
    num_warps: int = 8

    def block_cols(self, n_rows: int, hidden: int, vocab: int) -> int:
        """Weight rows per block: ~``block_factor * H`` (so the block is ~x's size), a multiple of col_align."""
        want = max(self.block_factor * n_rows * hidden, self.min_block_elements) / max(n_rows, 1)
        cols = cdiv(max(int(want), 1), self.col_align) * self.col_align
        return max(1, min(cols, vocab))

    def tiles(self, n_rows: int, cols: int) -> tuple[int, int]:
        """(BLOCK_M, BLOCK_N) of the kernels over a [n_rows, cols] block."""
        block_n = min(next_power_of_2(cols), self.block_n)
        return max(1, min(next_power_of_2(n_rows), self.tile // block_n)), block_n


#: The tunables in effect; ``with TUNING.override(block_factor=4.0): ...`` changes them within a block.
TUNING = Tunables(__name__, LossTuning())


@triton.jit
def _row_ids(n_rows, BLOCK_M: tl.constexpr):
    """This program's rows, clamped to the last (as row_ptrs clamps them), for the per-row vectors."""
    return tl.minimum(tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M), n_rows - 1).to(tl.int64)


@triton.jit
def _lse_block_kernel(
    logits_ptr, target_ptr, stats_ptr, lse_ptr, loss_ptr, n_rows, n_cols, v0, ignore_index,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, FIRST: tl.constexpr, LAST: tl.constexpr,
):  # fmt: skip
    """Fold logits[:, v0:v0 + n_cols] (a contiguous [n_rows, n_cols] block) into each row's running max,
    sum of exp(logit - max) and target logit (stats: [3, n_rows] float32); LAST: write lse and the row loss."""
    rows_ptr, row_ok = row_ptrs(logits_ptr, tl.program_id(0), n_rows, n_cols, BLOCK_M)
    rows = _row_ids(n_rows, BLOCK_M)
    local = tl.load(target_ptr + rows) - v0  # the target's column in this block, if it is in it
    if FIRST:
        m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        s = tl.zeros([BLOCK_M], dtype=tl.float32)
        picked = tl.zeros([BLOCK_M], dtype=tl.float32)
    else:
        m = tl.load(stats_ptr + rows)
        s = tl.load(stats_ptr + n_rows + rows)
        picked = tl.load(stats_ptr + 2 * n_rows + rows)
    for off in range(0, n_cols, BLOCK_N):
        cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
        z = load_chunk(rows_ptr, cols, col_ok, float("-inf"), "")
        m_new = tl.maximum(m, tl.max(z, axis=1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # no -inf - -inf NaN before a finite logit
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(z - shift[:, None]), axis=1)
        m = m_new
        hit = (cols[None, :] == local[:, None]) & col_ok[None, :]  # a later block's target is past n_cols
        picked += tl.sum(tl.where(hit, z, 0.0), axis=1)
    if LAST:
        lse = m + tl.log(s)
        tl.store(lse_ptr + rows, lse, mask=row_ok)
        target_ok = (local + v0) != ignore_index
        tl.store(loss_ptr + rows, tl.where(target_ok, lse - picked, 0.0), mask=row_ok)
    else:
        tl.store(stats_ptr + rows, m, mask=row_ok)
        tl.store(stats_ptr + n_rows + rows, s, mask=row_ok)
        tl.store(stats_ptr + 2 * n_rows + rows, picked, mask=row_ok)


@triton.jit
def _grad_block_kernel(
    logits_ptr, target_ptr, lse_ptr, scale_ptr, n_rows, n_cols, v0, ignore_index,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Overwrite a [n_rows, n_cols] block of logits (columns v0.. of the vocabulary) with
    ``(exp(logit - lse) - onehot(target)) * scale`` on rows whose target counts, 0 on the others."""
    rows_ptr, row_ok = row_ptrs(logits_ptr, tl.program_id(0), n_rows, n_cols, BLOCK_M)
    rows = _row_ids(n_rows, BLOCK_M)
    target = tl.load(target_ptr + rows)
    lse = tl.load(lse_ptr + rows)
    scale = tl.where(target != ignore_index, tl.load(scale_ptr), 0.0)
    local = target - v0
    for off in range(0, n_cols, BLOCK_N):
        cols, col_ok = chunk_cols(off, n_cols, BLOCK_N)
        z = load_chunk(rows_ptr, cols, col_ok, 0.0, "")
        g = tl.exp(z - lse[:, None]) - tl.where(cols[None, :] == local[:, None], 1.0, 0.0)
        g = tl.where(scale[:, None] != 0.0, g * scale[:, None], 0.0)  # an ignored row is 0, whatever its logits
        store_chunk(rows_ptr, cols, g.to(logits_ptr.dtype.element_ty), row_ok, col_ok)


def _check_dtypes(x: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dtype != weight.dtype or x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(
            f"fused_linear_cross_entropy (triton): x and weight must share one of float32, float16, bfloat16; got "
            f"{x.dtype} and {weight.dtype}"
        )


class _Blocks:
    """The vocabulary's column blocks for one call, and one reused buffer that holds each block's logits."""

    def __init__(self, x: torch.Tensor, weight: torch.Tensor, t: LossTuning) -> None:
        self.x, self.weight, self.t = x, weight, t
        n_rows, vocab = x.shape[0], weight.shape[0]
        self.cols = t.block_cols(n_rows, x.shape[1], vocab)
        self.starts = range(0, vocab, self.cols)
        self.buffer = torch.empty(n_rows * self.cols, dtype=x.dtype, device=x.device)

    def logits(self, v0: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(the weight rows of the block at v0, ``x @ rows.T`` in the buffer, contiguous)."""
        rows = self.weight[v0 : v0 + self.cols]
        out = self.buffer[: self.x.shape[0] * rows.shape[0]].view(self.x.shape[0], rows.shape[0])
        torch.mm(self.x, rows.t(), out=out)
        return rows, out

    def launch(self, kernel: object, block: torch.Tensor, *args: object, **meta: object) -> None:
        """`kernel` over the rows of `block`."""
        block_m, block_n = self.t.tiles(block.shape[0], block.shape[1])
        launch(kernel, (cdiv(block.shape[0], block_m),))(
            block, *args, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=self.t.num_warps, **meta
        )


def fused_linear_cross_entropy(
    x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy of ``x @ weight.T`` over the rows whose target is not ignore_index, each row's
    logsumexp [T]), both float32; 0 when every target is ignored. See the module docstring."""
    check_inputs(x, weight, target)
    _check_dtypes(x, weight)
    n_rows = x.shape[0]
    lse = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    row_loss = torch.zeros(n_rows, dtype=torch.float32, device=x.device)
    _, count = valid_rows(target, ignore_index)
    if n_rows and weight.shape[0]:
        target = target.contiguous()
        stats = torch.empty((3, n_rows), dtype=torch.float32, device=x.device)
        blocks = _Blocks(x, weight, TUNING.get())
        for v0 in blocks.starts:
            _, block = blocks.logits(v0)
            blocks.launch(
                _lse_block_kernel, block, target, stats, lse, row_loss, n_rows, block.shape[1], v0, ignore_index,
                FIRST=v0 == 0, LAST=v0 == blocks.starts[-1],
            )  # fmt: skip
    return row_loss.sum() / count, lse


def fused_linear_cross_entropy_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int,
    lse: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of the loss wrt x and weight, scaled by `grad` (0-dim), in x's and weight's dtypes; `lse` is
    the forward's. See the module docstring."""
    check_inputs(x, weight, target)
    _check_dtypes(x, weight)
    n_rows = x.shape[0]
    grad_w = torch.empty_like(weight, memory_format=torch.contiguous_format)
    acc = torch.zeros(x.shape, dtype=torch.float32, device=x.device)  # grad_x, summed over the blocks
    if n_rows == 0 or weight.shape[0] == 0:
        return acc.to(x.dtype), grad_w.zero_()
    _, count = valid_rows(target, ignore_index)
    scale = (grad.to(torch.float32) / count).reshape(1)
    # float16 has 5 exponent bits: (softmax - onehot) / count, ~1e-5 / 4096 at Llama-3's vocabulary, underflows to
    # zero (grad_x 6e-3 off at 4,096 tokens on the H200). Its blocks hold softmax - onehot, and the scale comes after
    # the GEMMs (on the CPU, 1,024 tokens: grad_x 1.6e-2 off before, 2e-4 after); a weight-gradient element overflows
    # only where the mean loss's own exceeds 65504 / count. bfloat16's exponent is float32's: scaled in the kernel.
    after = x.dtype == torch.float16
    in_kernel = torch.ones_like(scale) if after else scale
    target, lse = target.contiguous(), lse.to(torch.float32).contiguous()
    blocks = _Blocks(x, weight, TUNING.get())
    for v0 in blocks.starts:
        rows, g = blocks.logits(v0)
        blocks.launch(_grad_block_kernel, g, target, lse, in_kernel, n_rows, g.shape[1], v0, ignore_index)
        torch.mm(g.t(), x, out=grad_w[v0 : v0 + rows.shape[0]])
        _accumulate(acc, g, rows)
    if after:
        grad_w.mul_(scale)
        acc.mul_(scale)
    return acc.to(x.dtype), grad_w


def _accumulate(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``acc += a @ b`` into a float32 accumulator: in the GEMM's epilogue where torch has it (CUDA, 16-bit
    operands), else through a temporary product."""
    if a.dtype == torch.float32:
        acc.addmm_(a, b)
    elif a.is_cuda and torch.version.hip is None and hasattr(torch.ops.aten.addmm, "dtype_out"):
        torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
    else:
        acc += a @ b
