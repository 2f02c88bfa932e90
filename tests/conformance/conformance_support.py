"""Helpers for the conformance tests: `main` captured, ops with samples declared, torch on one thread.

Throwaway catalogs, kernel modules and the environment of child processes: catalog_builder (tests/).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from kcatalog.tools.cli import main


class Run(NamedTuple):
    """What one `main([...])` call returned and printed."""

    code: int
    out: str
    err: str


def run_cli(*argv: str | os.PathLike[str]) -> Run:
    """`kcatalog ARGV` in this process, its output captured; usable from fixtures of any scope."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([os.fspath(arg) for arg in argv])
    return Run(code, out.getvalue(), err.getvalue())


def declare_op(
    module: str,
    backends: Mapping[str, str],
    *,
    samples: Mapping[str, Any],
    signature: str = "(x: Tensor) -> Tensor",
    dtypes: Sequence[str] = ("float32",),
    reference: str = "torch",
    **extra: Any,
) -> dict[str, Any]:
    """An op whose backends are `module:function` by backend name; float32 tolerance 1e-5, as the shipped ops."""
    return {
        "description": "a throwaway op",
        "signature": signature,
        "reference": reference,
        "dtypes": list(dtypes),
        "tolerance": {dtype: 1.0e-5 for dtype in dtypes if dtype == "float32"},
        "samples": dict(samples),
        "backends": {name: {"target": f"{module}:{function}"} for name, function in backends.items()},
        **extra,
    }


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch ops on one CPU thread meanwhile.

    On a small shared machine, intra-op threads wait on each other and on other processes: a 2-core
    run of the shipped catalog takes half as long again, and CPU timings measure the scheduler.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
