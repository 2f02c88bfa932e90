"""Whether a tuned entry still describes this machine: the device, its multiprocessors and the versions of the
distributions its timings depend on, as its table recorded them, against those here. The kernels' source is
compared at load (check/tuned_sources.py); this is compared where the catalog runs, since only that machine knows.

Versions are compared by release series (major.minor: torch 2.11.0+cu130 and 2.11.1+cu128 agree): a patch release
does not move a kernel's timing the way a new series can, and a table that every patch made stale would be ignored
on nearly every machine."""

from __future__ import annotations

import re

from ..model import Environment, TunedOp

_SERIES = re.compile(r"\d+(?:\.\d+)?")


def release_series(version: str | None) -> str | None:
    """'2.11' of '2.11.0+cu130'; a version of another shape as it is."""
    if version is None:
        return None
    found = _SERIES.match(version)
    return found.group(0) if found else version


def environment_change(entry: TunedOp, here: Environment) -> str | None:
    """What of the entry's recorded environment differs here ('torch changed since the table was measured
    (2.9.1 then, 2.11.0 now)'), or None; what the table does not record is not compared."""
    then = entry.measured_on
    if then is None:
        return None
    reasons = []
    if then.device != here.device:
        reasons.append(f"the device changed since the table was measured ({then.device} then, {here.device} now)")
    elif then.sms is not None and here.sms is not None and then.sms != here.sms:
        reasons.append(
            f"the device's multiprocessor count changed since the table was measured ({then.sms} then, {here.sms} now)"
        )
    for name in entry.packages:
        was = then.versions.get(name)
        if was is None:
            continue
        now = here.versions.get(name)
        if release_series(was) != release_series(now):
            shown = now if now is not None else "not installed"
            reasons.append(f"{name} changed since the table was measured ({was} then, {shown} now)")
    return "; ".join(reasons) or None
