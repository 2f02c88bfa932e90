"""attention.prefill and attention.decode backends on the CPU against the reference, on what the declared samples
cannot hold: masks (bool and additive, with a fully masked row) and FlexAttention (CUDA-only in the catalog; its
unfused CPU path computes the same)."""

from __future__ import annotations

import pytest
import torch

from kcatalog.kernels.aten import attention as sdpa
from kcatalog.kernels.torch.sdpa import decode, prefill
from kcatalog.kernels.triton import decode_attention


def inputs(batch: int = 2, queries: int = 3, keys: int = 12) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(batch * queries, 4, 16, generator=generator)
    k, v = (torch.randn(batch, 2, keys, 16, generator=generator) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("kernel", [sdpa.math, sdpa.flash, decode_attention.decode])
@pytest.mark.parametrize("causal, window", [(True, 0), (True, 5), (False, 0)])
def test_masks_bool_and_additive_combine_with_causal_and_window(kernel: object, causal: bool, window: int) -> None:
    q, k, v = inputs()
    padding = torch.ones(2, 1, 3, 12, dtype=torch.bool)
    padding[1, :, :, :4] = False  # the second sequence's first keys are padding
    padding[1, :, 0, :] = False  # and its first query sees no key at all: zeros
    additive = torch.where(padding, 0.0, float("-inf"))
    for mask in (padding, additive):
        expected = decode(q, k, v, mask, 0.3, causal, window)
        assert torch.equal(expected[3], torch.zeros_like(expected[3]))
        got = kernel(q, k, v, mask, 0.3, causal, window)  # type: ignore[operator]
        torch.testing.assert_close(got, expected, atol=2e-6, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_computes_the_reference_with_its_block_masks() -> None:
    from kcatalog.kernels.compiled.flex_attention import flex

    q, k, v = inputs()
    for causal, window in [(True, 0), (True, 4), (False, 4), (False, 0)]:
        torch.testing.assert_close(flex(q, k, v, None, 0.3, causal, window), decode(q, k, v, None, 0.3, causal, window))


def test_gates_say_why_a_kernel_cannot_take_a_call() -> None:
    q, k, v = (t.to(torch.bfloat16).to("meta") for t in inputs())
    assert sdpa.cudnn_eligible(q.float(), k, v) == "cuDNN attention takes float16 and bfloat16, not torch.float32"
    wide = torch.empty(6, 4, 320, device="meta")
    assert sdpa.cudnn_eligible(wide.bfloat16(), torch.empty(2, 2, 12, 320, device="meta").bfloat16(), v) == (
        "head dims [16, 320]; this kernel takes one head dim, a multiple of 8, at most 256"
    )


def test_prefill_refuses_a_cache_longer_than_the_query() -> None:
    q, k, v = inputs(queries=3, keys=12)
    with pytest.raises(ValueError, match=r"^attention.prefill: 12 keys per sequence for 6 queries in all$"):
        prefill(q, k, v)


@pytest.mark.parametrize("causal, window", [(True, 0), (True, 3), (False, 4)])
def test_flex_block_masks_close_over_no_ints(causal: bool, window: int) -> None:
    """A mask_mod's captured ints become symbols once torch.compile goes dynamic, and Inductor's flex lowering fails
    on them (found on the H200: decode with a window, every sample after the first recompile); sizes go in as
    tensors, flags as bools."""
    from kcatalog.kernels.compiled.flex_attention import _block_mask

    _block_mask.cache_clear()
    mask = _block_mask(4, 9, causal, window, "cpu")
    cells = [cell.cell_contents for cell in mask.mask_mod.__closure__ or ()]
    assert cells, "the mask closes over its sizes"
    assert not [value for value in cells if isinstance(value, int) and not isinstance(value, bool)]
    query = torch.arange(4).view(4, 1)
    key = torch.arange(9).view(1, 9)
    allowed = mask.mask_mod(0, 0, query, key)
    distance = query + 5 - key
    expected = (distance >= 0) if causal else (distance > -9)
    if window:
        expected = expected & (distance < window)
    assert torch.equal(allowed, expected)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 2e-5), (torch.bfloat16, 1e-2)])
def test_triton_decode_splits_a_static_cache_and_skips_the_slots_the_mask_leaves_out(
    dtype: torch.dtype, tolerance: float
) -> None:
    """A static cache's decode: every sequence's written slots a prefix of the cache, the rest masked out. Split
    over many programs (combined after), and the tiles past a sequence's last written slot never read: they
    hold NaN here, which any read would spread into the output."""
    generator = torch.Generator().manual_seed(1)
    batch, heads, kv_heads, slots, dim = 3, 8, 2, 96, 32
    q = torch.randn(batch, heads, dim, generator=generator).to(dtype)
    k, v = (torch.randn(batch, kv_heads, slots, dim, generator=generator).to(dtype) for _ in range(2))
    written = torch.tensor([16, 48, 96])  # whole 16-key tiles, so that every unwritten tile is skipped whole
    mask = (torch.arange(slots)[None, :] < written[:, None])[:, None, None, :]
    expected = decode(q, k, v, mask, None, True, 0)
    for b, n in enumerate(written.tolist()):
        k[b, :, n:], v[b, :, n:] = float("nan"), float("nan")
    with decode_attention.TUNING.override(sms=16, block_s=16):  # 2 programs a SM: 32 over 6 (sequence, head)s
        got = decode_attention.decode(q, k, v, mask, None, True, 0)
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance)


def test_triton_decode_gate_refuses_a_prefill_and_mixed_head_dims() -> None:
    q, k, v = (t.to("meta") for t in inputs(queries=40, keys=40))  # 2 query heads per key head x 40 queries
    assert decode_attention.decode_eligible(q, k, v) == (
        "2 query heads per key head x 40 queries = 80 rows; this kernel holds at most 64 (a prefill's shape)"
    )
    assert decode_attention.decode_eligible(q[:64], k[:, :, :32], v[:, :, :32]) is True  # 32 rows
    wide = torch.empty(6, 4, 32, device="meta")
    assert decode_attention.decode_eligible(wide, k, v) == "query and key need one head dim, at most 256 (value's too)"
