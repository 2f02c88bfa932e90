"""What dispatching code (op handles, gates, torch ops' implementations) shares: the narrow view of the runtime it
is given, dtype names, resolving once under a lock, and what a trace asks of that view (runtime/trace.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from ..model import KernelSpec, OpInfo, TableKeyValues, TunedBucket
from .scopes import OverrideScopes

if TYPE_CHECKING:
    from ..select.selection import Selection
    from .trace import Chosen, Recording, Site, TraceState
    from .trace_file import Via

_T = TypeVar("_T")

# (args, kwargs) of one call, which per-call gates are asked about.
Call = tuple[tuple[Any, ...], dict[str, Any]]


class CallKeywords(TypedDict, total=False):
    """What a call may add to the op, platform and dtype it selects for: a backend it names, the dispatch
    argument's leading dimension (a tuned table's or plan's bucket), for an op keyed by its shape the sizes of its
    `table_key` in order (the entry), its (args, kwargs) for per-call gates, and `packages_here=False` to take
    every backend's `requires` as met (choosing for another machine)."""

    backend: str | None
    tokens: int | None
    key: TableKeyValues | None
    call: Call | None
    packages_here: bool


_DTYPE_NAMES: dict[Any, str] = {}


def dtype_name(dtype: Any) -> str:
    """The catalog's name of a torch dtype ('bfloat16' for torch.bfloat16), without importing torch."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


@dataclass(frozen=True)
class Dispatcher:
    """What an op handle, a gate or a torch op's implementation asks of the runtime: narrow callables, not it."""

    op: str
    # (device type, dtype name, tokens, call, key) -> the spec selected and imported there, after any fallback.
    resolve: Callable[[str, str, int | None, Call | None, TableKeyValues | None], KernelSpec]
    # (device type, dtype name, key) -> the bucket lists of the op's tuned table and plan entry there.
    bucket_lists: Callable[[str, str, TableKeyValues], Sequence[Sequence[TunedBucket]]]
    scopes: OverrideScopes
    bucketed: bool  # a tuned table or the plan chooses this op's backend by token count somewhere
    # What a trace asks, once per shape: (device type, dtype name, tokens, call, key) -> the selection, with why ...
    select: Callable[[str, str, int | None, Call | None, TableKeyValues | None], Selection]
    # ... and (device type, dtype name, tokens, key) -> the tuned table's bucket covering it, or None.
    tuned_bucket: Callable[[str, str, int, TableKeyValues], TunedBucket | None]
    trace: TraceState  # the runtime's traces: what records, and the recording while one is open
    # For an op keyed by its shape (`table_key`) that is tuned or planned: the call's key from its arguments.
    key_of: KeyReader | None = None


# (args, kwargs) of a call -> its table key: the sizes of the op's `table_key`, read from its arguments' shapes.
KeyReader = Callable[[tuple[Any, ...], Mapping[str, Any]], TableKeyValues]


def key_reader(info: OpInfo) -> KeyReader | None:
    """How to read a call's table key from its arguments (positional ones as given, defaults filled in or not);
    None for an op without a `table_key`. The op handle reads the same sizes in generated code (handles.py)."""
    dims = info.table_key
    if not dims:
        return None

    def read(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> TableKeyValues:
        found = []
        for d in dims:
            value = args[d.index] if d.index is not None and d.index < len(args) else kwargs[d.arg]
            found.append(value.shape[d.dim])  # an int in eager mode; symbolic under tracing, never forced
        return tuple(found)

    return read


def resolve_once(lock: threading.Lock, table: dict[Any, Any], key: Any, resolve: Callable[[], _T]) -> _T:
    """The callable for `key`, resolved (and imported) once however many threads make the first call."""
    with lock:
        fn: _T | None = table.get(key)
        if fn is None:
            fn = table[key] = resolve()
    return fn


# -- what a trace asks of the runtime (runtime/trace.py records; these know the Dispatcher) ----------------


def site_for(dispatcher: Dispatcher, device: str, dtype: Any, via: Via) -> Site:
    """A site of the op on a device type and dtype (torch's): its backends resolved (and imported) now, per bucket
    segment where a tuned table or the plan chooses by token count."""
    from ..select.buckets import dispatch_for, segments
    from .trace import Site

    name = dtype_name(dtype)
    edges: tuple[int, ...] = ()
    if dispatcher.bucketed:
        cut = segments(dispatcher.bucket_lists(device, name, ()))
        found = dispatch_for(cut, lambda tokens: dispatcher.resolve(device, name, tokens, None, None))
        edges, specs = found.edges, found.fns
    else:
        specs = (dispatcher.resolve(device, name, None, None, None),)

    def choose(tokens: int | None, backend: str) -> Chosen:
        return choice(dispatcher, device, name, tokens, None, backend)

    return Site(dispatcher.op, name, via, specs, edges, choose, dispatcher.bucketed)


def choice(
    dispatcher: Dispatcher,
    device: str,
    dtype: str,
    tokens: int | None,
    call: Call | None,
    backend: str,
    key: TableKeyValues | None = None,
) -> Chosen:
    """Why `backend` ran a call of the op with this leading dimension (and arguments, for per-call gates; and table
    key, for an op keyed by its shape)."""
    from .trace import chosen

    selection = dispatcher.select(device, dtype, tokens if dispatcher.bucketed else None, call, key)
    bucket = None if tokens is None else dispatcher.tuned_bucket(device, dtype, tokens, key or ())
    return chosen(selection, backend, bucket)


def scoped_call(
    dispatcher: Dispatcher, recording: Recording, tensor: Any, via: Via, key: TableKeyValues | None = None
) -> Callable[..., Any]:
    """A call inside a `use()` block (or of an op keyed by its shape): resolved for the call, as the untraced code
    does, and counted the slow way."""
    from .trace import tokens_of

    device, name, tokens = tensor.device.type, dtype_name(tensor.dtype), tokens_of(tensor)
    spec = dispatcher.resolve(device, name, tokens if dispatcher.bucketed else None, None, key)
    picked = choice(dispatcher, device, name, tokens, None, spec.backend, key)
    recording.count(dispatcher.op, name, via, picked, tokens)
    return spec.load()
