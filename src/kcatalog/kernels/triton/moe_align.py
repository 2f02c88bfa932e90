"""The alignment step of the Triton fused experts (moe.py) as Triton kernels: the (token, slot) pairs sorted by
expert, each expert's run padded to BLOCK_M with a sentinel, and the expert of each block.

One launch up to CHUNK pairs (every decode batch), two above: the per-expert counts of each CHUNK of pairs,
then the placement. Each placement program owns one chunk of pairs and a share of the blocks:

* from the counts it forms each expert's padded run (a prefix sum over the experts) and, for its chunk, how
  many of each expert's pairs come before it; a pair's slot is then its expert's run start, plus those, plus
  the number of earlier pairs of its chunk with the same expert (TILE x TILE comparisons). The order within an
  expert is the pairs' own order: the same as a stable sort by expert, deterministic by construction.
* for each of its blocks, the block's expert (E past the last run), and the sentinel S in the slots of the
  block that no pair takes. Real slots and sentinel slots are disjoint, so no program waits for another.

Nothing is read back to the host, and the grids follow the shapes alone (CUDA-graph safe): the number of blocks
is the upper bound ``cdiv(S, BLOCK_M) + min(E, S)``, so an expert with no pair has no block.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..tracing import launch
from ._rows import cdiv

CHUNK = 1024  # pairs per placement program, and per histogram
TILE = 128  # pairs ranked at once against as many earlier ones
BLOCKS = 16  # blocks labelled at once
ROWS = 8  # chunks' counts summed at once


class Alignment(NamedTuple):
    """The pairs sorted by expert and padded per expert to BLOCK_M (sentinel S), and each block's expert."""

    sorted_pairs: torch.Tensor  # [blocks * BLOCK_M] int32: t * K + k, or S for padding
    block_expert: torch.Tensor  # [blocks] int32: the block's expert, E for the blocks past the last one


@triton.jit
def _chunk_counts(ids_ptr, chunk, n_pairs, BINS: tl.constexpr, CHUNK: tl.constexpr):
    """How many pairs of chunk `chunk` each expert receives ([BINS] int32)."""
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    ok = offs < n_pairs
    ids = tl.load(ids_ptr + offs, mask=ok, other=0).to(tl.int32)
    return tl.histogram(ids, BINS, mask=ok)


@triton.jit
def _count_kernel(ids_ptr, counts_ptr, n_pairs, BINS: tl.constexpr, CHUNK: tl.constexpr):
    """counts[chunk, e]: the pairs of each chunk per expert."""
    chunk = tl.program_id(0)
    tl.store(counts_ptr + chunk * BINS + tl.arange(0, BINS), _chunk_counts(ids_ptr, chunk, n_pairs, BINS, CHUNK))


