"""loss.fused_linear_cross_entropy and its backward: the torch reference against float64 autograd of torch's own
cross-entropy (transformers' loss), the Triton kernels (under TRITON_INTERPRET=1, tests/conftest.py) against the
same, over several vocabulary blocks with a ragged last one; ignored rows, every row ignored, bad inputs; and
integrations.loss.causal_lm_loss against transformers' ForCausalLMLoss."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from kcatalog.kernels.torch import loss as ref
from kcatalog.testing import check_close

triton_loss = pytest.importorskip("kcatalog.kernels.triton.loss")

MANIFEST = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalog" / "loss.yaml").read_text())
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]


def tol(op: str, dtype: torch.dtype) -> float:
    return float(MANIFEST["ops"][op]["tolerance"][str(dtype).removeprefix("torch.")])


def inputs(
    t: int, h: int, v: int, dtype: torch.dtype, *key: object, ignored: tuple[int, ...] = (), ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(zlib.crc32(repr((t, h, v, dtype, key)).encode()))
    x = torch.randn(t, h, generator=g).to(dtype)
    w = (torch.randn(v, h, generator=g) * 0.5).to(dtype)
    target = torch.randint(0, v, (t,), generator=g)
    target[list(ignored)] = ignore_index
    return x, w, target


def truth(
    x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, grad: float, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, lse, grad_x, grad_w): float64 autograd of torch's cross-entropy, as transformers computes it."""
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    logits = x64 @ w64.T
    loss = F.cross_entropy(logits, target, ignore_index=ignore_index)
    (loss * grad).backward()
    assert x64.grad is not None and w64.grad is not None
    return loss.detach(), torch.logsumexp(logits, -1).detach(), x64.grad, w64.grad


@pytest.fixture
def blocks() -> Iterator[None]:
    """Vocabulary blocks of 48 columns (200 = 4 x 48 + 8: a ragged last block), loops of 32 columns (a block's
    second step runs past its end, where a later block's target must not be picked), 4 rows to a program (a
    clamped tail of rows)."""
    with triton_loss.TUNING.override(min_block_elements=1, block_factor=0.0, col_align=48, block_n=32, tile=128):
        yield


def test_reference_is_torchs_cross_entropy_and_its_gradient() -> None:
    x, w, target = inputs(9, 16, 50, torch.float64, "ref", ignored=(2, 5))
    loss, lse, gx, gw = truth(x, w, target, 0.75)
    out, out_lse = ref.fused_linear_cross_entropy(x, w, target)
    assert out.dtype == out_lse.dtype == torch.float64 and out.shape == () and out_lse.shape == (9,)
    check_close("loss", out, loss, 1e-12)
    check_close("lse", out_lse, lse, 1e-12)
    rx, rw = ref.fused_linear_cross_entropy_backward(torch.tensor(0.75, dtype=torch.float64), x, w, target, -100, lse)
    check_close("grad_x", rx, gx, 1e-12)
    check_close("grad_w", rw, gw, 1e-12)
    # 16-bit inputs: float32 outputs, gradients in the inputs' dtype
    out16, lse16 = ref.fused_linear_cross_entropy(x.bfloat16(), w.bfloat16(), target)
    assert out16.dtype == lse16.dtype == torch.float32
    bx, bw = ref.fused_linear_cross_entropy_backward(torch.tensor(1.0), x.bfloat16(), w.bfloat16(), target, -100, lse16)
    assert bx.dtype == bw.dtype == torch.bfloat16


