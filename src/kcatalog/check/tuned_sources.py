"""The tuned entries stale by their kernels' source, checked on every load: each timed backend's source digest here
(pyresolve's kernel_source) against the one its table recorded (KC235). A warm load reuses the digests of the last
load while every module read for them is unchanged, so that checking costs one fingerprint per module; the
environment (GPU, versions) is compared where the catalog runs (select/buckets.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from .. import codes
from ..errors import Diagnostic, Severity
from ..model import LinkedCatalog, ModuleFingerprint, SourceDigests, StalePolicy, TableKeyValues, TunedOp

if TYPE_CHECKING:
    from ..pyresolve import Fingerprint

Key = tuple[str, str, str, TableKeyValues]  # op, platform, dtype, key (() for an op without one): a tuned entry


@dataclass(frozen=True)
class SourceCheck:
    """The stale entries (what changed since their table was measured, by op x platform x dtype x key), their
    diagnostics, and the digests compared (the known ones where they held: the cache keeps them; None: no entry
    records any)."""

    stale: Mapping[Key, str]
    diagnostics: list[Diagnostic]
    digests: SourceDigests | None


def check_tuned_sources(
    linked: LinkedCatalog, known: SourceDigests | None, current: Callable[[str], Fingerprint]
) -> SourceCheck:
    """Compare every tuned entry that records kernel digests with the sources here; `current(module)` is the
    module's fingerprint now (shared with the target checks, so that a module is fingerprinted once a load)."""
    wanted = _targets(linked)
    if not wanted:
        return SourceCheck(MappingProxyType({}), [], None)
    digests = _digests(wanted, known, current)
    policy = linked.settings.stale if linked.settings is not None else StalePolicy.IGNORE
    stale: dict[Key, str] = {}
    diagnostics = []
    for entry in linked.tuned:
        why = _changed(entry, linked, digests.digests)
        if why is None:
            continue
        stale[(entry.op, entry.platform, entry.dtype, entry.key)] = why
        severity = Severity.ERROR if policy is StalePolicy.ERROR else Severity.WARNING
        message = f"tuned entry {entry.described} is stale: {why}; {_outcome(policy)}"
        diagnostics.append(Diagnostic(codes.TUNED_STALE, message, entry.location, severity))
    return SourceCheck(MappingProxyType(stale), diagnostics, digests)


def _outcome(policy: StalePolicy) -> str:
    """What the catalog does with a stale entry, as a diagnostic ends."""
    if policy is StalePolicy.USE:
        return "used all the same (tuned: {stale: use}); measure it again with `kcatalog tune`"
    if policy is StalePolicy.ERROR:
        return "tuned: {stale: error} refuses it; measure it again with `kcatalog tune`"
    return "ignored: priority decides (tuned: {stale: ignore}); measure it again with `kcatalog tune`"


def _targets(linked: LinkedCatalog) -> list[str]:
    """The target of every timed backend of every entry that records kernel digests, once each."""
    found: dict[str, None] = {}
    for entry in linked.tuned:
        info = linked.ops.get(entry.op)
        if entry.kernels is None or info is None:
            continue
        for backend in entry.timed:
            spec = info.backends.get(backend)
            if spec is not None:
                found.setdefault(str(spec.target))
    return list(found)


def _digests(wanted: list[str], known: SourceDigests | None, current: Callable[[str], Fingerprint]) -> SourceDigests:
    """The digests of `wanted`: the known ones while they cover them and nothing they read changed, else afresh."""
    if (
        known is not None
        and all(target in known.digests for target in wanted)
        and all(current(module.module) == module.found for module in known.modules)
    ):
        return known
    from ..pyresolve import kernel_sources

    digests: dict[str, str | None] = {}
    modules: dict[str, ModuleFingerprint] = {}
    for source in kernel_sources(wanted):
        digests[source.target] = source.digest
        for name, found in source.modules:
            modules.setdefault(name, ModuleFingerprint(name, found))
    return SourceDigests(MappingProxyType(digests), tuple(modules.values()))


def _changed(entry: TunedOp, linked: LinkedCatalog, digests: Mapping[str, str | None]) -> str | None:
    """What changed in the entry's kernels since its table was measured, or None (nothing, or not recorded)."""
    info = linked.ops.get(entry.op)
    if entry.kernels is None or info is None:
        return None
    changed, missing = [], []
    for backend in entry.timed:
        spec = info.backends.get(backend)
        now = digests.get(str(spec.target)) if spec is not None else None
        if now is None:  # no source here (not installed, compiled): its package's version is compared instead
            continue
        recorded = entry.kernels.get(backend)
        if recorded is None:
            missing.append(backend)
        elif recorded != now:
            changed.append(backend)
    reasons = []
    if changed:
        which = ", ".join(f"'{name}' ({info.backends[name].target})" for name in changed)
        noun = "backend" if len(changed) == 1 else "backends"
        reasons.append(f"the kernel source of {noun} {which} changed since the table was measured")
    if missing:
        names = ", ".join(f"'{name}'" for name in missing)
        reasons.append(
            f"the table records no kernel digest for {'backend' if len(missing) == 1 else 'backends'} {names}"
        )
    return "; ".join(reasons) or None
