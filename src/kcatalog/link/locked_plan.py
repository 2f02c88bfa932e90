"""A plan file read, validated and linked against the ops (KC240-KC244)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import Diagnostic, Location, Severity, did_you_mean, listing
from ..model import LockedPlan, OpInfo, PlanEntry, TableKeyValues, TunedBucket
from ..platform import DEVICES, Platform
from ..read.files import CatalogFile, PathLike, read_sources
from ..validate.tables import BucketDecl, KeyedPlanDecl
from .tuned import key_values, order_problem

_Entry = tuple[tuple[int, ...], Mapping[str, int] | None, str | None, tuple[BucketDecl, ...]]


def _entries(chosen: str | tuple[BucketDecl, ...] | tuple[KeyedPlanDecl, ...]) -> list[_Entry]:
    """(path below the dtype, key or None, backend or None, buckets) of each entry of one op and dtype."""
    if isinstance(chosen, str):
        return [((), None, chosen, ())]
    keyed: list[_Entry] = [
        ((i,), e.key, e.backend, e.buckets) for i, e in enumerate(chosen) if isinstance(e, KeyedPlanDecl)
    ]
    return keyed or [((), None, None, tuple(b for b in chosen if isinstance(b, BucketDecl)))]


def read_plan(
    path: PathLike,
    ops: Mapping[str, OpInfo],
    digest: str,
    *,
    strict: bool,
    diagnostics: Diagnostics,
    devices: Sequence[str] = DEVICES,
) -> LockedPlan | None:
    """The plan at `path`, linked to `ops`; None (with diagnostics) when it cannot be read or names what is not
    there (an op, a backend, a platform of none of the catalog's `devices`). A plan made from other catalog
    contents is a warning (an error when `strict`)."""
    from ..read.yaml_nodes import parse_yaml
    from ..validate.tables import Plan
    from ..validate.validator import validate

    given = Path(path)
    if not given.is_file():
        diagnostics.error(codes.PATH_NOT_FOUND, f"plan '{given}' does not exist")
        return None
    sources = read_sources([CatalogFile(given.resolve(), is_settings=False)], diagnostics)
    if not sources:
        return None
    source = sources[0]
    parsed = parse_yaml(source.shown, source.text)
    if isinstance(parsed, Diagnostic):
        diagnostics.add(parsed)
        return None
    validated = validate(parsed, is_settings=False, diagnostics=diagnostics)
    if validated is None:
        return None
    if not isinstance(validated.model, Plan):
        where = validated.locations.value(())
        diagnostics.error(codes.MISSING_FIELD, "missing required field 'plan': not a plan file", where)
        return None
    body = validated.model.plan

    def at(*loc: object, key: bool = False) -> Location:
        path = ("plan", *loc)
        return validated.locations.key(path) if key else validated.locations.value(path)

    start = len(diagnostics)
    try:
        platform = Platform.parse(body.platform, devices)  # 'cuda:9.00' as cuda:9.0, what the machine matches
    except ValueError as exc:
        diagnostics.error(codes.INVALID_VALUE, str(exc), at("platform"))
        platform = None
    if body.digest != digest:
        diagnostics.add(
            Diagnostic(
                codes.PLAN_DIGEST_DIFFERS,
                f"plan was made from a catalog with digest {body.digest}; this catalog's is {digest} "
                f"(regenerate it with `kcatalog plan`)",
                at("digest"),
                Severity.ERROR if strict else Severity.WARNING,
            )
        )
    entries: dict[tuple[str, str, TableKeyValues], PlanEntry] = {}
    for op_id, by_dtype in body.ops.items():
        info = ops.get(op_id)
        if info is None:
            message = f"plan pins unknown op '{op_id}'{did_you_mean(op_id, ops)}"
            diagnostics.error(codes.PLAN_UNKNOWN_OP, message, at("ops", op_id, key=True))
            continue
        for dtype, chosen in by_dtype.items():
            for below, key, backend, buckets in _entries(chosen):
                key_at = at("ops", op_id, dtype, *below, *(("key",) if key is not None else ()))
                values = key_values(info, key, key_at, diagnostics, codes.PLAN_KEY)
                if values is None:
                    continue
                names = [backend] if backend is not None else [b.backend for b in buckets]
                for index, name in enumerate(names):
                    if name not in info.backends:
                        where = (
                            at("ops", op_id, dtype, *below, *(("backend",) if key is not None else ()))
                            if backend is not None
                            else at("ops", op_id, dtype, *below, *(("buckets",) if key is not None else ()), index)
                        )
                        message = (
                            f"plan pins backend '{name}' of op '{op_id}', which has no such backend"
                            f"{did_you_mean(name, info.backends)}; it has {listing(info.backends)}"
                        )
                        diagnostics.error(codes.PLAN_UNKNOWN_BACKEND, message, where)
                bucket_at = ("ops", op_id, dtype, *below, *(("buckets",) if key is not None else ()))
                linked = tuple(
                    TunedBucket(b.tokens[0], b.tokens[1], b.backend, MappingProxyType({}), at(*bucket_at, i))
                    for i, b in enumerate(buckets)
                )
                order = order_problem(linked)  # a bucket lookup bisects: out of order, it would silently miss
                if order is not None:
                    diagnostics.error(codes.PLAN_BUCKETS, order[0], order[1])
                entries[(op_id, dtype, values)] = PlanEntry(
                    op_id, dtype, backend, linked, at("ops", op_id, dtype, *below), key=values, key_names=info.key_names
                )
    if diagnostics.errors_since(start) or platform is None:
        return None
    return LockedPlan(source.shown, str(platform), body.digest, MappingProxyType(entries))
