"""The explicit deeper check (`validate --import`): import each target, check it is a matching callable."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .. import codes
from ..errors import Diagnostic, KernelImportError, Severity

if TYPE_CHECKING:
    from ..model import Declared


def import_problems(spec: Declared, declared: tuple[str, ...] | None) -> Iterator[Diagnostic]:
    """A diagnostic (the caller locates it) for a target that fails to import (KC307), is not callable
    (KC308), or whose parameters differ from the op's declared ones (KC309; None: not compared). Runs
    kernel modules' code.

    A target whose top-level package is not installed here is unavailable (KC303, a warning), as the
    static check says of it: importing it cannot tell more."""
    target = str(spec.target)
    try:
        obj = spec.load()
    except KernelImportError as exc:
        cause = exc.__cause__
        module = spec.target.module
        top = module.partition(".")[0]
        if isinstance(cause, ModuleNotFoundError) and cause.name == top:
            yield Diagnostic(
                codes.TARGET_UNAVAILABLE,
                f"module {module!r} unavailable here: top-level package {top!r} is not installed "
                f"(importing target {target!r} raised ModuleNotFoundError)",
                severity=Severity.WARNING,
            )
            return
        yield Diagnostic(
            codes.TARGET_IMPORT_FAILED,
            f"importing target {target!r} failed: {type(cause).__name__}: {_one_line(str(cause))}",
        )
        return
    if not callable(obj):
        yield Diagnostic(codes.TARGET_NOT_CALLABLE, f"target {target!r} is a {type(obj).__name__}, not callable")
        return
    if declared is None:  # the op declares no signature, or a layer mapping's forward: nothing to compare with
        return
    try:
        parameters = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):  # some builtins and extension functions carry no signature
        return
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return
    actual = tuple(p.name for p in parameters)
    if actual != declared:
        yield Diagnostic(
            codes.TARGET_SIGNATURE_MISMATCH,
            f"target {target!r} takes ({', '.join(actual)}); op '{spec.owner}' declares ({', '.join(declared)})",
        )


def _one_line(text: str) -> str:
    """An exception's text on one line: messages never hold raw line breaks."""
    return text.replace("\r", "\\r").replace("\n", "\\n")
