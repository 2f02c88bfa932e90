"""Numerical checks shared by the test suite, the GPU benchmark and `kcatalog test`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ computed in float64; NaN or Inf anywhere in `out` gives inf."""
    import torch

    out64 = out.detach().to(device="cpu", dtype=torch.float64)
    ref64 = ref.detach().to(device="cpu", dtype=torch.float64)
    if out64.shape != ref64.shape:
        raise ValueError(f"shape mismatch: got {tuple(out64.shape)}, expected {tuple(ref64.shape)}")
    if not torch.isfinite(out64).all():
        return float("inf")
    denom = torch.linalg.vector_norm(ref64).item()
    diff = torch.linalg.vector_norm(out64 - ref64).item()
    return float(diff / denom if denom > 0 else diff)


def poison_(tensor: torch.Tensor) -> torch.Tensor:
    """Fill a tensor with NaN (floating) or its maximum value, so unwritten elements show."""
    import torch

    if tensor.dtype.is_floating_point:
        # float8 types have no NaN fill on every torch version; fill through float32.
        tensor.copy_(torch.full(tensor.shape, float("nan"), dtype=torch.float32, device=tensor.device))
    else:
        tensor.fill_(torch.iinfo(tensor.dtype).max)
    return tensor


def unwritten_count(tensor: torch.Tensor) -> int:
    """How many elements of a poisoned floating tensor are still NaN."""
    import torch

    return int(torch.isnan(tensor.to(torch.float32)).sum().item())


def check_close(name: str, out: torch.Tensor, ref: torch.Tensor, tol: float) -> float:
    """Raise AssertionError naming `name` and the figures if ‖out − ref‖/‖ref‖ > tol; return the error."""
    import torch

    nan_count = unwritten_count(out) if out.dtype.is_floating_point else 0
    if nan_count:
        raise AssertionError(f"{name}: {nan_count} of {out.numel()} elements are NaN (unwritten or invalid)")
    err = relative_error(out, ref)
    if not err <= tol:  # also catches NaN
        max_abs = (out.to(torch.float64).cpu() - ref.to(torch.float64).cpu()).abs().max().item()
        raise AssertionError(f"{name}: relative error {err:.3e} > tolerance {tol:.1e} (max abs error {max_abs:.3e})")
    return err
