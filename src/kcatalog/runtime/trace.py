"""Recording what ran (`catalog.trace()`, KCATALOG_TRACE): while a trace is open, each op handle and torch op
implementation counts its calls by site (device, dtype, and whether a CUDA graph is being captured) and by the
dispatch argument's leading dimension; what each shape ran and why is asked of the runtime once, when a snapshot
first finds it counted.

The untraced code is left exactly as it is: every dispatching function the runtime generates has a recording twin,
swapped in as its `__code__` when the first trace opens and back when the last one closes. Off, tracing costs a
call nothing; on, a call pays for its count (benchmarks/dispatch_overhead.py measures both)."""

from __future__ import annotations

import bisect
import datetime
import sys
import threading
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import RejectKind
from ..model import KernelSpec, TunedBucket
from .trace_file import Fallback, TraceEntry, TraceProcess, TraceRecord, TraceShape, Via, current_rank, merge

if TYPE_CHECKING:
    from ..select.selection import Selection

# The rejections that make a call fall back past a backend ranked above the one that ran.
_FALLBACK_KINDS = (RejectKind.IMPORT_FAILED, RejectKind.GATE)


@dataclass(frozen=True)
class Chosen:
    """What a call of one shape ran, as the trace reports it: where, which backend, why, past which fallbacks,
    and the tuned bucket that covered it (None: none did)."""

    platform: str
    backend: str
    decided_by: str
    fallbacks: tuple[Fallback, ...]
    bucket: tuple[int, int | None] | None


def chosen(selection: Selection, backend: str, bucket: TunedBucket | None) -> Chosen:
    """The trace's view of a selection whose call ran `backend`."""
    ranked = selection.order[: selection.order.index(backend)] if backend in selection.order else ()
    fallbacks = tuple(
        Fallback(r.backend, r.kind.value, r.reason)
        for r in selection.rejected
        if r.kind in _FALLBACK_KINDS and r.backend in ranked
    )
    span = None if bucket is None else (bucket.low, bucket.high)
    return Chosen(str(selection.platform), backend, selection.decided_by, fallbacks, span)


def tokens_of(tensor: Any) -> int | None:
    """The leading dimension a call is recorded at: None for a 0-dimensional tensor, or a symbolic size."""
    shape = tensor.shape
    first = shape[0] if len(shape) else None
    return first if type(first) is int else None


# A site counts calls at leading dimensions 1.._LISTED in a list indexed by the dimension (an increment at an index
# is cheaper than at a dict's key); the list starts this long and grows on demand. Index 0 holds None, so that a
# leading dimension of 0 (len() of a 0-dimensional tensor is 0 too) fails the increment and is counted the slow way.
_FIRST_LISTED = 1024
_LISTED = 1 << 15


class Site:
    """One place a dispatching function sends calls (an op on a device type and dtype, one way of recording):
    what it calls (`fn`, or per bucket segment `fns` cut at `edges`), and the calls counted per leading dimension.

    `counts[tokens] += 1` is the per-call count, at an index that exists (the GIL makes it atomic); what it cannot
    count (a leading dimension of 0 or past the list, a 0-dimensional tensor) goes to `count_slow`. What each shape
    ran and why is asked of the runtime when a snapshot first finds the shape counted, not on the call."""

    __slots__ = ("op", "dtype", "via", "fn", "fns", "edges", "specs", "counts", "others", "seen", "row", "_choose")

    def __init__(
        self,
        op: str,
        dtype: str,
        via: Via,
        specs: Sequence[KernelSpec],
        edges: tuple[int, ...],
        choose: Callable[[int | None, str], Chosen],
        bucketed: bool = False,
    ) -> None:
        self.op, self.dtype, self.via = op, dtype, via
        self.specs = tuple(specs)
        self.fns = tuple(spec.load() for spec in self.specs)
        self.fn = self.fns[0]
        self.edges = edges
        self.counts: list[int | None] = [None] + [0] * _FIRST_LISTED
        self.others: dict[int | None, int] = {}  # what the list does not count, by leading dimension
        self.seen: dict[int | None, Chosen] = {}
        self._choose = choose
        # What the twin's site tables hold, unpacked in one step (cheaper than reading three attributes).
        self.row: tuple[Any, ...] = (self.counts, self.fns, edges, self) if bucketed else (self.counts, self.fn, self)

    def count_slow(self, tensor: Any) -> None:
        """Count a call the list could not: the list grown to its leading dimension, or counted in `others`."""
        tokens = tokens_of(tensor)
        counts = self.counts
        if tokens is not None and 0 < tokens <= _LISTED:
            if tokens >= len(counts):  # grown in place: the twin may hold the list
                counts.extend([0] * (min(max(tokens + 1, 2 * len(counts)), _LISTED + 1) - len(counts)))
            counts[tokens] += 1  # type: ignore[operator]
        else:
            self.others[tokens] = self.others.get(tokens, 0) + 1

    def calls(self) -> dict[int | None, int]:
        """The calls counted so far, by leading dimension."""
        found: dict[int | None, int] = {tokens: calls for tokens, calls in enumerate(list(self.counts)) if calls}
        for tokens, calls in dict(self.others).items():  # one C-level copy: consistent however many threads count
            found[tokens] = found.get(tokens, 0) + calls
        return found

    def choice(self, tokens: int | None) -> Chosen:
        """What calls at this leading dimension ran and why (asked of the runtime once per shape)."""
        found = self.seen.get(tokens)
        if found is None:
            spec = self.specs[bisect.bisect_left(self.edges, tokens)] if tokens is not None else self.specs[0]
            found = self.seen[tokens] = self._choose(tokens, spec.backend)
        return found


