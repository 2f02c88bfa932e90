"""The gradient ops of the normalisation layers, the gated activations and the functional rotary embedding.

* The torch references: ``torch.autograd.gradcheck`` in float64 of each forward (an independent float64
  formula) whose backward is the reference, and the rotary forward against transformers' own formula.
* The Triton kernels (under TRITON_INTERPRET=1, tests/conftest.py) against float64 autograd of the forward op's
  reference: multi-row tiles with a clamped tail over several programs (the weight gradients' partial sums),
  the chunked path for wide rows, strided inputs, bf16/fp16/fp32.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import yaml

from kcatalog.kernels.torch import activation as act_ref
from kcatalog.kernels.torch import activation_backward as act_bwd
from kcatalog.kernels.torch import add_norm as add_ref
from kcatalog.kernels.torch import layernorm as norm_ref
from kcatalog.kernels.torch import norm_backward as norm_bwd
from kcatalog.kernels.torch import rotary as rot_ref
from kcatalog.testing import check_close

tn = pytest.importorskip("kcatalog.kernels.triton.norm_backward")
ta = pytest.importorskip("kcatalog.kernels.triton.activation_backward")
tr = pytest.importorskip("kcatalog.kernels.triton.rotary")

TOL = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalog" / "layernorm.yaml").read_text())["ops"][
    "layer_norm_backward"
]["tolerance"]  # every op here declares the same tolerances
F64 = torch.float64


def randn(shape: Sequence[int], dtype: torch.dtype, *key: object, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(zlib.crc32(repr((tuple(shape), dtype, key)).encode()))
    return (torch.randn(tuple(shape), generator=g, dtype=F64) * scale).to(dtype)


def tol(dtype: torch.dtype) -> float:
    return float(TOL[str(dtype).removeprefix("torch.")])


class _WithBackward(torch.autograd.Function):
    """forward(*tensors, *extra) with `backward(*grads, *tensors, *extra)` as its gradient: what gradcheck checks."""

    @staticmethod
    def forward(ctx: Any, forward: Callable[..., Any], backward: Callable[..., Any], extra: tuple[Any, ...],
                *tensors: torch.Tensor) -> Any:  # fmt: skip
        ctx.save_for_backward(*tensors)
        ctx.backward_op, ctx.extra = backward, extra
        return forward(*tensors, *extra)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        got = ctx.backward_op(*grads, *ctx.saved_tensors, *ctx.extra)
        return (None, None, None, *(got if isinstance(got, tuple) else (got,)))


def _rms(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps) * scale


GRADCHECKS: dict[str, tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...], tuple[tuple[int, ...], ...]]] = {
    "gemma": (lambda x, w, eps: _rms(x, 1 + w, eps), norm_bwd.gemma_rms_norm_backward, (1e-6,), ((3, 8), (8,))),
    "add_rms": (  # the backward takes weight, eps and the summed output (recomputed here): what autograd keeps
        lambda x, r, w, eps: (_rms(x + r, w, eps), x + r),
        lambda go, gs, x, r, w, eps: norm_bwd.add_rms_norm_backward(go, gs, w, eps, x + r),
        (1e-6,),
        ((3, 8), (3, 8), (8,)),
    ),
    "layer": (
        lambda x, w, b, eps: F.layer_norm(x, (8,), w, b, eps),
        norm_bwd.layer_norm_backward,
        (1e-5,),
        ((3, 8), (8,), (8,)),
    ),  # fmt: skip
    "silu": (lambda x: F.silu(x[..., :5]) * x[..., 5:], act_bwd.silu_and_mul_backward, (), ((2, 3, 10),)),
    "gelu": (
        lambda x, a: F.gelu(x[..., :5], approximate=a) * x[..., 5:],
        act_bwd.gelu_and_mul_backward,
        ("none",),
        ((3, 10),),
    ),  # fmt: skip
    "gelu_tanh": (
        lambda x, a: F.gelu(x[..., :5], approximate=a) * x[..., 5:],
        act_bwd.gelu_and_mul_backward,
        ("tanh",),
        ((3, 10),),
    ),  # fmt: skip
    "rotary": (
        rot_ref.apply_rotary,
        lambda gq, gk, q, k, cos, sin: rot_ref.apply_rotary_backward(gq, gk, cos, sin),  # no q, no k: not kept
        (randn((1, 3, 6), F64, "cos"), randn((1, 3, 6), F64, "sin")),  # halves that differ: the general adjoint
        ((2, 3, 3, 6), (2, 1, 3, 6)),
    ),
}


@pytest.mark.parametrize("case", list(GRADCHECKS))
def test_gradcheck_of_the_torch_references_in_float64(case: str) -> None:
    forward, backward, extra, shapes = GRADCHECKS[case]
    tensors = [randn(s, F64, case, i).requires_grad_() for i, s in enumerate(shapes)]
    assert torch.autograd.gradcheck(lambda *t: _WithBackward.apply(forward, backward, extra, *t), tensors)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """transformers' rotate_half (models/llama/modeling_llama.py)."""
    return torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Any:
    """transformers' apply_rotary_pos_emb (unsqueeze_dim=1), copied: importing transformers costs seconds."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def test_the_rotary_reference_is_transformers_formula() -> None:
    q, k = randn((2, 4, 5, 8), torch.float32, "q"), randn((2, 2, 5, 8), torch.float32, "k")
    cos, sin = randn((1, 5, 8), torch.float32, "c"), randn((1, 5, 8), torch.float32, "s")
    for got, want in zip(rot_ref.apply_rotary(q, k, cos, sin), apply_rotary_pos_emb(q, k, cos, sin)):
        assert torch.equal(got, want)
    with pytest.raises(ValueError, match=r"cos \(5, 8\) must be \[2 or 1, 5, 8\]"):
        rot_ref.apply_rotary(q, k, cos[0], sin)


def _autograd64(forward: Callable[..., Any], tensors: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                *extra: Any) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """Gradients of the forward reference wrt `tensors`, run on float64 copies."""
    wide = [t.detach().to(F64).requires_grad_() for t in tensors]
    out = forward(*wide, *extra)
    outs = out if isinstance(out, tuple) else (out,)
    return torch.autograd.grad(outs, wide, [g.to(F64) for g in grads])


def _check(name: str, got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], like: Sequence[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for i, (g, w, t) in enumerate(zip(got, want, like)):
        assert g.shape == t.shape and g.dtype == t.dtype, (name, i)
        check_close(f"{name}[{i}]", g, w, tol(t.dtype))


DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (rows, width, tunables): 3 programs over 3 tiles of 16 rows, the last one clamped (5 rows); one row; rows wider
# than max_fused_width in 64-wide chunks
SHAPES = [(37, 100, {"programs_per_sm": 3}), (1, 64, {}), (3, 300, {"max_fused_width": 128, "loop_block": 64})]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("rows,width,tuning", SHAPES, ids=["tiles", "row", "chunked"])
def test_triton_norm_gradients(rows: int, width: int, tuning: dict[str, int], dtype: torch.dtype) -> None:
    big = randn((rows, width + 3), dtype, "x", scale=2.0)
    x = big[:, :width]  # strided rows
    g, gs, r = (randn((rows, width), dtype, key) for key in ("g", "gs", "r"))
    w, b = randn((width,), dtype, "w", scale=0.5), randn((width,), dtype, "b")
    with tn.TUNING.override(**tuning):
        assert tn.TUNING.get().config(width, rows, 1).single_pass == ("max_fused_width" not in tuning)
        gemma = tn.gemma_rms_norm_backward(g, x, w, 1e-6)
        add = tn.add_rms_norm_backward(g, gs, w, 1e-6, add_ref.add_rms_norm(x, r, w, 1e-6)[1])
        layer = tn.layer_norm_backward(g, x, w, b, 1e-5)
    _check("gemma", gemma, _autograd64(norm_ref.gemma_rms_norm, (x, w), (g,), 1e-6), (x, w))
    _check("add_rms", add, _autograd64(add_ref.add_rms_norm, (x, r, w), (g, gs), 1e-6), (x, r, w))
    _check("layer", layer, _autograd64(norm_ref.layer_norm, (x, w, b), (g,), 1e-5), (x, w, b))


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
def test_triton_activation_gradients(dtype: torch.dtype) -> None:
    x = randn((2, 5, 2 * 37 + 6), dtype, "x", scale=3.0)[..., : 2 * 37]  # strided rows, a ragged width
    g = randn((2, 5, 37), dtype, "g")
    _check("silu", [ta.silu_and_mul_backward(g, x)], _autograd64(act_ref.silu_and_mul, (x,), (g,)), (x,))
    for approximate in ("none", "tanh"):
        got = ta.gelu_and_mul_backward(g, x, approximate)
        _check(f"gelu {approximate}", [got], _autograd64(act_ref.gelu_and_mul, (x,), (g,), approximate), (x,))


@pytest.mark.parametrize("dtype,cos_batch", [(torch.float32, 2), (torch.float16, 1), (torch.bfloat16, 1)],
                         ids=["fp32", "fp16", "bf16"])  # fmt: skip
def test_triton_rotary_and_its_gradient(dtype: torch.dtype, cos_batch: int) -> None:
    b, hq, hk, s, d = 2, 5, 3, 7, 12  # head groups of 2: a partial group of q and of k; 6-wide halves, padded
    q = randn((b, s, hq, d), dtype, "q").transpose(1, 2)  # transformers' layout: a view of the projection
    k = randn((b, hk, s, d), dtype, "k")
    cos, sin = randn((cos_batch, s, d), dtype, "cos"), randn((cos_batch, s, d), dtype, "sin")
    gq, gk = randn((b, hq, s, d), dtype, "gq"), randn((b, hk, s, d), dtype, "gk")
    with tr.TUNING.override(heads_per_program=2, tile=32):  # 4 positions per program: a masked tail block
        out = tr.apply_rotary(q, k, cos, sin)
        grads = tr.apply_rotary_backward(gq, gk, cos, sin)
    want = [t.to(F64) for t in rot_ref.apply_rotary(q.to(F64), k.to(F64), cos.to(F64), sin.to(F64))]
    _check("apply_rotary", out, want, (q, k))
    assert all(t.is_contiguous() for t in out + grads)
    _check("apply_rotary_backward", grads, _autograd64(lambda *t: rot_ref.apply_rotary(*t, cos, sin), (q, k), (gq, gk)),
           (q, k))  # fmt: skip
