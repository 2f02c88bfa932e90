"""A trace as a value and as a file: per op, platform, dtype and backend, the calls at each leading dimension of the
dispatch argument, the fallbacks and whether a tuned bucket covered the shape (TraceRecord); its JSON (a `kcatalog:
1` document, schemas/trace.v1.json), merging several, and writing one where other processes write too.

Every write merges into the trace the file already holds, under a lock beside it, so that the ranks of one job
writing one file add up instead of clobbering each other; `{pid}` and `{rank}` in the path give a file each."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..errors import CatalogError
from ..write.atomic import write_file

VERSION = 1


class Via(str, Enum):
    """How calls were recorded: what a count means."""

    HANDLE = "handle"  # an op handle, called eagerly: each call
    TORCH_OP = "torch op"  # the op's torch op: called eagerly, or as one node of a compiled graph, each run
    COMPILED = "compiled"  # torch.compile traced into the backend (register_torch_ops(traced=True)): each trace of it
    CAPTURED = "cuda graph capture"  # called while a CUDA graph was captured: the capture, not its replays


# What `kcatalog trace show` says under a trace holding calls recorded each way but the plain one.
NOTES: Mapping[Via, str] = {
    Via.TORCH_OP: "'torch op' counts the op's torch op: each eager call, and each run of a compiled graph in which "
    "the op is one node",
    Via.COMPILED: "'compiled' counts the times torch.compile traced the backend into a graph (a compilation may "
    "trace it more than once), not the graph's runs: a compiled graph records when it is traced",
    Via.CAPTURED: "'cuda graph capture' counts the calls made while a CUDA graph was captured: its replays run no "
    "Python and record nothing",
}


@dataclass(frozen=True)
class Fallback:
    """A backend ranked above the one that ran which could not run this call: its import failed, or its gate."""

    backend: str
    kind: str  # a RejectKind's value: 'import failed', 'gate'
    reason: str


@dataclass(frozen=True)
class TraceShape:
    """Calls at one leading dimension of the dispatch argument (None: a 0-dimensional tensor), and the tuned
    bucket covering it (None: no tuned table covers it, so it ran untuned)."""

    tokens: int | None
    calls: int
    bucket: tuple[int, int | None] | None


@dataclass(frozen=True)
class TraceEntry:
    """One op on one platform and dtype, run by one backend, decided one way, recorded one way."""

    op: str
    platform: str
    dtype: str
    backend: str
    via: Via
    decided_by: str
    fallbacks: tuple[Fallback, ...]
    shapes: tuple[TraceShape, ...]  # by token count

    @property
    def calls(self) -> int:
        """Every call of the entry, at every shape."""
        return sum(shape.calls for shape in self.shapes)

    @property
    def untuned(self) -> tuple[int, ...]:
        """The token counts that ran outside every tuned bucket."""
        return tuple(s.tokens for s in self.shapes if s.bucket is None and s.tokens is not None)

    @property
    def key(self) -> tuple[Any, ...]:
        """What two entries must share to be one: all but their shapes."""
        return (self.op, self.platform, self.dtype, self.backend, self.via, self.decided_by, self.fallbacks)


@dataclass(frozen=True)
class TraceProcess:
    """A process whose calls a trace holds."""

    pid: int
    rank: int | None  # the RANK environment variable (torchrun sets it), where set
    started: str  # ISO 8601, UTC
    ended: str


@dataclass(frozen=True)
class TraceRecord:
    """What ran while a trace was open: entries sorted by op, platform, dtype, backend; the processes and catalog
    digests it comes from; notes on what its counts mean."""

    entries: tuple[TraceEntry, ...]
    processes: tuple[TraceProcess, ...] = ()
    catalogs: tuple[str, ...] = ()

    @property
    def notes(self) -> tuple[str, ...]:
        """What the counts of calls recorded other than by a handle mean."""
        present = {entry.via for entry in self.entries}
        return tuple(text for via, text in NOTES.items() if via in present)

    def entry(self, op: str, dtype: str | None = None) -> list[TraceEntry]:
        """The entries of one op (and dtype)."""
        return [e for e in self.entries if e.op == op and (dtype is None or e.dtype == dtype)]

    def as_dict(self) -> dict[str, Any]:
        """The record as the trace file's JSON holds it."""
        return {
            "kcatalog": VERSION,
            "trace": {
                "processes": [vars(p) for p in self.processes],
                "catalogs": list(self.catalogs),
                "notes": list(self.notes),
                "entries": [_entry_dict(e) for e in self.entries],
            },
        }

    def to_json(self) -> str:
        """The file's text: one line per process and per entry, so that a diff of two traces reads by entry."""
        data = self.as_dict()
        body = data["trace"]

        def items(name: str) -> str:
            lines = [json.dumps(item, ensure_ascii=False) for item in body[name]]
            return "[\n" + ",\n".join(f"   {line}" for line in lines) + "\n  ]" if lines else "[]"

        parts = ",\n".join(f'  "{name}": {items(name)}' for name in body)
        return f'{{\n "kcatalog": {data["kcatalog"]},\n "trace": {{\n{parts}\n }}\n}}\n'

    @classmethod
    def from_dict(cls, data: Any) -> TraceRecord:
        """A record from a trace file's JSON; ValueError naming what is wrong where (the CLI validates against the
        schema first, for located messages; this is the check the runtime makes before merging into a file)."""
        if not isinstance(data, dict) or data.get("kcatalog") != VERSION or not isinstance(data.get("trace"), dict):
            raise ValueError("not a kcatalog trace (no `kcatalog: 1` and `trace:`)")
        body = data["trace"]
        try:
            processes = tuple(TraceProcess(**p) for p in body.get("processes", ()))
            entries = tuple(_entry(e) for e in body["entries"])
            catalogs = tuple(str(c) for c in body.get("catalogs", ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a kcatalog trace ({type(exc).__name__}: {exc})") from None
        return cls(entries, processes, catalogs)


def _entry_dict(entry: TraceEntry) -> dict[str, Any]:
    return {
        "op": entry.op,
        "platform": entry.platform,
        "dtype": entry.dtype,
        "backend": entry.backend,
        "via": entry.via.value,
        "decided_by": entry.decided_by,
        "fallbacks": [vars(f) for f in entry.fallbacks],
        "calls": entry.calls,
        "shapes": [
            {"tokens": s.tokens, "calls": s.calls, "bucket": None if s.bucket is None else list(s.bucket)}
            for s in entry.shapes
        ],
    }


def _entry(data: dict[str, Any]) -> TraceEntry:
    shapes = []
    for shape in data["shapes"]:
        bucket = shape["bucket"]
        if bucket is not None:
            low, high = bucket
            bucket = (int(low), None if high is None else int(high))
        tokens = shape["tokens"]
        shapes.append(TraceShape(None if tokens is None else int(tokens), int(shape["calls"]), bucket))
    return TraceEntry(
        str(data["op"]),
        str(data["platform"]),
        str(data["dtype"]),
        str(data["backend"]),
        Via(data["via"]),
        str(data["decided_by"]),
        tuple(Fallback(str(f["backend"]), str(f["kind"]), str(f["reason"])) for f in data["fallbacks"]),
        tuple(shapes),
    )


def merge(records: Iterable[TraceRecord]) -> TraceRecord:
    """One record of several (ranks, runs): entries alike add their calls shape by shape."""
    shapes: dict[tuple[Any, ...], dict[int | None, TraceShape]] = {}
    first: dict[tuple[Any, ...], TraceEntry] = {}
    processes: dict[tuple[int, int | None], TraceProcess] = {}
    catalogs: list[str] = []
    for record in records:
        for process in record.processes:  # one process's several traces: from its first start to its last end
            known = processes.get((process.pid, process.rank))
            if known is not None:
                process = TraceProcess(
                    process.pid, process.rank, min(known.started, process.started), max(known.ended, process.ended)
                )
            processes[(process.pid, process.rank)] = process
        catalogs += [c for c in record.catalogs if c not in catalogs]
        for entry in record.entries:
            first.setdefault(entry.key, entry)
            by_tokens = shapes.setdefault(entry.key, {})
            for shape in entry.shapes:
                seen = by_tokens.get(shape.tokens)
                calls = shape.calls + (seen.calls if seen else 0)
                by_tokens[shape.tokens] = TraceShape(shape.tokens, calls, shape.bucket)
    entries = [
        dataclasses.replace(entry, shapes=tuple(sorted(shapes[key].values(), key=_tokens_order)))
        for key, entry in first.items()
    ]
    return TraceRecord(tuple(sorted(entries, key=entry_order)), tuple(processes.values()), tuple(catalogs))


def entry_order(entry: TraceEntry) -> tuple[Any, ...]:
    return (entry.op, entry.platform, entry.dtype, entry.backend, entry.via.value, entry.decided_by)


def _tokens_order(shape: TraceShape) -> tuple[bool, int]:
    return (shape.tokens is not None, shape.tokens or 0)


# -- files ------------------------------------------------------------------------------------------------------


def expand_path(template: str | os.PathLike[str]) -> Path:
    """The file a process writes: `{pid}` is its process id, `{rank}` the RANK environment variable (torchrun
    sets it; 0 where unset)."""
    text = os.fspath(template)
    if "{" not in text:
        return Path(text)
    try:
        return Path(text.format(pid=os.getpid(), rank=os.environ.get("RANK", "0")))
    except (KeyError, IndexError, ValueError) as exc:
        raise CatalogError(f"trace path {text!r}: only {{pid}} and {{rank}} can be filled in ({exc})") from None


def current_rank() -> int | None:
    rank = os.environ.get("RANK", "")
    return int(rank) if rank.isdigit() else None


def write_trace(path: Path, record: TraceRecord) -> TraceRecord:
    """Merge `record` into the trace at `path` (a new file, and its directory, where there is none), under a lock
    that other processes writing there take too; the file is replaced whole. The merged record; CatalogError where
    `path` holds something other than a trace (it is left as it was) or cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            merged = record
            if path.exists():
                try:
                    merged = merge([TraceRecord.from_dict(json.loads(path.read_text(encoding="utf-8"))), record])
                except (ValueError, UnicodeDecodeError) as exc:  # json's errors are ValueErrors too
                    raise CatalogError(f"{path} holds no kcatalog trace ({exc}); not overwritten") from None
            write_file(path, merged.to_json())  # whole or not at all: a reader never sees half a trace
    except OSError as exc:
        raise CatalogError(f"cannot write the trace {path}: {exc.strerror or exc}") from None
    return merged


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on a hidden file beside `path` (never removed: a removed lock file lets two
    processes lock two different files). Where fcntl is unavailable (Windows), no lock: use `{pid}` there."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on the platforms CI runs
        yield
        return
    descriptor = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock
