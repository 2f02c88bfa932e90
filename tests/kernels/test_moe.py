"""Tests for moe.fused_experts's Triton kernel: the alignment by expert (against its torch ops form), and the
kernels against the float32 reference under TRITON_INTERPRET=1 (tests/conftest.py), on tiny shapes.

Widths that are not multiples of the blocks exercise the masked paths (EVEN_K / EVEN_N off), multiples of them
the unmasked ones; each shape class's launch configuration runs once (its thresholds overridden); routing covers
top-k = 1, experts that receive no token, one expert receiving everything, and a token naming an expert twice.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
import torch
import yaml

from kcatalog.kernels.torch import moe as ref
from kcatalog.testing import check_close

triton_moe = pytest.importorskip("kcatalog.kernels.triton.moe")
GemvConfig = triton_moe.GemvConfig

MANIFEST = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalog" / "moe.yaml").read_text())
TOLERANCE = MANIFEST["ops"]["fused_experts"]["tolerance"]


def gen(*key: object) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def inputs(
    tokens: int, hidden: int, inter: int, experts: int, top_k: int, dtype: torch.dtype, ids: torch.Tensor | None = None
) -> tuple[torch.Tensor, ...]:
    g = gen(tokens, hidden, inter, experts, top_k, dtype)
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    if ids is None:
        ids = torch.randint(0, experts, (tokens, top_k), generator=g)
    weights = torch.rand(tokens, top_k, generator=g).to(dtype)
    gate_up = (torch.randn(experts, 2 * inter, hidden, generator=g) / hidden**0.5).to(dtype)
    down = (torch.randn(experts, hidden, inter, generator=g) / inter**0.5).to(dtype)
    return x, ids, weights, gate_up, down


def torch_align(topk_ids: torch.Tensor, experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The alignment as torch ops (the backend's first form): a stable sort by expert, each run padded to
    block_m with the sentinel S, and each block's expert by a search of the runs' ends (E past the last)."""
    flat = topk_ids.reshape(-1).long()
    pairs = flat.numel()
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)
    sorted_experts, order = torch.sort(flat, stable=True)
    rank = torch.arange(pairs) - (torch.cumsum(counts, 0) - counts)[sorted_experts]
    slot = (ends - padded)[sorted_experts] + rank
    blocks = -(-pairs // block_m) + min(experts, pairs)
    sorted_pairs = torch.full((blocks * block_m,), pairs, dtype=torch.int32)
    sorted_pairs.scatter_(0, slot, order.to(torch.int32))
    block_expert = torch.searchsorted(ends, torch.arange(blocks) * block_m, right=True).to(torch.int32)
    return sorted_pairs, block_expert


ALIGN_CASES = [  # tokens, top_k, experts, experts used (ids in [0, used)), block_m
    pytest.param(1, 8, 128, 128, 16, id="qwen-decode-t1"),
    pytest.param(23, 3, 9, 6, 16, id="unused-experts"),
    pytest.param(23, 3, 9, 6, 64, id="unused-experts-m64"),
    pytest.param(1, 1, 4, 4, 16, id="one-pair"),
    pytest.param(7, 1, 300, 300, 32, id="k1-experts-not-a-power-of-two"),
    pytest.param(40, 8, 512, 512, 16, id="512-experts"),
    # Over CHUNK (1,024) pairs: the per-chunk counts, then one placement program per chunk.
    pytest.param(1100, 2, 8, 7, 128, id="two-chunks"),
    pytest.param(700, 3, 20, 17, 16, id="three-chunks"),
]


@pytest.mark.parametrize(("tokens", "top_k", "experts", "used", "block_m"), ALIGN_CASES)
def test_align_is_the_stable_sort_by_expert(tokens: int, top_k: int, experts: int, used: int, block_m: int) -> None:
    """The kernels' alignment is, element for element, the torch ops' one: pairs in their own order within an
    expert (deterministic by construction), padding and the blocks past the last run marked the same."""
    ids = torch.randint(0, used, (tokens, top_k), generator=gen("align", tokens, top_k, experts))
    aligned = triton_moe.align(ids, experts, block_m)
    sorted_pairs, block_expert = torch_align(ids, experts, block_m)
    assert aligned.sorted_pairs.dtype == aligned.block_expert.dtype == torch.int32
    assert torch.equal(aligned.sorted_pairs, sorted_pairs)
    assert torch.equal(aligned.block_expert, block_expert)


def test_align_of_no_pairs() -> None:
    aligned = triton_moe.align(torch.zeros(0, 2, dtype=torch.int64), 4, 16)
    assert aligned.sorted_pairs.numel() == aligned.block_expert.numel() == 0


@pytest.mark.parametrize("block_m", [16, 64])
def test_align_places_every_pair_once_in_a_block_of_its_expert(block_m: int) -> None:
    experts = 9
    ids = torch.randint(0, 6, (23, 3), generator=gen("align"), dtype=torch.int32)  # experts 6..8 receive nothing
    ids[0] = torch.tensor([2, 2, 5])  # a token naming an expert twice
    aligned = triton_moe.align(ids, experts, block_m)
    pairs = ids.numel()
    blocks = aligned.block_expert.numel()
    assert blocks == -(-pairs // block_m) + min(experts, pairs)  # the bound the grids are sized by
    slots = aligned.sorted_pairs.view(blocks, block_m)
    real = slots[slots < pairs]
    assert sorted(real.tolist()) == list(range(pairs))  # every pair exactly once
    assert set(slots[slots >= pairs].tolist()) <= {pairs}  # the rest is the sentinel
    counts = torch.bincount(ids.reshape(-1), minlength=experts)
    used = int((-(-counts // block_m)).sum())
    assert aligned.block_expert[:used].tolist() == sorted(aligned.block_expert[:used].tolist())
    assert set(aligned.block_expert[used:].tolist()) <= {experts}  # blocks past the last expert's
    for block in range(used):
        expert = int(aligned.block_expert[block])
        members = slots[block][slots[block] < pairs]
        assert len(members) > 0  # no expert without tokens has a block
        assert (ids.reshape(-1)[members.long()] == expert).all()


SHAPES = [  # tokens, hidden, inter, experts, top_k
    pytest.param(1, 64, 64, 4, 1, id="decode-k1-even"),
    pytest.param(5, 40, 24, 6, 2, id="ragged-widths"),
    pytest.param(9, 64, 128, 8, 4, id="k4-even"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(("tokens", "hidden", "inter", "experts", "top_k"), SHAPES)
def test_triton_matches_the_reference(
    tokens: int, hidden: int, inter: int, experts: int, top_k: int, dtype: torch.dtype
) -> None:
    args = inputs(tokens, hidden, inter, experts, top_k, dtype)
    out = triton_moe.fused_experts(*args)
    assert out.shape == (tokens, hidden) and out.dtype == dtype
    wide = [a.float() if a.is_floating_point() else a for a in args]
    check_close("triton", out, ref.fused_experts(*wide), TOLERANCE[str(dtype).removeprefix("torch.")])


@pytest.mark.parametrize("shape_class", ["decode", "medium", "prefill"])
def test_each_shape_class_configuration_matches_the_reference(shape_class: str) -> None:
    thresholds = {"decode": (10**9, 10**9), "medium": (0, 10**9), "prefill": (0, 0)}[shape_class]
    args = inputs(12, 40, 72, 3, 2, torch.float16)
    with triton_moe.TUNING.override(decode_pairs=thresholds[0], medium_pairs=thresholds[1]) as tuning:
        assert tuning.config(24, 3) is getattr(tuning, shape_class)
        out = triton_moe.fused_experts(*args)
    wide = [a.float() if a.is_floating_point() else a for a in args]
    check_close(shape_class, out, ref.fused_experts(*wide), TOLERANCE["float16"])


@pytest.mark.parametrize(
    "routing",
    ["one-expert-takes-all", "duplicates", "last-expert-only"],
)
def test_routing_extremes(routing: str) -> None:
    tokens, experts, top_k = 9, 7, 2
    ids = {
        "one-expert-takes-all": torch.full((tokens, top_k), 3),
        "duplicates": torch.tensor([[1, 1]] * tokens),
        "last-expert-only": torch.full((tokens, top_k), experts - 1),
    }[routing]
    args = inputs(tokens, 32, 48, experts, top_k, torch.float32, ids=ids)
    check_close(routing, triton_moe.fused_experts(*args), ref.fused_experts(*args), TOLERANCE["float32"])


def test_shape_classes_of_the_two_models() -> None:
    tuning = triton_moe.MoeTuning()
    assert tuning.config(1 * 8, 128) is tuning.decode  # Qwen3-30B-A3B decode
    assert tuning.config(64 * 8, 128) is tuning.decode
    assert tuning.config(4096 * 8, 128) is tuning.prefill  # 256 pairs per expert
    assert tuning.config(64 * 2, 8) is tuning.decode  # Mixtral-8x7B, 16 pairs per expert
    assert tuning.config(256 * 2, 8) is tuning.medium
    assert tuning.config(4096 * 2, 8) is tuning.prefill


def test_shapes_that_do_not_fit_are_refused() -> None:
    x, ids, weights, gate_up, down = inputs(3, 16, 8, 2, 1, torch.float32)
    with pytest.raises(
        ValueError, match=r"^gate_up_proj \(2, 16, 16\) must be \[E, 2I, H\] and down_proj \(2, 16, 9\)"
    ):
        triton_moe.fused_experts(x, ids, weights, gate_up, torch.zeros(2, 16, 9))
    with pytest.raises(ValueError, match=r"^topk_ids \(3, 1\) and topk_weights \(3, 2\) must both be \[T, K\]"):
        triton_moe.fused_experts(x, ids, torch.zeros(3, 2), gate_up, down)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(("tokens", "hidden", "inter", "experts", "top_k"), SHAPES)
def test_the_gemv_path_matches_the_reference(
    tokens: int, hidden: int, inter: int, experts: int, top_k: int, dtype: torch.dtype
) -> None:
    """The small-batch path (moe_gemv.py), ragged widths included, and deterministic run to run."""
    args = inputs(tokens, hidden, inter, experts, top_k, dtype)
    with triton_moe.TUNING.override(gemv_tokens=tokens, gemv=GemvConfig(64, 32, 32, 4)):
        out = triton_moe.fused_experts(*args)
        if dtype == torch.bfloat16:
            assert torch.equal(out, triton_moe.fused_experts(*args))
    assert out.shape == (tokens, hidden) and out.dtype == dtype
    wide = [a.float() if a.is_floating_point() else a for a in args]
    check_close("gemv", out, ref.fused_experts(*wide), TOLERANCE[str(dtype).removeprefix("torch.")])


def test_the_output_does_not_follow_the_order_within_an_expert(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pair's rows are its own and the sum over top-k runs in slot order, so another order of the pairs
    within their experts' blocks (here: each block's pairs reversed) gives the same bits; and two calls agree."""
    args = inputs(9, 64, 128, 3, 4, torch.float16)
    first = triton_moe.fused_experts(*args)
    assert torch.equal(first, triton_moe.fused_experts(*args))
    stable = triton_moe.align

    def reversed_blocks(topk_ids: torch.Tensor, experts: int, block_m: int) -> object:
        aligned = stable(topk_ids, experts, block_m)
        slots = aligned.sorted_pairs.view(-1, block_m).clone()
        for block in slots:
            real = block < topk_ids.numel()
            block[real] = block[real].flip(0)
        assert not torch.equal(slots.view(-1), aligned.sorted_pairs)
        return aligned._replace(sorted_pairs=slots.view(-1))

    monkeypatch.setattr(triton_moe, "align", reversed_blocks)
    assert torch.equal(triton_moe.fused_experts(*args), first)


def test_no_tokens() -> None:
    x, ids, weights, gate_up, down = inputs(0, 16, 8, 2, 2, torch.float32)
    assert triton_moe.fused_experts(x, ids, weights, gate_up, down).shape == (0, 16)


def test_batched_mm_is_gated_by_the_weights_it_gathers() -> None:
    """transformers' batched_mm copies each (token, expert) pair's weights: eligible for a decode batch, refused
    (with the size it would gather) where that copy would not fit, and selection then takes the next backend."""
    import torch

    from kcatalog.kernels.transformers.moe import BATCHED_MM_BYTES, batched_mm_fits

    gate_up = torch.empty(8, 2 * 48, 64, dtype=torch.bfloat16)
    down = torch.empty(8, 64, 48, dtype=torch.bfloat16)
    per_pair = (gate_up[0].numel() + down[0].numel()) * 2
    fits = BATCHED_MM_BYTES // per_pair
    ids = torch.zeros(fits, 1, dtype=torch.int64)
    assert batched_mm_fits(torch.empty(fits, 64), ids, ids.float(), gate_up, down) is True
    ids = torch.zeros(fits + 1, 1, dtype=torch.int64)
    verdict = batched_mm_fits(torch.empty(fits + 1, 64), ids, ids.float(), gate_up, down)
    assert isinstance(verdict, str) and verdict.startswith("batched_mm would gather 1.0 GiB"), verdict
