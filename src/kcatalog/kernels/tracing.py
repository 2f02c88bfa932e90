"""Triton launches that torch.compile can see.

A backend declared `traceable: true` is traced into the compiled graph by its torch op when the op is registered
with `traced=True` (runtime/torch_ops.py), instead of being called as an opaque op: Inductor then schedules,
CUDA-graphs and reinplaces around its kernels.
While that trace runs, a Triton launch must go through ``torch.library.wrap_triton``, which records the kernel
in the graph; in every other call it is the plain launch, at no cost beyond one thread-local read.
Kernel code launches with ``launch(kernel, grid)(*args, **meta)`` in place of ``kernel[grid](*args, **meta)``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

_STATE = threading.local()


def active() -> bool:
    """Whether this thread is tracing a traceable backend into a torch.compile graph."""
    return getattr(_STATE, "tracing", False)


@contextlib.contextmanager
def tracing() -> Iterator[None]:
    """Within the block, launches go through wrap_triton (set by the torch op's decomposition only)."""
    before = active()
    _STATE.tracing = True
    try:
        yield
    finally:
        _STATE.tracing = before


class NotTraceable(RuntimeError):
    """A launch that torch cannot record in a graph: the torch op then stays opaque (runtime/torch_ops.py)."""


def launch(kernel: Any, grid: Any) -> Any:
    """``kernel[grid]``, or its wrap_triton form while a torch op traces the caller into a graph."""
    if getattr(_STATE, "tracing", False):
        from torch.library import wrap_triton
        from triton.runtime.interpreter import InterpretedFunction

        # TRITON_INTERPRET=1: torch does not trace interpreted kernels. torch 2.13 hands them back unwrapped;
        # torch 2.11 raises a RuntimeError for them, so they are told apart before asking.
        if isinstance(kernel, InterpretedFunction) or (wrapped := wrap_triton(kernel)) is kernel:
            raise NotTraceable("torch does not trace Triton kernels run by the interpreter (TRITON_INTERPRET=1)")
        return functools.partial(_with_defaults, kernel.params, wrapped[grid])
    return kernel[grid]


def _with_defaults(params: Any, run: Any, *args: Any, **kwargs: Any) -> Any:
    # Inductor's launcher of a kernel in a graph takes every parameter: pass the defaults left out explicitly.
    for param in params[len(args) :]:
        if param.name not in kwargs and param.has_default:
            kwargs[param.name] = param.default
    return run(*args, **kwargs)
