"""The launches of moe.fused_experts's Triton backend per call, counted on the CPU under the Triton interpreter:
torch ops that launch a kernel on CUDA (views and allocations aside) and Triton launches.

Run: TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/moe_launches.py
"""

from __future__ import annotations

import collections
import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

#: aten ops that launch nothing on CUDA (views, allocations).
NO_LAUNCH = {"empty.memory_format", "empty_like.default", "view.default", "_reshape_alias.default", "reshape.default",
             "_unsafe_view.default", "as_strided.default", "slice.Tensor", "select.int", "expand.default",
             "alias.default", "detach.default"}  # fmt: skip
MODULES = ("kcatalog.kernels.triton.moe", "kcatalog.kernels.triton.moe_align", "kcatalog.kernels.triton.moe_gemv")


class Log(TorchDispatchMode):
    """Records the aten ops dispatched in the block."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(f"{func.overloadpacket.__name__}.{func._overloadname}")
        return func(*args, **(kwargs or {}))


def count_triton(triton_launches: list[str]) -> None:
    """Patch each module's `launch` to record the kernel's name; the interpreter's own tensor copies unlogged."""
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # an older tree without this module
            continue
        original = module.launch

        def counted(kernel: Any, grid: Any, original: Callable[..., Any] = original) -> Callable[..., Any]:
            triton_launches.append(getattr(kernel, "__name__", None) or kernel.fn.__name__)
            run = original(kernel, grid)

            def quiet(*args: Any, **kwargs: Any) -> Any:
                with _disable_current_modes():
                    return run(*args, **kwargs)

            return quiet

        module.launch = counted


def main() -> None:
    from kcatalog.kernels.triton import moe

    triton_launches: list[str] = []
    count_triton(triton_launches)
    for tokens, hidden, inter, experts, top_k in [(1, 64, 48, 128, 8), (16, 64, 48, 128, 8), (1, 64, 48, 8, 2)]:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(tokens, hidden)
        ids = torch.randint(0, experts, (tokens, top_k), generator=gen)
        weights = torch.rand(tokens, top_k)
        gate_up, down = torch.randn(experts, 2 * inter, hidden), torch.randn(experts, hidden, inter)
        for path in ("gemm", "gemv") if hasattr(moe.TUNING.get(), "gemv_tokens") else ("gemm",):
            triton_launches.clear()
            with moe.TUNING.override(**({"gemv_tokens": tokens} if path == "gemv" else {})), Log() as log:
                moe.fused_experts(x, ids, weights, gate_up, down)
            torch_ops = [op for op in log.ops if op not in NO_LAUNCH]
            allocations = sum(op.startswith("empty") for op in log.ops)
            print(f"T={tokens} E={experts} K={top_k} {path}: {len(torch_ops)} torch ops that launch + "
                  f"{len(triton_launches)} Triton launches = {len(torch_ops) + len(triton_launches)}; "
                  f"{allocations} allocations")  # fmt: skip
            print(f"   torch: {dict(collections.Counter(torch_ops))}\n   triton: {triton_launches}")


if __name__ == "__main__":
    main()
