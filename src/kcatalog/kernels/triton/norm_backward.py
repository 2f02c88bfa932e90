"""Triton kernels for the backward ops of the normalisation layers, as Liger-Kernel's: one program per block of
rows (``programs_per_sm`` per SM), each row's ``dx`` computed with its ``rstd`` recomputed (nothing is saved from the
forward), and the weight's gradient summed per program into a ``[programs, width]`` float32 buffer that torch
reduces: no atomics, so the result is deterministic. Whole rows are held in registers (``BLOCK_N`` the next power of
two of the width), all math in float32, cast on store.

Kept apart from the forward kernels (kernels/triton/layernorm.py): the shipped tuned table records the source digest
of every kernel module it timed, and a backward added there would make its entries stale.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .. import tracing
from ._rows import Spread, Tunables, as_rows, as_vector, cdiv, chunk_cols, inv_rms, load_vec, next_power_of_2, num_warps

# Warps per width, as the forward kernels' (layernorm.NormTuning.warp_steps): ~16 values per thread.
_WARP_STEPS = (5793, 2896, 724, 362)


@dataclass(frozen=True)
class BackwardTuning(Spread):
    """The backward kernels' tunables: `programs_per_sm` programs per SM, each over a contiguous block of rows
    (more programs: more of the weight gradient's partial sums to reduce, fewer rows each); `sms` as Spread's."""

    programs_per_sm: int = 1


#: The backward kernels' tunables; ``with BACKWARD_TUNING.override(sms=3): ...`` spreads a launch over 3 programs.
BACKWARD_TUNING = Tunables(__name__, BackwardTuning())


@triton.jit
def _rms_norm_backward_kernel(
    g_ptr, x_ptr, w_ptr, dx_ptr, dw_ptr, n_rows, n_cols, stride_g, stride_x, stride_dx, eps, rows_per_program,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    """dx for each row of this program's block of rows, and their part of dw (float32) into row `pid` of dw_ptr."""
    pid = tl.program_id(0)
    cols, col_ok = chunk_cols(0, n_cols, BLOCK_N)
    w = load_vec(w_ptr + cols, col_ok, False)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    start = pid * rows_per_program
    first = start.to(tl.int64)  # pointers advance row by row from here, in 64 bits
    x_row, g_row, dx_row = x_ptr + first * stride_x, g_ptr + first * stride_g, dx_ptr + first * stride_dx
    for _ in range(start, tl.minimum(start + rows_per_program, n_rows)):
        x = tl.load(x_row + cols, mask=col_ok, other=0.0).to(tl.float32)
        g = tl.load(g_row + cols, mask=col_ok, other=0.0).to(tl.float32)
        rstd = inv_rms(tl.sum(x * x, axis=0), n_cols, eps)
        xhat = x * rstd
        gw = g * w
        dx = rstd * (gw - xhat * (tl.sum(gw * xhat, axis=0) / n_cols))
        tl.store(dx_row + cols, dx.to(dx_ptr.dtype.element_ty), mask=col_ok)
        dw += g * xhat
        x_row, g_row, dx_row = x_row + stride_x, g_row + stride_g, dx_row + stride_dx
    tl.store(dw_ptr + pid.to(tl.int64) * n_cols + cols, dw, mask=col_ok)


def rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of :func:`rms_norm` with respect to ``x`` and ``weight``, given the gradient of its output:
    float32 math, returned in ``x``'s and ``weight``'s dtypes (see the module's docstring for the scheme)."""
    if grad.shape != x.shape:
        raise ValueError(f"grad {tuple(grad.shape)} and x {tuple(x.shape)} must have the same shape")
    n = x.shape[-1]
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    x2, g2 = as_rows(x), as_rows(grad)
    w = as_vector(weight, n, "weight")
    m = x2.shape[0]
    if m == 0 or n == 0:
        return dx, torch.zeros_like(weight)
    t = BACKWARD_TUNING.get()
    programs = max(1, min(m, t.device_sms(x.device) * max(t.programs_per_sm, 1)))
    rows_per_program = cdiv(m, programs)
    programs = cdiv(m, rows_per_program)
    partial = torch.empty((programs, n), dtype=torch.float32, device=x.device)
    block_n = next_power_of_2(n)
    tracing.launch(_rms_norm_backward_kernel, (programs,))(
        g2, x2, w, dx, partial, m, n, g2.stride(0), x2.stride(0), n, eps, rows_per_program,
        BLOCK_N=block_n, num_warps=num_warps(block_n, _WARP_STEPS),
    )  # fmt: skip
    return dx, partial.sum(dim=0).to(weight.dtype).reshape(weight.shape)