def tensor_length(namespace: dict[str, Any], name: str) -> None:
    """Bind `namespace[name]` to the C `len()` of a tensor (torch.Tensor's own `__len__` is Python, and refuses a
    0-dimensional tensor): the leading dimension at half the cost of `tensor.shape[0]`, 0 for a 0-dimensional one.
    Where torch is not imported yet, bound on the first call (a tensor means torch is there then)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        namespace[name] = _c_len(torch)
        return

    def until_torch(tensor: Any) -> int:
        namespace[name] = bound = _c_len(sys.modules["torch"])
        return bound(tensor)

    namespace[name] = until_torch


def _c_len(torch: Any) -> Callable[[Any], int]:
    base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase  # renamed in torch 2.2
    return base.__len__  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Counted:
    """Where calls were counted (op, dtype, how, what they ran and why, leading dimension), and how many."""

    op: str
    dtype: str
    via: Via
    choice: Chosen
    tokens: int | None

    def entry(self, calls: int) -> TraceEntry:
        """This count as a trace entry of one shape."""
        c = self.choice
        shape = TraceShape(self.tokens, calls, c.bucket)
        return TraceEntry(self.op, c.platform, self.dtype, c.backend, self.via, c.decided_by, c.fallbacks, (shape,))


Snapshot = dict[Counted, int]


class Recording:
    """The calls counted from the first open trace to the last one's close: the sites, and the calls that go
    the slow way (inside `use()` blocks, per-call gates, backends traced into a compiled graph)."""

    def __init__(self) -> None:
        self.sites: list[Site] = []
        self.slow: Snapshot = {}
        self._lock = threading.Lock()

    def add(self, site: Site) -> Site:
        with self._lock:
            self.sites.append(site)
        return site

    def count(self, op: str, dtype: str, via: Via, choice: Chosen, tokens: int | None) -> None:
        """Count one call that no site counts."""
        key = Counted(op, dtype, via, choice, tokens)
        with self._lock:
            self.slow[key] = self.slow.get(key, 0) + 1

    def snapshot(self) -> Snapshot:
        """Every count now."""
        with self._lock:
            sites, found = list(self.sites), dict(self.slow)
        for site in sites:
            for tokens, calls in site.calls().items():
                key = Counted(site.op, site.dtype, site.via, site.choice(tokens), tokens)
                found[key] = found.get(key, 0) + calls
        return found


def entries(now: Snapshot, since: Snapshot | None = None) -> tuple[TraceEntry, ...]:
    """The calls counted between two snapshots (or since the recording began), as trace entries."""
    before = since or {}
    made = [key.entry(calls - before.get(key, 0)) for key, calls in now.items() if calls > before.get(key, 0)]
    return merge([TraceRecord(tuple(made))]).entries


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


class Swap:
    """A generated dispatching function and its recording twin's code, with what to bind in its namespace when a
    recording starts (fresh sites): `start` swaps the twin in, `stop` swaps the function's own code back."""

    def __init__(self, function: Callable[..., Any], recording: types.CodeType, begin: Callable[[Recording], None]):
        assert isinstance(function, types.FunctionType)  # generated by runtime/handles.py: a plain function
        self.function = function
        self.plain = function.__code__
        self.recording = recording
        self.begin = begin

    def start(self, recording: Recording) -> None:
        self.begin(recording)  # first: the twin must never run with the sites of an earlier recording
        self.function.__code__ = self.recording

    def stop(self) -> None:
        self.function.__code__ = self.plain


def twin_code(source: str, namespace: dict[str, Any], name: str, filename: str) -> types.CodeType:
    """The code of the function `name` that `source` defines, compiled against a copy of `namespace` (its
    defaults name objects there); the function it is swapped into keeps its own globals and defaults."""
    scratch = dict(namespace)
    exec(compile(source, filename, "exec"), scratch)
    code: types.CodeType = scratch[name].__code__
    return code


