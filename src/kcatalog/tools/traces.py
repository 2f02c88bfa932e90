"""Trace files for the commands: read (checked against the schema, every problem located), merged when several
are given (the ranks of one job), printed (`kcatalog trace show`), counted per matrix cell (`report --trace`), and
the shapes that ran untuned, to time (`tune --from-trace`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CatalogError
from ..runtime.trace_file import TraceEntry, TraceRecord, merge
from .formats import plural, text_table

if TYPE_CHECKING:
    from ..platform import Platform
    from ..registry.catalog import Catalog
    from .timing import Job


def read_trace(path: str | Path) -> TraceRecord:
    """The trace in the file; CatalogError naming the file and each problem where it is."""
    import pydantic

    from ..validate.trace_schema import TraceFile

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"cannot read the trace {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CatalogError(f"{path}: not JSON: {exc}") from None
    try:
        TraceFile.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = [f"{path}: {_where(error['loc'])}: {error['msg']}" for error in exc.errors()]
        raise CatalogError(f"{path} is not a kcatalog trace:\n" + "\n".join(f"  {p}" for p in problems)) from None
    return TraceRecord.from_dict(data)


def _where(location: Sequence[int | str]) -> str:
    """('trace', 'entries', 0, 'calls') -> 'trace.entries[0].calls'."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "(top level)"


def read_traces(paths: Sequence[str | Path]) -> TraceRecord:
    """One record of every file given (several ranks' files add up)."""
    return merge([read_trace(path) for path in paths])


def show(record: TraceRecord, shown: int | None = 8) -> str:
    """The trace as `kcatalog trace show` prints it: a summary line, one row per entry (`shown` of its shapes;
    None: all), what decided, the fallbacks, notes."""
    processes = record.processes
    ranks = sorted({p.rank for p in processes if p.rank is not None})
    when = f", {min(p.started for p in processes)} to {max(p.ended for p in processes)}" if processes else ""
    lines = [
        f"trace of {plural(len(processes), 'process')}"
        + (f" (ranks {', '.join(map(str, ranks))})" if ranks else "")
        + when
        + (f"; catalog {', '.join(record.catalogs)}" if record.catalogs else "")
    ]
    if not record.entries:
        return "\n".join([*lines, "nothing ran"])
    rows = [["op", "platform", "dtype", "backend", "via", "calls", "calls by leading dimension (* untuned)"]]
    for entry in record.entries:
        rows.append(
            [
                entry.op,
                entry.platform,
                entry.dtype,
                entry.backend,
                entry.via.value,
                f"{entry.calls:,}",
                _shapes(entry, shown),
            ]
        )
    lines += ["", text_table(rows)]
    decided = [f"  {e.op} {e.platform} {e.dtype} {e.backend}: by {e.decided_by}" for e in record.entries]
    lines += ["", "decided by:", *dict.fromkeys(decided)]
    fallbacks = [
        f"  {e.op} {e.platform} {e.dtype}: {f.backend} {f.kind} ({f.reason}); {e.backend} ran"
        for e in record.entries
        for f in e.fallbacks
    ]
    if fallbacks:
        lines += ["", "fallbacks:", *dict.fromkeys(fallbacks)]
    lines += [f"note: {note}" for note in record.notes]
    untuned = untuned_shapes(record)
    calls = sum(e.calls for e in record.entries)
    entries = len(record.entries)
    summary = f"\n{entries} {'entry' if entries == 1 else 'entries'}, {plural(calls, 'call')}"
    count = sum(len(tokens) for tokens in untuned.values())
    if count:
        summary += f"; {plural(count, 'shape')} ran untuned (`kcatalog tune --from-trace` times them)"
    return "\n".join([*lines, summary])


def _shapes(entry: TraceEntry, shown: int | None) -> str:
    """'1:80 22:10*': calls at each leading dimension ('-': a 0-dimensional tensor), * where it ran untuned."""
    parts = [
        f"{'-' if s.tokens is None else s.tokens}:{s.calls:,}{'*' if s.bucket is None and s.tokens is not None else ''}"
        for s in entry.shapes
    ]
    more = 0 if shown is None else len(parts) - shown
    return " ".join(parts[:shown]) + (f" (+{more} more)" if more > 0 else "")


def usage(record: TraceRecord) -> dict[tuple[str, str, str], int]:
    """(op, backend, platform) -> the calls it ran: what `report --trace` colours."""
    calls: dict[tuple[str, str, str], int] = {}
    for entry in record.entries:
        key = (entry.op, entry.backend, entry.platform)
        calls[key] = calls.get(key, 0) + entry.calls
    return calls


def untuned_shapes(record: TraceRecord, platform: str | None = None) -> dict[tuple[str, str, str], tuple[int, ...]]:
    """(op, platform, dtype) -> the leading dimensions that ran outside every tuned bucket (on `platform`)."""
    found: dict[tuple[str, str, str], set[int]] = {}
    for entry in record.entries:
        if platform is None or entry.platform == platform:
            found.setdefault((entry.op, entry.platform, entry.dtype), set()).update(entry.untuned)
    return {key: tuple(sorted(tokens)) for key, tokens in sorted(found.items()) if tokens}


@dataclass(frozen=True)
class TraceJobs:
    """What `tune --from-trace` times: a job per backend at each shape that ran untuned, and what it leaves out."""

    jobs: list[Job]
    notes: list[str]
    wanted: Mapping[tuple[str, str], tuple[int, ...]]  # (op, dtype) -> the token counts to time


def jobs_from_trace(
    catalog: Catalog,
    record: TraceRecord,
    ops: Sequence[str],
    *,
    platform: Platform,
    dtypes: Sequence[str] = (),
    backends: Sequence[str] = (),
) -> TraceJobs:
    """The tuning jobs for exactly the shapes the trace ran untuned on `platform`, for the ops (and dtypes) asked."""
    from .tuning import tune_jobs

    here = str(platform)
    jobs: list[Job] = []
    notes: list[str] = []
    wanted: dict[tuple[str, str], tuple[int, ...]] = {}
    elsewhere = sorted({e.platform for e in record.entries if e.platform != here})
    if elsewhere:
        notes.append(f"the trace's calls on {', '.join(elsewhere)} are not timed here ({here})")
    for (op, _, dtype), tokens in untuned_shapes(record, here).items():
        if op not in catalog:
            notes.append(f"{op}: in the trace, not in this catalog; not timed")
            continue
        if op not in ops or (dtypes and dtype not in dtypes):
            continue
        found, said = tune_jobs(catalog, [op], platform=platform, dtypes=[dtype], buckets=tokens, backends=backends)
        jobs += found
        notes += [note for note in said if note not in notes]
        if found:
            wanted[(op, dtype)] = tokens
    return TraceJobs(jobs, notes, wanted)
