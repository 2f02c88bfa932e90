"""Tuned tables linked against the ops: each op x platform x dtype's buckets (per key, for an op keyed by its
shape: `table_key`), checked and located (KC230-KC234, KC237), with what their timings depend on, layered as every
file kind is: a later layer's entry replaces an earlier one's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import Location, did_you_mean, listing
from ..model import BrokenOps, CatalogLayer, Environment, OpInfo, TableKeyValues, TunedBucket, TunedOp, key_text
from ..platform import DEVICES, Platform
from ..validate.tables import BucketDecl, KeyedBucketsDecl, ProvenanceDecl, TunedTable
from ..validate.validator import ValidatedFile
from .merged_settings import layer_name


def link_tuned(
    files: Sequence[ValidatedFile],
    ops: Mapping[str, OpInfo],
    broken: BrokenOps,
    diagnostics: Diagnostics,
    devices: Sequence[str] = DEVICES,
    layers: Sequence[CatalogLayer] = (),
) -> tuple[TunedOp, ...]:
    """Every table's choices, in file order; what is wrong is added to `diagnostics` and left out, and so are the
    choices for `broken` ops, whose own errors are reported where they are declared. A later layer's table for an
    op x platform x dtype replaces an earlier layer's (the entry names the layer it replaces); two in one layer
    are an error. `devices`: the device kinds the catalog knows (the built-in ones and those its settings
    declare)."""
    linked: dict[Key, TunedOp] = {}
    seen: dict[Key, tuple[int, Location]] = {}
    for file in files:
        if isinstance(file.model, TunedTable):
            _link_table(file, file.model, ops, broken, _Seen(seen, linked, layers), diagnostics, devices)
    return tuple(linked.values())


Key = tuple[str, str, str, TableKeyValues]  # op, platform, dtype, key (() for an op without a table key)


class _Seen:
    """The entries linked so far, by op x platform x dtype, and where each key was first met in which layer."""

    def __init__(
        self, first: dict[Key, tuple[int, Location]], linked: dict[Key, TunedOp], layers: Sequence[CatalogLayer]
    ):
        self.first = first
        self.linked = linked
        self.layers = layers

    def claim(self, key: Key, layer: int, where: Location) -> tuple[bool, str | None]:
        """Whether `key` may be linked from this table, and the name of the earlier layer whose entry it replaces;
        a second table for it in the same layer is an error (reported by the caller)."""
        earlier = self.first.get(key)
        if earlier is not None and earlier[0] == layer:
            return False, None
        self.first[key] = (layer, where)
        self.linked.pop(key, None)  # an earlier layer's entry, replaced (or not linked for its errors)
        return True, None if earlier is None else layer_name(self.layers, earlier[0])


def _link_table(
    file: ValidatedFile,
    table: TunedTable,
    ops: Mapping[str, OpInfo],
    broken: BrokenOps,
    seen: _Seen,
    diagnostics: Diagnostics,
    devices: Sequence[str],
) -> None:
    body = table.tuned

    def at(*loc: Any, key: bool = False) -> Location:
        path = ("tuned", *loc)
        return file.locations.key(path) if key else file.locations.value(path)

    try:
        platform = Platform.parse(body.platform, devices)
    except ValueError as exc:
        diagnostics.error(codes.INVALID_VALUE, str(exc), at("platform"))
        return
    measured = body.provenance.capability
    if measured is not None and measured != platform.arch:  # 'cuda' alone would match no machine's lookup
        diagnostics.error(
            codes.TUNED_PLATFORM_MISMATCH,
            f"table claims platform {platform} but was measured on {platform.device}:{measured} "
            f"({body.provenance.device}); tune again on {platform} or fix 'platform'",
            at("platform"),
        )
        return
    environment = _environment(body.provenance)
    layer = layer_name(seen.layers, file.layer)
    for op_id, by_dtype in body.ops.items():
        info = ops.get(op_id)
        if info is None:
            if not broken.covers(op_id):
                diagnostics.error(
                    codes.TUNED_UNKNOWN_OP,
                    f"tuned table names unknown op '{op_id}'{did_you_mean(op_id, ops)}",
                    at("ops", op_id, key=True),
                )
            continue
        kernels = body.kernels.get(op_id)
        for dtype, listed in by_dtype.items():
            for entry_path, key, buckets in _entries(listed):
                where = at("ops", op_id, dtype, *entry_path, key=True)
                key_at = at("ops", op_id, dtype, *entry_path, *(("key",) if key is not None else ()))
                values = key_values(info, key, key_at, diagnostics, codes.TUNED_KEY)
                if values is None:
                    continue
                tuned = _Entry(op_id, str(platform), dtype, values)
                claimed, replaced = seen.claim(tuned.key, file.layer, where)
                if not claimed:
                    diagnostics.error(
                        codes.TUNED_BUCKETS,
                        f"op '{op_id}' on {tuned.label(info)} is tuned twice (first at {seen.first[tuned.key][1]})",
                        where,
                    )
                    continue
                problems = len(diagnostics)
                if info.dtypes is not None and dtype not in info.dtypes:
                    diagnostics.error(
                        codes.TUNED_NOT_ELIGIBLE,
                        f"op '{op_id}' does not declare dtype {dtype} (it has {', '.join(info.dtypes or ())})",
                        where,
                    )
                    continue
                kept = []
                for index, bucket in enumerate(buckets):
                    bucket_path = ("ops", op_id, dtype, *entry_path, *(("buckets",) if key else ()), index)
                    problem = _bucket_problem(bucket, info, platform, dtype)
                    if problem is not None:
                        code, message, field = problem
                        diagnostics.error(code, message, at(*bucket_path, *field))
                    else:
                        kept.append(_bucket(bucket, at(*bucket_path)))
                order = order_problem(kept)
                if order is not None:
                    diagnostics.error(codes.TUNED_BUCKETS, order[0], order[1])
                if len(diagnostics) == problems:
                    linked = TunedOp(
                        op_id, str(platform), dtype, tuple(kept), where, layer, replaced, environment,
                        key=values, key_names=info.key_names,
                    )  # fmt: skip
                    timed = linked.timed
                    packages = {"torch"} | {d for name in timed for d in info.backends[name].requires}
                    seen.linked[tuned.key] = dataclasses.replace(
                        linked,
                        kernels=None
                        if kernels is None
                        else MappingProxyType({n: kernels[n] for n in timed if n in kernels}),
                        packages=tuple(sorted(packages)),
                    )


@dataclass(frozen=True)
class _Entry:
    """One entry of a table: op, platform, dtype and key (() for an op without a table key)."""

    op: str
    platform: str
    dtype: str
    values: TableKeyValues

    @property
    def key(self) -> Key:
        return (self.op, self.platform, self.dtype, self.values)

    def label(self, info: OpInfo) -> str:
        return " ".join(part for part in (self.platform, self.dtype, key_text(info.key_names, self.values)) if part)


def _entries(
    listed: tuple[BucketDecl, ...] | tuple[KeyedBucketsDecl, ...],
) -> list[tuple[tuple[int, ...], Mapping[str, int] | None, tuple[BucketDecl, ...]]]:
    """(path below the dtype, key or None, buckets) of each entry of one dtype: the dtype's own buckets, or one
    entry per key."""
    if listed and isinstance(listed[0], KeyedBucketsDecl):
        return [((index, ), group.key, group.buckets) for index, group in enumerate(listed)
                if isinstance(group, KeyedBucketsDecl)]  # fmt: skip
    return [((), None, tuple(b for b in listed if isinstance(b, BucketDecl)))]


def key_values(
    info: OpInfo, key: Mapping[str, int] | None, where: Location, diagnostics: Diagnostics, code: str
) -> TableKeyValues | None:
    """The entry's key as values in the op's `table_key` order (() for an op without one); None, with an error,
    where the entry gives other sizes than the op's key names, or a key to an op that declares none."""
    names = info.key_names
    if key is None and not names:
        return ()
    what = "tuned entry" if code == codes.TUNED_KEY else "plan entry"
    if key is None:
        message = f"op '{info.id}' is tuned per {', '.join(names)} (its table_key): each {what} gives key: {{...}}"
        diagnostics.error(code, message, where)
        return None
    if not names:
        message = f"{what} gives a key ({', '.join(key)}), but op '{info.id}' declares no table_key"
        diagnostics.error(code, message, where)
        return None
    if set(key) != set(names):
        missing, extra = [n for n in names if n not in key], [n for n in key if n not in names]
        parts = [f"lacks {', '.join(missing)}"] if missing else []
        parts += [f"gives {', '.join(extra)}, not in it{did_you_mean(extra[0], names)}"] if extra else []
        message = f"{what} key of op '{info.id}' {' and '.join(parts)} (its table_key: {', '.join(names)})"
        diagnostics.error(code, message, where)
        return None
    return tuple(key[name] for name in names)


