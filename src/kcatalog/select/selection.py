"""Choosing a backend: eligibility on a platform, overrides, priority order, reasons for the rest."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ..errors import NoEligibleBackendError, Rejected, RejectKind, UnknownBackendError
from ..model import (
    CatalogSettings,
    Environment,
    KernelSpec,
    OpInfo,
    Override,
    OverrideSet,
    Required,
    TableKeyValues,
)
from ..platform import Platform, is_installed
from .buckets import Pick
from .promises import strongest, unkept


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

    @property
    def backend(self) -> str:
        """The chosen backend's name; NoEligibleBackendError listing every backend's reason when none can run."""
        return self.require().backend


@dataclass(frozen=True)
class SelectRequest:
    """Everything one selection depends on besides the catalog: the op, where and for what it runs, and what the
    runtime knows at that moment (its open `use()` scopes, the imports that failed, the per-call gates' verdicts).

    `tokens` (the dispatch argument's leading dimension) picks the bucket of a plan or tuned table, and for an op
    keyed by its shape (`table_key`), `key` (its sizes in the op's key order) the entry;
    `packages_here=False` takes every backend's `requires` as met (choosing for another machine); `required`: the
    promises (deterministic, batch-invariant outputs) the open `use()` blocks ask of every backend selected."""

    op: str
    platform: Platform
    dtype: str | None = None
    backend: str | None = None
    tokens: int | None = None
    key: TableKeyValues | None = None
    scoped: tuple[OverrideSet, ...] = ()  # `use()` blocks open in this context, innermost first
    failed: Mapping[tuple[str, str], str] | None = None  # (op, backend) -> why its import failed
    gates: Mapping[str, str] | None = None  # backend -> why its gate refuses this call
    packages_here: bool = True
    # This machine's device and versions, where the call runs on it: what tuned entries are compared with (None:
    # choosing for another machine, or no table records an environment).
    environment: Environment | None = None
    required: tuple[Required, ...] = ()  # `use(deterministic=True)` blocks open in this context, innermost first


def matches_by_strength(sets: Iterable[OverrideSet], op: str) -> Iterator[Override]:
    """Each override set's most specific override matching `op`, strongest set first."""
    for overrides in sets:
        matches = [o for o in overrides if o.matches(op)]
        if matches:
            yield max(matches, key=lambda o: o.specificity)


def ineligibility(
    spec: KernelSpec, platform: Platform, dtype: str | None = None, *, packages_here: bool = True
) -> Rejected | None:
    """Why the spec cannot run on the platform for this dtype, or None when it can; `packages_here=False` (a plan
    for another machine) takes its `requires` as met: what is installed here says nothing about there."""
    reason = platform.mismatch(spec.capabilities)
    if reason is not None:
        return Rejected(spec.backend, reason, RejectKind.CAPABILITY)
    missing = [dist for dist in spec.requires if packages_here and not is_installed(dist)]
    if missing:
        return Rejected(spec.backend, f"needs {', '.join(missing)}, not installed", RejectKind.REQUIRES)
    if dtype is not None and spec.dtypes is not None and dtype not in spec.dtypes:
        supported = ", ".join(spec.dtypes)
        return Rejected(spec.backend, f"does not support {dtype} (supports {supported})", RejectKind.DTYPE)
    return None


@dataclass(frozen=True)
class Order:
    """An op's backends best first, and the order that decided: `source` as explain shows it, `label` as a
    ranked-below reason names it."""

    backends: tuple[str, ...]
    source: str
    label: str


def priority_order(settings: CatalogSettings, info: OpInfo, platform: Platform) -> Order:
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
            return Order(tuple(ranked + [name for name in info.backends if name not in ranked]), source, source)
    return Order(tuple(info.backends), "declaration order", "declaration order")


def select(
    settings: CatalogSettings,
    info: OpInfo,
    request: SelectRequest,
    *,
    overrides: Sequence[OverrideSet] = (),
    strict: bool = False,
    picks: Sequence[Pick] = (),
    required: Sequence[Required] = (),
) -> Selection:
    """Pick the backend for one call: the request's `backend` > its scoped override sets, then the process's
    `overrides` (strongest first) > `picks` (a plan's, then a tuned table's) > priority.

    Every path checks eligibility. An explicit backend that cannot run raises; an override that
    cannot be honoured gives way to the next weaker one, then to priority, with a note (or raises
    when `strict`). Where a promise is required (the request's `required`, the process's, the settings'), a
    backend that does not promise it cannot run, whichever path names it.
    """
    platform, dtype = request.platform, request.dtype
    failed = request.failed or {}
    gates = request.gates or {}  # backend -> why its per-call gate refuses this call (runtime/gates.py)
    needed = strongest((*request.required, *required, *settings.required))
    order = priority_order(settings, info, platform)
    backends, decided_by, label = order.backends, order.source, order.label

    def reason_for(name: str) -> Rejected | None:
        if (info.id, name) in failed:
            return Rejected(name, f"import failed on first use: {failed[(info.id, name)]}", RejectKind.IMPORT_FAILED)
        spec = info.backends[name]
        found = ineligibility(spec, platform, dtype, packages_here=request.packages_here)
        if found is None and needed is not None:
            found = unkept(spec, platform.device, needed)
        gate = gates.get(name)
        return found or (None if gate is None else Rejected(name, gate, RejectKind.GATE))

    def refused(why: Rejected) -> NoEligibleBackendError:
        return NoEligibleBackendError(info.id, str(platform), [why])

    notes: list[str] = []
    passed_over: Pick | None = None  # a stale tuned entry's pick, ignored: its backend is told why it did not run
    # The backend named by an override (or, for tuned tables and plans, by them): the one `auto: false` does not
    # keep out, since only priority-based choice skips such backends.
    named: str | None = None
    if request.backend is not None:
        backend = request.backend
        if backend not in info.backends:
            raise UnknownBackendError(info.id, backend, list(info.backends), info.location)
        why = reason_for(backend)
        if why is not None:
            raise refused(why)
        rest = tuple(
            Rejected(n, "not requested (backend given in the call)", RejectKind.NOT_REQUESTED)
            for n in backends
            if n != backend
        )
        return Selection(info.id, platform, info.backends[backend], "requested in the call", backends, rest)

    for override in matches_by_strength((*request.scoped, *overrides), info.id):  # else the next one decides
        if override.backend not in info.backends:
            if strict:
                raise UnknownBackendError(info.id, override.backend, list(info.backends), info.location)
            notes.append(f"{override} ignored: op '{info.id}' has no '{override.backend}' backend")
            continue
        why = reason_for(override.backend)
        if why is not None:
            if strict:
                raise refused(why)
            notes.append(f"{override} ignored: {override.backend} cannot run ({why.reason})")
            continue
        backends = (override.backend, *(n for n in backends if n != override.backend))
        decided_by = label = f"override {override}"
        named = override.backend
        break
    else:
        for pick in picks:
            if pick.stale is not None:
                outcome = "ignored: priority decides" if pick.ignored else "used all the same (tuned: {stale: use})"
                entry = pick.entry or f"{info.id} {dtype} on {platform}"
                notes.append(f"tuned entry {entry} is stale: {pick.stale}; {outcome}")
            if pick.ignored:
                passed_over = pick
                continue
            if pick.backend not in info.backends:  # linking checks plans and tables against the ops: a safeguard
                if strict and pick.pinned:
                    raise UnknownBackendError(info.id, pick.backend, list(info.backends), info.location)
                notes.append(f"{pick.why} not honoured for op '{info.id}': it has no '{pick.backend}' backend")
                continue
            why = reason_for(pick.backend)
            if why is not None:
                if strict and pick.pinned:
                    raise refused(why)
                if why.kind is RejectKind.NOT_PROMISED and not pick.pinned:
                    continue  # a measurement, not a request: the rejection below says why, without a warning a bucket
                notes.append(f"{pick.why} not honoured for op '{info.id}': {pick.backend} cannot run ({why.reason})")
                continue
            backends = (pick.backend, *(n for n in backends if n != pick.backend))
            decided_by, label = pick.why, pick.label
            named = pick.backend  # a table or plan may choose an `auto: false` backend
            break

    chosen: KernelSpec | None = None
    rejected = []
    for name in backends:
        why = reason_for(name)
        if why is not None:
            rejected.append(why)
        elif name != named and not info.backends[name].auto:
            reason = "not chosen automatically (auto: false); name it with backend=, an override or a plan"
            rejected.append(Rejected(name, reason, RejectKind.AUTO_OFF))
        elif chosen is None:
            chosen = info.backends[name]
        elif passed_over is not None and name == passed_over.backend:
            reason = (
                f"chosen by {passed_over.label}, which is stale and ignored; ranked below {chosen.backend} by {label}"
            )
            rejected.append(Rejected(name, reason, RejectKind.STALE_TABLE))
        else:
            rejected.append(Rejected(name, f"ranked below {chosen.backend} by {label}", RejectKind.RANKED_BELOW))
    return Selection(info.id, platform, chosen, decided_by, backends, tuple(rejected), tuple(notes))