def torch_check(namespace: dict[str, Any], name: str, check: Callable[[Any], Callable[[], bool]]) -> None:
    """Bind `namespace[name]` to `check(torch)` (torch.compiler.is_compiling, ...), or, while torch is not imported,
    to a function that binds it on its first call once torch is there (nothing compiles or captures before)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        namespace[name] = check(torch)
        return

    def until_torch() -> bool:
        found = sys.modules.get("torch")
        if found is None:
            return False
        namespace[name] = bound = check(found)
        return bound()

    namespace[name] = until_torch


def is_compiling(torch: Any) -> Callable[[], bool]:
    return torch.compiler.is_compiling  # type: ignore[no-any-return]


def is_dynamo(torch: Any) -> Callable[[], bool]:
    return torch.compiler.is_dynamo_compiling  # type: ignore[no-any-return]


def is_capturing(torch: Any) -> Callable[[], bool]:
    return torch.cuda.is_current_stream_capturing  # type: ignore[no-any-return]


class TraceState:
    """A runtime's traces: the recording while any is open, and every dispatching function that records."""

    def __init__(self) -> None:
        self.recording: Recording | None = None  # read without the lock by gates and compiled rules
        self._open = 0
        self._swaps: list[Swap] = []
        self._lock = threading.Lock()

    def register(self, swap: Swap) -> None:
        """Track a new dispatching function; it records at once where a trace is open."""
        with self._lock:
            self._swaps.append(swap)
            if self.recording is not None:
                swap.start(self.recording)

    def open(self) -> Recording:
        """Start recording (the first trace) or join the recording under way."""
        with self._lock:
            if self.recording is None:
                self.recording = Recording()
                for swap in self._swaps:
                    swap.start(self.recording)
            self._open += 1
            return self.recording

    def close(self) -> None:
        """The last trace to close stops the recording: every function runs its own code again."""
        with self._lock:
            self._open -= 1
            if self._open == 0:
                for swap in self._swaps:
                    swap.stop()
                self.recording = None


class Trace:
    """`with catalog.trace() as trace:` records what the catalog's op handles and torch ops run in the block, in
    every thread; `trace.record` is the TraceRecord, there once the block has ended, and written to `path`
    (merged with the trace the file holds, if any: see kcatalog.runtime.trace_file) where one was given."""

    def __init__(self, state: TraceState, digest: str, path: Any = None) -> None:
        self._state = state
        self._digest = digest
        self._path = path
        self._recording: Recording | None = None
        self._since: Snapshot = {}
        self._started = ""
        self._record: TraceRecord | None = None

    def __enter__(self) -> Trace:
        if self._recording is not None:
            raise RuntimeError("a Trace is opened once; make another with catalog.trace()")
        self._started = now()
        self._recording = self._state.open()
        self._since = self._recording.snapshot()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._recording is not None, "__exit__ without __enter__"
        snapshot = self._recording.snapshot()
        self._state.close()
        process = TraceProcess(_pid(), current_rank(), self._started, now())
        self._record = TraceRecord(entries(snapshot, self._since), (process,), (self._digest,))
        if self._path is not None:
            from .trace_file import expand_path, write_trace

            write_trace(expand_path(self._path), self._record)

    @property
    def record(self) -> TraceRecord:
        """What ran in the block; RuntimeError while it is still open."""
        if self._record is None:
            raise RuntimeError("the trace is still open: its record is there once the `with` block ends")
        return self._record


def _pid() -> int:
    import os

    return os.getpid()


class ProcessTrace:
    """KCATALOG_TRACE=FILE: every catalog of the process recorded from its load to the process's exit, when what
    its handles and torch ops ran is merged into FILE (nothing is written where nothing ran)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.started = now()
        self._recordings: list[tuple[str, Recording]] = []
        self._lock = threading.Lock()

    def attach(self, state: TraceState, digest: str) -> None:
        """Record this runtime from now until the process exits."""
        recording = state.open()
        with self._lock:
            self._recordings.append((digest, recording))

    def record(self) -> TraceRecord:
        """What every attached catalog ran so far."""
        with self._lock:
            attached = list(self._recordings)
        process = TraceProcess(_pid(), current_rank(), self.started, now())
        return merge(TraceRecord(entries(r.snapshot()), (process,), (digest,)) for digest, r in attached)

    def write(self) -> None:
        """Merge the record into the file (at exit: a failure is logged, never raised)."""
        import logging

        from ..errors import CatalogError
        from .trace_file import expand_path, write_trace

        record = self.record()
        if not record.entries:
            return
        try:
            write_trace(expand_path(self.target), record)
        except CatalogError as exc:
            logging.getLogger("kcatalog").warning("KCATALOG_TRACE: %s", exc)


_PROCESS: ProcessTrace | None = None
_PROCESS_LOCK = threading.Lock()


def process_trace(target: str) -> ProcessTrace:
    """The process's KCATALOG_TRACE recorder, made (and its write at exit registered) on first use."""
    global _PROCESS
    with _PROCESS_LOCK:
        if _PROCESS is None or _PROCESS.target != target:
            import atexit

            _PROCESS = ProcessTrace(target)
            atexit.register(_PROCESS.write)
        return _PROCESS