@pytest.mark.usefixtures("blocks")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("t,v", [(1, 37), (9, 200)])
def test_triton_forward_and_backward_against_float64_autograd(t: int, v: int, dtype: torch.dtype) -> None:
    x, w, target = inputs(t, 32, v, dtype, "tri", ignored=(3, 7) if t > 7 else ())
    x0, w0, target0 = x.clone(), w.clone(), target.clone()
    loss, lse, gx, gw = truth(x, w, target, 0.6)
    out, out_lse = triton_loss.fused_linear_cross_entropy(x, w, target)
    assert out.dtype == out_lse.dtype == torch.float32 and out.shape == () and out_lse.shape == (t,)
    check_close(f"loss {dtype}", out, loss, tol("fused_linear_cross_entropy", dtype))
    check_close(f"lse {dtype}", out_lse, lse, tol("fused_linear_cross_entropy", dtype))
    rx, rw = triton_loss.fused_linear_cross_entropy_backward(torch.tensor(0.6), x, w, target, -100, out_lse)
    assert rx.dtype == rw.dtype == dtype and rx.shape == x.shape and rw.shape == w.shape
    check_close(f"grad_x {dtype}", rx, gx, tol("fused_linear_cross_entropy_backward", dtype))
    check_close(f"grad_w {dtype}", rw, gw, tol("fused_linear_cross_entropy_backward", dtype))
    assert torch.equal(x, x0) and torch.equal(w, w0) and torch.equal(target, target0)


def test_triton_float16_gradients_do_not_underflow_before_the_gemms() -> None:
    """(softmax - onehot) * grad / count in float16 flushes to zero below ~6e-8, as a near-uniform softmax over
    Llama-3's vocabulary at 4,096 tokens makes it (1/128256/4096 ~ 2e-9): here 4,096 classes, 64 tokens and a loss
    scale of 1e-2, 1e-2 / 64 / 4096 ~ 4e-8, while the gradients themselves (~1e-4) are normal float16 numbers.
    The float16 blocks hold softmax - onehot, and the scale comes after the GEMMs."""
    x, w, target = inputs(64, 32, 4096, torch.float16, "underflow")
    x, w = x * 0.05, w * 2  # logits ~0.1: a near-uniform softmax
    _, _, gx, _ = truth(x, w, target, 1e-2)
    _, out_lse = triton_loss.fused_linear_cross_entropy(x, w, target)
    rx, _ = triton_loss.fused_linear_cross_entropy_backward(torch.tensor(1e-2), x, w, target, -100, out_lse)
    # grad_w is not compared: most of its entries (~1e-8 here) are below float16's normal range as results, in any order
    check_close("grad_x float16, loss scale 1e-2", rx, gx, tol("fused_linear_cross_entropy_backward", torch.float16))


@pytest.mark.usefixtures("blocks")
def test_triton_ignore_index_inside_the_vocabulary() -> None:
    """An ignore_index that is also a vocabulary id (here 5, in the second block) drops exactly those rows."""
    x, w, target = inputs(11, 32, 150, torch.float32, "inside")
    target[[0, 4, 9]] = 5
    loss, _, gx, gw = truth(x, w, target, 1.0, ignore_index=5)
    out, lse = triton_loss.fused_linear_cross_entropy(x, w, target, 5)
    check_close("loss", out, loss, 1e-5)
    rx, rw = triton_loss.fused_linear_cross_entropy_backward(torch.tensor(1.0), x, w, target, 5, lse)
    check_close("grad_x", rx, gx, 1e-5)
    check_close("grad_w", rw, gw, 1e-5)
    assert torch.count_nonzero(rx[[0, 4, 9]]) == 0


@pytest.mark.usefixtures("blocks")
@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_every_row_ignored_is_a_zero_loss_with_zero_gradients(impl: str) -> None:
    """Not NaN (torch's mean over no rows): a fully padded batch must not poison the weights."""
    module = ref if impl == "torch" else triton_loss
    x, w, target = inputs(5, 32, 100, torch.bfloat16, "none", ignored=tuple(range(5)))
    loss, lse = module.fused_linear_cross_entropy(x, w, target)
    assert loss.item() == 0.0 and torch.isfinite(lse).all()
    gx, gw = module.fused_linear_cross_entropy_backward(torch.tensor(1.0), x, w, target, -100, lse)
    assert torch.count_nonzero(gx) == 0 and torch.count_nonzero(gw) == 0


