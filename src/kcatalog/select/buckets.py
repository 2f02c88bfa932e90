"""Selection by token count: the tuned tables and the plan of one catalog, which entry or bucket covers a call,
and the boundary lookup handles use."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, TypeVar

from ..errors import CatalogError
from ..model import Environment, LockedPlan, PlanEntry, StalePolicy, TableKeyValues, TunedBucket, TunedOp, key_text
from ..platform import Platform
from .staleness import environment_change


@dataclass(frozen=True)
class Pick:
    """A backend chosen for this call by a plan or a tuned table, below overrides and above priority."""

    backend: str
    why: str  # 'plan plan.yaml', 'tuned table for cuda:9.0 bfloat16 T∈[17, 64]: triton 2.1 µs vs ...'
    label: str  # what a ranked-below reason names: 'plan plan.yaml', 'tuned table for cuda:9.0 bfloat16 T∈[17, 64]'
    pinned: bool = False  # a plan's: when it cannot be honoured, strict raises
    stale: str | None = None  # a stale tuned entry's: what changed since its table was measured
    ignored: bool = False  # stale, and `tuned: {stale: ignore}`: priority decides, the pick names what it passed over
    entry: str = ""  # a tuned pick's entry as messages name it: 'g.op float32 E=8 on cpu'


# A tuned entry, as the tables are keyed: op, platform, dtype and table key (() for an op without `table_key`).
EntryKey = tuple[str, str, str, TableKeyValues]


def covering(buckets: Sequence[TunedBucket], tokens: int) -> TunedBucket | None:
    """The bucket holding `tokens` (buckets are sorted and disjoint), or None: O(log n), no list built per call
    (a handle's first call asks once per segment, so a per-call list made that quadratic in the buckets)."""
    index = bisect.bisect_right(buckets, tokens, key=_low) - 1  # the last bucket starting at or below `tokens`
    if index >= 0 and buckets[index].covers(tokens):
        return buckets[index]
    return None


def _low(bucket: TunedBucket) -> int:
    return bucket.low


@dataclass(frozen=True)
class Tuning:
    """What chooses backends by measurement: the tuned tables (one per op x platform x dtype, and x key for an op
    keyed by its shape) and the loaded plan."""

    tables: Mapping[EntryKey, TunedOp] = field(default_factory=lambda: MappingProxyType({}))
    plan: LockedPlan | None = None
    bucketed: frozenset[str] = frozenset()  # the ops a table or the plan chooses by token count somewhere
    # The entries whose kernels' source changed since they were measured (the load's check): what changed.
    stale: Mapping[EntryKey, str] = field(default_factory=lambda: MappingProxyType({}))
    policy: StalePolicy = StalePolicy.IGNORE  # what a stale entry is: used, ignored, or an error

    @classmethod
    def of(
        cls,
        tuned: Iterable[TunedOp],
        plan: LockedPlan | None,
        stale: Mapping[EntryKey, str] | None = None,
        policy: StalePolicy = StalePolicy.IGNORE,
    ) -> Tuning:
        """The tables by (op, platform, dtype), with the plan, the entries found stale at load and the policy."""
        tables = {(t.op, t.platform, t.dtype, t.key): t for t in tuned}
        bucketed = {t.op for t in tables.values()}
        if plan is not None:
            bucketed |= {e.op for e in plan.entries.values() if e.buckets or e.key}
        return cls(MappingProxyType(tables), plan, frozenset(bucketed), MappingProxyType(dict(stale or {})), policy)

    def table(self, op: str, platform: Platform | str, dtype: str | None, key: TableKeyValues = ()) -> TunedOp | None:
        """The tuned table's buckets for the op on the platform and dtype (and key, for an op keyed by its shape)."""
        return self.tables.get((op, str(platform), dtype or "", key))

    def keys(self, op: str, platform: Platform | str, dtype: str | None) -> tuple[TableKeyValues, ...]:
        """The keys the op's tuned tables and plan entries have on the platform and dtype, sorted (() alone for an
        op without a table key that is tuned or planned there)."""
        here = str(platform)
        found = {k for (name, where, d, k) in self.tables if (name, where, d) == (op, here, dtype)}
        plan = self.plan
        if plan is not None and plan.platform == here:
            found |= {k for (name, d, k) in plan.entries if (name, d) == (op, dtype)}
        return tuple(sorted(found))

    def key_miss(self, op: str, platform: Platform, dtype: str | None, key: TableKeyValues) -> str | None:
        """Why no tuned entry or plan entry decides for a call of this key, where the op has entries for other keys
        on the platform and dtype: 'tuned table for cpu float32 has no entry for E=8; it has E=4, E=16'."""
        known = self.keys(op, platform, dtype)
        if not key or not known or key in known:
            return None
        entries = [*self.tables.values(), *(self.plan.entries.values() if self.plan is not None else ())]
        names = next((e.key_names for e in entries if e.op == op and e.key_names), ())
        shown = ", ".join(key_text(names, k) for k in known[:8]) + (", ..." if len(known) > 8 else "")
        what = key_text(names, key) if names else str(key)
        subject = f"the tuned entries of op '{op}' on {platform} {dtype}"
        return f"{subject} have no key {what}; priority decides (they have {shown})"

    def packages(self, platform: Platform) -> tuple[str, ...] | None:
        """The distributions the tables for the platform depend on (torch, what their backends require), or None
        when no table for it records an environment to compare: then nothing need be detected."""
        here = str(platform)
        measured = [t for t in self.tables.values() if t.platform == here and t.measured_on is not None]
        return tuple(sorted({name for t in measured for name in t.packages})) if measured else None

    def staleness(self, table: TunedOp, here: Environment | None) -> str | None:
        """What changed since the entry was measured: its kernels' source (found at load), and with `here` (this
        machine's environment, where the call runs on it) the device and versions; None when nothing did."""
        reasons = [self.stale.get((table.op, table.platform, table.dtype, table.key))]
        if here is not None:
            reasons.append(environment_change(table, here))
        return "; ".join(r for r in reasons if r) or None

    def plan_entry(self, op: str, platform: Platform, dtype: str, key: TableKeyValues = ()) -> PlanEntry | None:
        """What the loaded plan pins for the op and dtype (and key), where it is a plan for this platform."""
        plan = self.plan
        return plan.entries.get((op, dtype, key)) if plan is not None and plan.platform == str(platform) else None

    def bucket_lists(
        self, op: str, platform: Platform, dtype: str, key: TableKeyValues = ()
    ) -> list[tuple[TunedBucket, ...]]:
        """The buckets of the op's tuned table and of its plan entry (a plan for this platform) for one dtype and
        key."""
        lists = []
        table = self.table(op, platform, dtype, key)
        if table is not None:
            lists.append(table.buckets)
        entry = self.plan_entry(op, platform, dtype, key)
        if entry is not None and entry.buckets:
            lists.append(entry.buckets)
        return lists

    def token_probes(
        self, op: str, platform: Platform, dtype: str | None, key: TableKeyValues = ()
    ) -> tuple[int | None, ...]:
        """One token count inside each segment of the op's buckets on the platform, dtype and key (None: not
        bucketed there), so that resolving at each probe resolves every backend a call could select."""
        lists = [] if dtype is None else self.bucket_lists(op, platform, dtype, key)
        return segments(lists).probes if lists else (None,)

    def picks(
        self,
        op: str,
        platform: Platform,
        dtype: str | None,
        tokens: int | None,
        here: Environment | None = None,
        key: TableKeyValues = (),
    ) -> list[Pick]:
        """The plan's pick, then the tuned table's, for one call (none without a dtype, or a token count where the
        entry is per bucket; for an op keyed by its shape, the entries of the call's `key`); `here`: this machine's
        environment, where the call runs on it. A stale entry's pick says so, and is ignored or refused
        (CatalogError) as the policy says."""
        found: list[Pick] = []
        if dtype is None:
            return found
        plan, entry = self.plan, self.plan_entry(op, platform, dtype, key)
        if plan is not None and entry is not None:
            pinned = f"plan {plan.path}" + (f" {entry.key_text}" if entry.key else "")
            if entry.backend is not None:
                found.append(Pick(entry.backend, pinned, pinned, pinned=True))
            elif tokens is not None and (bucket := covering(entry.buckets, tokens)) is not None:
                why = f"{pinned} {bucket.span}"
                found.append(Pick(bucket.backend, why, why, pinned=True))
        table = self.table(op, platform, dtype, key)
        if table is not None and tokens is not None and (bucket := covering(table.buckets, tokens)) is not None:
            label = f"tuned table for {table.label} {bucket.span}"
            stale = self.staleness(table, here)
            if stale is not None and self.policy is StalePolicy.ERROR:
                refusal = "tuned: {stale: error} refuses it"
                raise CatalogError(f"tuned entry {table.described} is stale: {stale}; {refusal}")
            why = label + origin(table) + (f" (stale: {stale})" if stale else "") + _timing(bucket)
            ignored = stale is not None and self.policy is StalePolicy.IGNORE
            found.append(Pick(bucket.backend, why, label, stale=stale, ignored=ignored, entry=table.described))
        return found


def origin(table: TunedOp) -> str:
    """' (from layer DIR's table, replacing layer shipped's)' for an entry that replaces an earlier layer's, else ''."""
    return f" (from layer {table.layer}'s table, replacing layer {table.replaced}'s)" if table.replaced else ""


def _timing(bucket: TunedBucket) -> str:
    """': triton 2.1 µs vs torch_compile 2.4 µs', as a tuned pick's reason ends."""
    own = bucket.medians_us.get(bucket.backend)
    if own is None:
        return ""
    others = sorted((t, n) for n, t in bucket.medians_us.items() if n != bucket.backend)
    return f": {bucket.backend} {own:.1f} µs" + "".join(f" vs {n} {t:.1f} µs" for t, n in others)


@dataclass(frozen=True)
class Segments:
    """Token counts cut where any bucket starts or ends: `bisect_left(edges, T)` is T's segment, and `probes`
    holds one token count inside each segment (its upper edge; the last segment's is the last edge + 1).
    `choosers[i]` names, per bucket list, the backend its bucket picks in segment i (None: no bucket there):
    segments alike there select alike, so each distinct one is resolved once."""

    edges: tuple[int, ...]
    probes: tuple[int, ...]
    choosers: tuple[tuple[str | None, ...], ...]


def segments(bucket_lists: Sequence[Sequence[TunedBucket]]) -> Segments:
    """The segments of every bucket list together (a plan's and a tuned table's), for one lookup per call:
    O(n log n) in the buckets (the edges sorted once, then one walk along each sorted list)."""
    lows = {b.low - 1 for bs in bucket_lists for b in bs}
    cuts = sorted(lows | {b.high for bs in bucket_lists for b in bs if b.high is not None})
    probes = [*cuts, (cuts[-1] if cuts else 0) + 1]  # a segment's upper edge lies inside it
    columns = [_backends_at(bs, probes) for bs in bucket_lists]
    choosers = tuple(tuple(column[index] for column in columns) for index in range(len(probes)))
    return Segments(tuple(cuts), tuple(probes), choosers)


def _backends_at(buckets: Sequence[TunedBucket], probes: Sequence[int]) -> list[str | None]:
    """The backend of the bucket covering each probe (None: none does); both ascending, so one pointer walks."""
    found: list[str | None] = []
    index = 0
    for probe in probes:
        while index < len(buckets) and (high := buckets[index].high) is not None and high < probe:
            index += 1
        bucket = buckets[index] if index < len(buckets) else None
        found.append(bucket.backend if bucket is not None and bucket.covers(probe) else None)
    return found


_F = TypeVar("_F")


@dataclass(frozen=True)
class BucketDispatch(Generic[_F]):
    """What a handle calls for one (device, dtype): `fns[bisect_left(edges, T)]`, T the leading dimension (a trace
    keeps the specs the same way)."""

    edges: tuple[int, ...]
    fns: tuple[_F, ...]


def dispatch_for(cut: Segments, resolve: Callable[[int], _F]) -> BucketDispatch[_F]:
    """Resolve each distinct segment once, through a probe token count; neighbours that resolve alike are merged.
    Selecting is far dearer than a bisect, so 30,000 buckets naming two backends cost two selections, not 30,000."""
    resolved: dict[tuple[str | None, ...], _F] = {}
    fns = []
    for probe, chooser in zip(cut.probes, cut.choosers):
        fn = resolved.get(chooser)
        if fn is None:
            fn = resolved[chooser] = resolve(probe)
        fns.append(fn)
    edges: list[int] = []
    merged = [fns[0]]
    for index in range(1, len(fns)):
        if fns[index] is not merged[-1]:  # else the edge between the two segments disappears
            edges.append(cut.edges[index - 1])
            merged.append(fns[index])
    return BucketDispatch(tuple(edges), tuple(merged))
