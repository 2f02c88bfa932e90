"""Choosing a backend: eligibility on a platform, overrides, priority order, reasons for the rest."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ..errors import NoEligibleBackendError, UnknownBackendError
from ..model import CatalogSettings, KernelSpec, Layer, OpInfo, Override, Rejected
from ..platform import Platform, is_installed


@dataclass(frozen=True)
class Selection:
    """The chosen spec for an op on a platform (None if nothing is eligible), why, and why not the rest."""

    op: str
    platform: Platform
    chosen: KernelSpec | None
    decided_by: str
    order: tuple[str, ...]
    rejected: tuple[Rejected, ...]
    notes: tuple[str, ...] = ()

    def require(self) -> KernelSpec:
        """The chosen spec, or NoEligibleBackendError listing every backend's reason."""
        if self.chosen is None:
            raise NoEligibleBackendError(self.op, str(self.platform), self.rejected)
        return self.chosen


@dataclass(frozen=True)
class Pick:
    """A backend chosen for this call by a plan or a tuned table, below overrides and above priority."""

    backend: str
    why: str  # 'plan plan.yaml', 'tuned table for cuda:9.0 bfloat16 T∈[17, 64]: triton 2.1 µs vs ...'
    pinned: bool = False  # a plan's: when it cannot be honoured, strict raises


def matches_by_strength(layers: Iterable[Layer], op: str) -> Iterator[Override]:
    """Each layer's most specific override matching `op`, strongest layer first."""
    for layer in layers:
        matches = [o for o in layer if o.matches(op)]
        if matches:
            yield max(matches, key=lambda o: o.specificity)


def ineligibility(
    spec: KernelSpec, platform: Platform, dtype: str | None = None, *, packages_here: bool = True
) -> str | None:
    """Why the spec cannot run on the platform for this dtype, or None when it can; `packages_here=False` (a plan
    for another machine) takes its `requires` as met: what is installed here says nothing about there."""
    reason = platform.mismatch(spec.capabilities)
    if reason is not None:
        return reason
    missing = [dist for dist in spec.requires if packages_here and not is_installed(dist)]
    if missing:
        return f"needs {', '.join(missing)}, not installed"
    if dtype is not None and spec.dtypes is not None and dtype not in spec.dtypes:
        return f"does not support {dtype} (supports {', '.join(spec.dtypes)})"
    return None


def priority_order(settings: CatalogSettings, info: OpInfo, platform: Platform) -> tuple[tuple[str, ...], str]:
    """The op's backends best first, and which order decided: the most specific declared one wins."""
    device = platform.device
    for preferred, source in (
        (info.platform_priority.get(device), f"priority of op '{info.id}' on {device}"),
        (settings.platform_priority.get(device), f"catalog priority on {device}"),
        (info.priority, f"priority of op '{info.id}'"),
        (settings.priority, "catalog default priority"),
    ):
        if preferred:
            ranked = [name for name in preferred if name in info.backends]
            return tuple(ranked + [name for name in info.backends if name not in ranked]), source
    return tuple(info.backends), "declaration order"


def select(
    settings: CatalogSettings,
    info: OpInfo,
    platform: Platform,
    dtype: str | None = None,
    *,
    backend: str | None = None,
    layers: Sequence[Layer] = (),
    failed: Mapping[tuple[str, str], str] | None = None,
    strict: bool = False,
    picks: Sequence[Pick] = (),
    gates: Mapping[str, str] | None = None,
    packages_here: bool = True,
) -> Selection:
    """Pick the backend for one call: explicit `backend` > override layers (strongest first) > `picks` (a
    plan's, then a tuned table's) > priority. `packages_here`: see ineligibility.

    Every path checks eligibility. An explicit backend that cannot run raises; an override that
    cannot be honoured gives way to the next weaker one, then to priority, with a note (or raises
    when `strict`).
    """
    failed = failed or {}
    gates = gates or {}  # backend -> why its per-call gate refuses this call (select/gates.py)
    order, decided_by = priority_order(settings, info, platform)

    def reason_for(name: str) -> str | None:
        spec = info.backends[name]
        if (info.id, name) in failed:
            return f"import failed on first use: {failed[(info.id, name)]}"
        return ineligibility(spec, platform, dtype, packages_here=packages_here) or gates.get(name)

    notes: list[str] = []
    # The backend named by an override (or, for tuned tables and plans, by them): the one `auto: false` does not
    # keep out, since only priority-based choice skips such backends.
    named: str | None = None
    if backend is not None:
        if backend not in info.backends:
            raise UnknownBackendError(info.id, backend, list(info.backends), info.location)
        reason = reason_for(backend)
        if reason is not None:
            raise NoEligibleBackendError(info.id, str(platform), [Rejected(backend, reason)])
        rest = tuple(Rejected(n, "not requested (backend given in the call)") for n in order if n != backend)
        return Selection(info.id, platform, info.backends[backend], "requested in the call", order, rest)

    for override in matches_by_strength(layers, info.id):  # one that cannot be honoured leaves it to the next
        if override.backend not in info.backends:
            if strict:
                raise UnknownBackendError(info.id, override.backend, list(info.backends), info.location)
            notes.append(f"{override} ignored: op '{info.id}' has no '{override.backend}' backend")
            continue
        reason = reason_for(override.backend)
        if reason is not None:
            if strict:
                raise NoEligibleBackendError(info.id, str(platform), [Rejected(override.backend, reason)])
            notes.append(f"{override} ignored: {override.backend} cannot run ({reason})")
            continue
        order = (override.backend, *(n for n in order if n != override.backend))
        decided_by = f"override {override}"
        named = override.backend
        break
    else:
        for pick in picks:
            reason = (
                f"op '{info.id}' has no '{pick.backend}' backend"
                if pick.backend not in info.backends
                else reason_for(pick.backend)
            )
            if reason is not None:
                if strict and pick.pinned:
                    raise NoEligibleBackendError(info.id, str(platform), [Rejected(pick.backend, reason)])
                notes.append(f"{pick.why} not honoured for op '{info.id}': {pick.backend} cannot run ({reason})")
                continue
            order = (pick.backend, *(n for n in order if n != pick.backend))
            decided_by = pick.why
            named = pick.backend  # a table or plan may choose an `auto: false` backend
            break

    chosen: KernelSpec | None = None
    rejected = []
    for name in order:
        reason = reason_for(name)
        if reason is not None:
            rejected.append(Rejected(name, reason))
        elif name != named and not info.backends[name].auto:
            reason = "not chosen automatically (auto: false); name it with backend=, an override or a plan"
            rejected.append(Rejected(name, reason, eligible=True))
        elif chosen is None:
            chosen = info.backends[name]
        else:
            reason = f"ranked below {chosen.backend} by {decided_by.partition(': ')[0]}"
            rejected.append(Rejected(name, reason, eligible=True))
    return Selection(info.id, platform, chosen, decided_by, order, tuple(rejected), tuple(notes))
