"""The explicit deeper check (`validate --import`): import each target, check it is a matching callable."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .. import codes
from ..errors import Diagnostic, KernelImportError
from ..link.signature import signature_params

if TYPE_CHECKING:
    from ..model import KernelSpec


def import_problems(spec: KernelSpec, signature: str) -> Iterator[Diagnostic]:
    """A diagnostic (the caller locates it) for a target that fails to import (KC307), is not callable
    (KC308), or whose parameters differ from the op's declared signature (KC309). Runs kernel modules' code."""
    try:
        obj = spec.load()
    except KernelImportError as exc:
        yield Diagnostic(
            codes.TARGET_IMPORT_FAILED,
            f"importing target '{spec.target}' failed: {type(exc.__cause__).__name__}: {exc.__cause__}",
        )
        return
    if not callable(obj):
        yield Diagnostic(codes.TARGET_NOT_CALLABLE, f"target '{spec.target}' is a {type(obj).__name__}, not callable")
        return
    try:
        parameters = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):  # some builtins and extension functions carry no signature
        return
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return
    actual = tuple(p.name for p in parameters)
    declared = signature_params(signature)
    if actual != declared:
        yield Diagnostic(
            codes.TARGET_SIGNATURE_MISMATCH,
            (f"target '{spec.target}' takes ({', '.join(actual)}); op '{spec.op}' declares ({', '.join(declared)})"),
        )
