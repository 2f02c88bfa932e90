"""Promised outputs in selection: the promise a request requires (use(), KCATALOG_DETERMINISTIC,
`load_catalog(deterministic=...)`, the settings), and why a backend that does not keep it is rejected."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ..errors import Rejected, RejectKind
from ..model import KernelSpec, Promise, Required

ENV_DETERMINISTIC = "KCATALOG_DETERMINISTIC"
# What KCATALOG_DETERMINISTIC may say, case aside: off, deterministic, or batch invariant.
_ENV_VALUES: Mapping[str, Promise | None] = {
    "": None,
    "0": None,
    "false": None,
    "1": Promise.DETERMINISTIC,
    "true": Promise.DETERMINISTIC,
    "deterministic": Promise.DETERMINISTIC,
    "batch_invariant": Promise.BATCH_INVARIANT,
}


def asked(deterministic: bool, batch_invariant: bool, where: str) -> Required | None:
    """What `where(deterministic=..., batch_invariant=...)` (use(), load_catalog()) requires, or None."""
    if batch_invariant:
        return Required(Promise.BATCH_INVARIANT, f"{where}(batch_invariant=True)")
    return Required(Promise.DETERMINISTIC, f"{where}(deterministic=True)") if deterministic else None


def process_required(
    deterministic: bool = False, batch_invariant: bool = False, environ: Mapping[str, str] | None = None
) -> tuple[Required, ...]:
    """The promises this process requires of every selection: KCATALOG_DETERMINISTIC, then `load_catalog`'s.

    A request for determinism only ever adds: no source can lift another's. ValueError for text the variable
    cannot mean."""
    env = os.environ if environ is None else environ
    text = env.get(ENV_DETERMINISTIC, "")
    if text.strip().lower() not in _ENV_VALUES:
        raise ValueError(
            f"{ENV_DETERMINISTIC}={text!r}: expected 1 (deterministic), batch_invariant, or 0 (off); "
            "see docs/selection.md"
        )
    promise = _ENV_VALUES[text.strip().lower()]
    found = [] if promise is None else [Required(promise, f"{ENV_DETERMINISTIC}={text.strip()}")]
    given = asked(deterministic, batch_invariant, "load_catalog")
    return (*found, *([] if given is None else [given]))


def strongest(required: Iterable[Required]) -> Required | None:
    """The strongest promise required (the first of equally strong ones, which names who asked), or None."""
    best: Required | None = None
    for candidate in required:
        if best is None or (candidate.promise.implies(best.promise) and candidate.promise is not best.promise):
            best = candidate
    return best


def unkept(spec: KernelSpec, device: str, required: Required) -> Rejected | None:
    """Why the backend cannot be selected when `required` is asked for on this device kind, or None if it keeps it."""
    if spec.keeps(required.promise, device):
        return None
    weaker = [p for p in Promise if required.promise.implies(p) and p is not required.promise and spec.keeps(p, device)]
    promised = (
        f"promises {weaker[-1].value} but not {required.promise.value}"
        if weaker
        else (f"does not promise {required.promise.value}")
    )
    return Rejected(
        spec.backend, f"{promised} outputs on {device} (asked for by {required.source})", RejectKind.NOT_PROMISED
    )
