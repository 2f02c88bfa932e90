"""Startup: every op resolved and imported now (`prepare`), and ranks that agree: every rank's resolved selection
(plan, imports that fell back, overrides) compared through torch.distributed, the engine's own process group
(NCCL on GPUs, gloo on CPUs). No transport of our own."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from ..errors import CatalogError, InconsistentSelectionError, RejectKind
from ..model import KernelSpec, TableKeyValues, key_text
from ..platform import Platform
from .room import Runtime


def prepare(runtime: Runtime, platform: Platform | str | None, ops: Iterable[str] | None) -> dict[str, KernelSpec]:
    """Resolve and import every op (or `ops`) for each declared dtype and each bucket of a tuned table or the plan;
    op -> the spec selected for it on the platform."""
    chosen = {}
    here = runtime.parse_platform(platform)
    value = runtime.value
    for op in value.ops() if ops is None else ops:
        for dtype in value.info(op).dtypes or (None,):  # an op without dtypes: any, resolved once
            for key in value.tuning.keys(op, here, dtype) or ((),):  # each key of an op keyed by its shape
                for tokens in value.tuning.token_probes(op, here, dtype, key):  # each bucket's backend, where tuned
                    runtime.resolve_spec(op, here, dtype, tokens=tokens, key=key or None)
        chosen[op] = runtime.select(op, platform).require()
    return chosen


def resolved_selection(runtime: Runtime, platform: Platform | None = None) -> dict[str, str]:
    """Op -> what this process runs for it, per dtype (and bucket), with the reason, e.g.
    'bfloat16: triton (catalog default priority)'. Resolves, so a failed import shows as its fallback."""
    platform = platform or runtime.platform()
    value = runtime.value
    summary = {}
    for op in value.ops():
        parts = []
        names = value.info(op).key_names
        for dtype in value.info(op).dtypes or (None,):  # an op without dtypes: any, resolved once
            for key in value.tuning.keys(op, platform, dtype) or ((),):  # each key of an op keyed by its shape
                for tokens in value.tuning.token_probes(op, platform, dtype, key):  # each bucket of a table or plan
                    where = " ".join(part for part in (dtype or "any dtype", key_text(names, key)) if part) + (
                        "" if tokens is None else f" T={tokens}"
                    )
                    parts.append(f"{where}: {_chosen(runtime, op, platform, dtype, tokens, key)}")
        summary[op] = "; ".join(parts)
    return summary


def _chosen(
    runtime: Runtime, op: str, platform: Platform, dtype: str | None, tokens: int | None, key: TableKeyValues = ()
) -> str:
    try:
        runtime.resolve_spec(op, platform, dtype, tokens=tokens, key=key or None)
    except CatalogError as exc:
        return f"nothing ({exc})"
    selection = runtime.select(op, platform, dtype, tokens=tokens, key=key or None)
    chosen = selection.chosen.backend if selection.chosen else "nothing"
    fell_back = [r for r in selection.rejected if r.kind is RejectKind.IMPORT_FAILED]
    fallback = "".join(f", after {r.backend} {r.reason}" for r in fell_back)
    decided_by = selection.decided_by
    plan = runtime.value.tuning.plan
    if plan is not None:  # where each rank keeps the plan file is no difference in what it runs
        decided_by = decided_by.replace(f"plan {plan.path}", "plan")
    return f"{chosen} (by {decided_by}{fallback})"


def check_consistent(runtime: Runtime, group: Any = None) -> None:
    """All-gather a digest of this rank's resolved selection; when ranks differ, gather the selections and raise
    InconsistentSelectionError naming each op that differs and what each rank chose. Collective: every rank of
    the group must call it."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise CatalogError("check_consistent needs an initialised torch.distributed process group")
    summary = resolved_selection(runtime)
    digest = hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest()[:16]
    world = dist.get_world_size(group)
    digests: list[Any] = [None] * world
    dist.all_gather_object(digests, digest, group=group)
    if len(set(digests)) == 1:
        return
    summaries: list[Any] = [None] * world
    dist.all_gather_object(summaries, summary, group=group)  # only when they differ: the details, once
    ops = sorted(set().union(*(s.keys() for s in summaries)))
    differing = {
        op: [s.get(op, "not in this rank's catalog") for s in summaries]
        for op in ops
        if len({s.get(op) for s in summaries}) > 1
    }
    raise InconsistentSelectionError(differing)
