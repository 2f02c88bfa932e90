"""Backend overrides: parsing, validation against the catalog, and the order of their sources."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from .. import codes
from ..errors import Diagnostic, did_you_mean, listing
from ..model import Override, OverrideSet

ENV_OVERRIDES = "KCATALOG_OVERRIDES"
ENV_BACKEND = "KCATALOG_BACKEND"

OverridesArg = Mapping[str, str] | str | None


def parse_overrides(value: OverridesArg, source: str) -> OverrideSet:
    """'a.*=triton,b.c=torch' or {'a.*': 'triton'} to overrides; ValueError saying what is malformed."""
    if value is None:
        return ()
    if isinstance(value, str):
        pairs = []
        for item in filter(None, (part.strip() for part in value.split(","))):
            pattern, sep, backend = item.partition("=")
            if not sep or not pattern.strip() or not backend.strip():
                raise ValueError(f"{source}: '{item}' is not 'op-or-glob=backend'")
            pairs.append((pattern.strip(), backend.strip()))
    else:
        pairs = list(value.items())
    return tuple(Override(pattern, backend, source) for pattern, backend in pairs)


def process_overrides(overrides: OverridesArg, environ: Mapping[str, str] | None = None) -> list[OverrideSet]:
    """The process-wide override sets, strongest first: KCATALOG_OVERRIDES, KCATALOG_BACKEND, then `overrides=`.

    The environment beats code so an operator can bisect numerics without editing the application.
    Raises ValueError for malformed text.
    """
    env = os.environ if environ is None else environ
    sets = [parse_overrides(env.get(ENV_OVERRIDES) or None, ENV_OVERRIDES)]
    forced = (env.get(ENV_BACKEND) or "").strip()
    sets.append((Override("*", forced, ENV_BACKEND),) if forced else ())
    sets.append(parse_overrides(overrides, "overrides="))
    return [found for found in sets if found]


def check_overrides(overrides: OverrideSet, ops: Sequence[str], backends: Iterable[str]) -> list[Diagnostic]:
    """A diagnostic for each unknown backend (KC601) or pattern matching no op (KC602), naming valid values."""
    known = list(backends)
    problems = []
    for override in overrides:
        if override.backend not in known:
            problems.append(
                Diagnostic(
                    codes.OVERRIDE_UNKNOWN_BACKEND,
                    f"{override.source}: unknown backend '{override.backend}'"
                    f"{did_you_mean(override.backend, known)}; known: {', '.join(known)}",
                )
            )
        if override.pattern != "*" and not any(override.matches(op) for op in ops):
            problems.append(
                Diagnostic(
                    codes.OVERRIDE_MATCHES_NOTHING,
                    f"{override.source}: '{override.pattern}' matches no op"
                    f"{did_you_mean(override.pattern, ops)}; available: {listing(ops)}",
                )
            )
    return problems
