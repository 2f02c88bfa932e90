"""What dispatching code (op handles, gates, torch ops' implementations) shares: the narrow view of the runtime it
is given, dtype names, and resolving once under a lock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar

from ..model import KernelSpec, OpInfo, TableKeyValues, TunedBucket
from .scopes import OverrideScopes

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
