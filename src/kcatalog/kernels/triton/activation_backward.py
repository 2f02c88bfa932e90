"""Triton kernels for the gated activations' gradients (silu_and_mul, gelu_and_mul): one fused elementwise pass.

``x = [gate | up]``, ``y = act(gate) * up``: each program reads a [BLOCK_M, BLOCK_N] tile of the incoming gradient
and the matching tiles of both halves of x once, and writes ``dgate = grad * up * act'(gate)`` and
``dup = grad * act(gate)`` once, float32 math, one rounding to x's dtype. The tiles, grid order and activation
formulas (overflow-free sigmoid, the polynomial normal CDF) are the forward kernel's (activation.py). A module of
its own: the tuned table records the digest of the forward's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..tracing import launch
from ._rows import Tunables, as_rows, cdiv
from .activation import _ACT_GELU_ERF, _ACT_GELU_TANH, _ACT_SILU, ActTuning, _mul_sigmoid, _normal_cdf

#: The tunables in effect (the forward's kind, tuned separately); ``with TUNING.override(...)`` within a block.
TUNING = Tunables(__name__, ActTuning())


@triton.jit
def _act_and_mul_backward_kernel(
    g_ptr, x_ptr, dx_ptr, n_rows, d, stride_g, stride_x,
    ACT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LOAD_EVICT: tl.constexpr = "",
):  # fmt: skip
    """dx[rows, 2d] (contiguous) of act(x[:, :d]) * x[:, d:] from the gradient g[rows, d]."""
    n_col_blocks = tl.cdiv(d, BLOCK_N)
    pid = tl.program_id(0)
    pid_m = pid // n_col_blocks
    pid_n = pid - pid_m * n_col_blocks
    row0 = pid_m * BLOCK_M
    rows = tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = ((row0 + rows) < n_rows)[:, None] & (cols < d)[None, :]
    base = row0.to(tl.int64)
    x_tile = x_ptr + base * stride_x + rows[:, None] * stride_x + cols[None, :]
    grad = tl.load(g_ptr + base * stride_g + rows[:, None] * stride_g + cols[None, :], mask=mask, other=0.0,
                   eviction_policy=LOAD_EVICT).to(tl.float32)  # fmt: skip
    gate = tl.load(x_tile, mask=mask, other=0.0, eviction_policy=LOAD_EVICT).to(tl.float32)
    up = tl.load(x_tile + d, mask=mask, other=0.0, eviction_policy=LOAD_EVICT).to(tl.float32)
    if ACT == 0:  # silu(g) = g s, silu'(g) = s (1 + g (1 - s)), s = sigmoid(g)
        s = _mul_sigmoid(1.0, gate)
        act = gate * s
        dact = s * (1.0 + gate * (1.0 - s))
    elif ACT == 1:  # gelu(g) = g Phi(g), gelu'(g) = Phi(g) + g phi(g)
        cdf = _normal_cdf(gate)
        act = gate * cdf
        dact = cdf + gate * tl.exp(-0.5 * gate * gate) * 0.3989422804014327
    else:
        # gelu_tanh(g) = g sigmoid(2u), 2u = g (a + b g^2), as the forward computes it (g clamped to +-20 in
        # the polynomial: sigmoid saturates there); d(2u)/dg = a + 3 b g^2
        gc = tl.minimum(tl.maximum(gate, -20.0), 20.0)
        s = _mul_sigmoid(1.0, gc * (1.5957691216057308 + 0.07135481627260025 * gc * gc))
        act = gate * s
        dact = s + gate * s * (1.0 - s) * (1.5957691216057308 + 0.21406444881780073 * gc * gc)
    dx_tile = dx_ptr + base * (2 * d) + rows[:, None] * (2 * d) + cols[None, :]
    tl.store(dx_tile, (grad * up * dact).to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dx_tile + d, (grad * act).to(dx_ptr.dtype.element_ty), mask=mask)


def _act_and_mul_backward(grad: torch.Tensor, x: torch.Tensor, act: int) -> torch.Tensor:
    """Shared wrapper: check the shapes, flatten leading dims (views when possible), launch."""
    if x.shape[-1] % 2:
        raise ValueError(f"last dim must be even (gate and up halves), got {x.shape[-1]}")
    d = x.shape[-1] // 2
    if grad.shape != (*x.shape[:-1], d):
        raise ValueError(f"grad {tuple(grad.shape)} must have the output's shape {(*x.shape[:-1], d)}")
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if dx.numel() == 0:
        return dx
    x2, g2 = as_rows(x), as_rows(grad)
    n_rows = x2.shape[0]
    t = TUNING.get()
    block_m, block_n, num_warps = t.config(n_rows, d, t.device_sms(x.device))
    launch(_act_and_mul_backward_kernel, (cdiv(n_rows, block_m) * cdiv(d, block_n),))(
        g2, x2, dx, n_rows, d, g2.stride(0), x2.stride(0),
        ACT=act, BLOCK_M=block_m, BLOCK_N=block_n,
        LOAD_EVICT=t.small_load_evict if n_rows * d <= t.small_outputs else t.load_evict, num_warps=num_warps,
    )  # fmt: skip
    return dx


def silu_and_mul_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Gradient wrt x of ``silu(x[..., :d]) * x[..., d:]``, in x's dtype (a new contiguous tensor)."""
    return _act_and_mul_backward(grad, x, _ACT_SILU)


def gelu_and_mul_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """Gradient wrt x of ``gelu(x[..., :d], approximate) * x[..., d:]``; approximate is "none" or "tanh"."""
    if approximate == "none":
        return _act_and_mul_backward(grad, x, _ACT_GELU_ERF)
    if approximate == "tanh":
        return _act_and_mul_backward(grad, x, _ACT_GELU_TANH)
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
