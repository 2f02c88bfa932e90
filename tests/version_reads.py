"""A watch on tensors' version counters: every read of ``Tensor._version`` from kcatalog's own code while
torch.inference_mode is on, where an inference tensor raises ("Inference tensors do not track version counter")
and any other is a sign that a path keys something on versions that inference tensors do not keep."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

import kcatalog

SOURCE = str(Path(kcatalog.__file__).parent)


@contextlib.contextmanager
def watched_version_reads() -> Iterator[list[str]]:
    """Within the block, each read of a tensor's `_version` by a frame of kcatalog's source under inference_mode
    is recorded as 'file:line' in the list yielded (the read itself still happens, and may still raise)."""
    reads: list[str] = []
    base = torch._C.TensorBase._version

    def read(tensor: torch.Tensor) -> int:
        caller = sys._getframe(1)
        if torch.is_inference_mode_enabled() and caller.f_code.co_filename.startswith(SOURCE):
            reads.append(f"{caller.f_code.co_filename}:{caller.f_lineno}")
        return base.__get__(tensor)  # type: ignore[no-any-return]

    torch.Tensor._version = property(read)  # type: ignore[method-assign,assignment]
    try:
        yield reads
    finally:
        del torch.Tensor._version  # TensorBase's descriptor shows again