def test_triton_refuses_bad_inputs_naming_them() -> None:
    x, w, target = inputs(4, 32, 40, torch.float32, "bad")
    with pytest.raises(ValueError, match=r"^fused_linear_cross_entropy: x must be \[T, H\] and weight \[V, H\] with"):
        triton_loss.fused_linear_cross_entropy(x, w[:, :16], target)
    with pytest.raises(ValueError, match=r"target must be \[T\] = \[4\] integers, got \(3,\) torch.int64$"):
        triton_loss.fused_linear_cross_entropy(x, w, target[:3])
    with pytest.raises(
        ValueError, match=r"share one of float32, float16, bfloat16; got torch.bfloat16 and torch.float32"
    ):
        triton_loss.fused_linear_cross_entropy(x.bfloat16(), w, target)


def test_vocabulary_blocks_are_about_the_size_of_x() -> None:
    t = triton_loss.TUNING.default
    assert t.block_cols(4096, 4096, 128256) == 4096  # Llama-3-8B at 4096 tokens: 32 blocks of [4096, 4096]
    assert t.block_cols(16384, 4096, 128256) == 4096  # the block grows with the tokens, its width does not
    assert t.block_cols(64, 4096, 128256) == 65536  # few tokens: at least min_block_elements per block
    assert t.block_cols(8, 64, 300) == 300  # never wider than the vocabulary


# -- the model integration -------------------------------------------------------------------------------------


@pytest.mark.parametrize("items", [None, 7])
def test_causal_lm_loss_is_transformers_for_causal_lm_loss(items: int | None) -> None:
    loss_utils = pytest.importorskip("transformers.loss.loss_utils")
    from kcatalog.integrations.loss import OP, causal_lm_loss

    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(2, 6, 16, generator=g)
    weight = torch.randn(40, 16, generator=g) * 0.5
    labels = torch.randint(0, 40, (2, 6), generator=g)
    labels[0, 2] = labels[1, 0] = -100
    expected = loss_utils.ForCausalLMLoss(hidden @ weight.T, labels, 40, num_items_in_batch=items)
    ops = {OP: ref.fused_linear_cross_entropy}  # any callable of the op's signature
    check_close("causal lm loss", causal_lm_loss(ops, hidden, weight, labels, num_items_in_batch=items), expected, 1e-6)
    shifted = F.pad(labels, (0, 1), value=-100)[..., 1:]
    again = causal_lm_loss(ops, hidden, weight, shift_labels=shifted, num_items_in_batch=items)
    check_close("shift_labels", again, expected, 1e-6)
    with pytest.raises(ValueError, match=r"^causal_lm_loss: labels \(2, 5\) do not match hidden_states \(2, 6, 16\)"):
        causal_lm_loss(ops, hidden, weight, labels[:, :5])


def test_registered_torch_op_backpropagates_through_the_backward_op() -> None:
    """Autograd of the registered op (the catalog's backward op), through causal_lm_loss as a CausalLM calls it,
    against transformers' loss on materialised logits (opcheck: tests/compile, for every op with a backward)."""
    loss_utils = pytest.importorskip("transformers.loss.loss_utils")
    from kcatalog.integrations.kernelize import default_catalog
    from kcatalog.integrations.loss import causal_lm_loss

    ops = default_catalog().register_torch_ops()  # the process's shipped Catalog: torch.ops.kcatalog is its
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(2, 5, 16, generator=g, requires_grad=True)
    weight = (torch.randn(40, 16, generator=g) * 0.5).requires_grad_()
    labels = torch.randint(0, 40, (2, 5), generator=g)
    labels[1, 3] = -100
    (causal_lm_loss(ops, hidden, weight, labels, num_items_in_batch=6) * 3).backward()
    h2, w2 = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    (loss_utils.ForCausalLMLoss(h2 @ w2.T, labels, 40, num_items_in_batch=6) * 3).backward()
    assert hidden.grad is not None and weight.grad is not None
    check_close("grad hidden", hidden.grad, h2.grad, 1e-5)
    check_close("grad weight", weight.grad, w2.grad, 1e-5)