def _environment(provenance: ProvenanceDecl) -> Environment:
    """What the table's provenance says its timings depend on besides the kernels' source."""
    versions: dict[str, str | None] = dict(provenance.packages)
    for name, version in (("torch", provenance.torch), ("triton", provenance.triton)):
        if version is not None:
            versions[name] = version
    return Environment(provenance.device, provenance.sms, MappingProxyType(versions))


def _bucket(bucket: BucketDecl, where: Location) -> TunedBucket:
    low, high = bucket.tokens
    return TunedBucket(low, high, bucket.backend, MappingProxyType(dict(bucket.medians_us)), where)


def _bucket_problem(
    bucket: BucketDecl, info: OpInfo, platform: Platform, dtype: str
) -> tuple[str, str, tuple[str, ...]] | None:
    """What is wrong with one bucket's backends: (code, message, where in the bucket), or None."""
    for name, field in [(bucket.backend, ("backend",)), *((n, ("medians_us", n)) for n in bucket.medians_us)]:
        if name not in info.backends:
            return (
                codes.TUNED_UNKNOWN_BACKEND,
                f"op '{info.id}' has no backend '{name}'{did_you_mean(name, info.backends)}; "
                f"it has {listing(info.backends)}",
                field,
            )
    spec = info.backends[bucket.backend]
    # Capabilities and dtypes only: whether its distributions are installed is a question for the machine that runs.
    reason = platform.mismatch(spec.capabilities)
    if reason is None and spec.dtypes is not None and dtype not in spec.dtypes:
        reason = f"does not support {dtype} (supports {', '.join(spec.dtypes)})"
    if reason is not None:
        return (
            codes.TUNED_NOT_ELIGIBLE,
            f"backend '{bucket.backend}' of op '{info.id}' cannot run on {platform} {dtype}: {reason}",
            ("backend",),
        )
    return None


def order_problem(buckets: Sequence[TunedBucket]) -> tuple[str, Location] | None:
    """The first bucket out of order or overlapping the one before it."""
    for before, after in zip(buckets, buckets[1:]):
        if after.low < before.low:
            return f"buckets are not sorted: {after.span} comes after {before.span}", after.location
        if before.high is None or after.low <= before.high:
            return f"bucket {after.span} overlaps {before.span} before it", after.location
    return None