@triton.jit
def _align_kernel(
    ids_ptr,
    counts_ptr,
    sorted_ptr,
    block_expert_ptr,
    n_pairs,
    experts,
    n_blocks,
    BLOCK_M: tl.constexpr,
    BINS: tl.constexpr,
    CHUNK: tl.constexpr,
    TILE: tl.constexpr,
    BLOCKS: tl.constexpr,
    ROWS: tl.constexpr,
    COUNTED: tl.constexpr,
):
    """Place the pairs of chunk `pid` and label blocks pid, pid + programs, ... (see the module docstring)."""
    pid = tl.program_id(0)
    bins = tl.arange(0, BINS)
    if COUNTED:  # the chunks' counts from _count_kernel: totals, and those of the chunks before this one
        total = tl.zeros((BINS,), dtype=tl.int32)
        before = tl.zeros((BINS,), dtype=tl.int32)
        n_chunks = tl.cdiv(n_pairs, CHUNK)
        for row0 in range(0, n_chunks, ROWS):
            chunk = row0 + tl.arange(0, ROWS)
            counts = tl.load(counts_ptr + chunk[:, None] * BINS + bins[None, :], mask=(chunk < n_chunks)[:, None])
            total += tl.sum(tl.where((chunk < n_chunks)[:, None], counts, 0), axis=0)
            before += tl.sum(tl.where((chunk < pid)[:, None], counts, 0), axis=0)
    else:  # a single chunk: counted here, nothing before it
        total = _chunk_counts(ids_ptr, 0, n_pairs, BINS, CHUNK)
        before = tl.zeros((BINS,), dtype=tl.int32)
    padded = (total + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, 0)
    starts = ends - padded
    base = starts + before  # the first slot of this chunk's pairs of each expert

    start = pid * CHUNK
    for tile in range(0, tl.cdiv(tl.minimum(n_pairs - start, CHUNK), TILE)):
        rows = start + tile * TILE + tl.arange(0, TILE)
        ok = rows < n_pairs
        expert = tl.load(ids_ptr + rows, mask=ok, other=0).to(tl.int32)
        rank = tl.zeros((TILE,), dtype=tl.int32)
        for prior in range(0, tile + 1):  # the earlier pairs of the chunk with the same expert
            cols = start + prior * TILE + tl.arange(0, TILE)
            other = tl.load(ids_ptr + cols, mask=cols < n_pairs, other=-1).to(tl.int32)
            same = (other[None, :] == expert[:, None]) & (cols[None, :] < rows[:, None])
            rank += tl.sum(same.to(tl.int32), axis=1)
        tl.store(sorted_ptr + tl.gather(base, expert, 0) + rank, rows, mask=ok)

    for group in range(pid, tl.cdiv(n_blocks, BLOCKS), tl.num_programs(0)):
        blocks = group * BLOCKS + tl.arange(0, BLOCKS)
        real = blocks < n_blocks
        first = blocks * BLOCK_M
        # The block's expert: how many runs end at or before its first slot (E past the last run).
        done = (ends[None, :] <= first[:, None]) & (bins[None, :] < experts)
        owner = tl.sum(done.to(tl.int32), axis=1)
        tl.store(block_expert_ptr + blocks, owner, mask=real)
        clamped = tl.minimum(owner, experts - 1)
        taken = tl.gather(starts, clamped, 0) + tl.gather(total, clamped, 0)  # the run's first free slot
        slots = first[:, None] + tl.arange(0, BLOCK_M)[None, :]
        pad = (owner[:, None] >= experts) | (slots >= taken[:, None])
        tl.store(sorted_ptr + slots, tl.zeros_like(slots) + n_pairs, mask=real[:, None] & pad)


def align(topk_ids: torch.Tensor, experts: int, block_m: int) -> Alignment:
    """Sort the (token, slot) pairs of `topk_ids` [T, K] (values in [0, E)) by expert, stably, and pad each
    expert's run to `block_m`: one launch up to CHUNK pairs, two above, no host sync."""
    flat = topk_ids.reshape(-1)
    pairs = flat.numel()
    blocks = cdiv(pairs, block_m) + min(experts, pairs)
    device = flat.device
    sorted_pairs = torch.empty(blocks * block_m, dtype=torch.int32, device=device)
    block_expert = torch.empty(blocks, dtype=torch.int32, device=device)
    if pairs == 0:
        return Alignment(sorted_pairs, block_expert)
    chunks = cdiv(pairs, CHUNK)
    bins = triton.next_power_of_2(experts)
    counted = chunks > 1
    counts = torch.empty((chunks, bins), dtype=torch.int32, device=device) if counted else block_expert
    if counted:
        launch(_count_kernel, (chunks,))(flat, counts, pairs, BINS=bins, CHUNK=CHUNK)
    launch(_align_kernel, (chunks,))(
        flat, counts, sorted_pairs, block_expert, pairs, experts, blocks,
        BLOCK_M=block_m, BINS=bins, CHUNK=CHUNK, TILE=TILE, BLOCKS=BLOCKS, ROWS=ROWS, COUNTED=counted,
    )  # fmt: skip
    return Alignment(sorted_pairs, block_expert)
