"""What dispatching code (op handles, gates, torch ops' implementations) shares: the narrow view of the runtime it
is given, dtype names, and resolving once under a lock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar

from ..model import KernelSpec, TunedBucket
from .scopes import OverrideScopes

_T = TypeVar("_T")

# (args, kwargs) of one call, which per-call gates are asked about.
Call = tuple[tuple[Any, ...], dict[str, Any]]


class CallKeywords(TypedDict, total=False):
    """What a call may add to the op, platform and dtype it selects for: a backend it names, the dispatch
    argument's leading dimension (a tuned table's or plan's bucket), its (args, kwargs) for per-call gates, and
    `packages_here=False` to take every backend's `requires` as met (choosing for another machine)."""

    backend: str | None
    tokens: int | None
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
    # (device type, dtype name, tokens, call) -> the spec selected and imported there, after any fallback.
    resolve: Callable[[str, str, int | None, Call | None], KernelSpec]
    # (device type, dtype name) -> the bucket lists of the op's tuned table and plan entry there.
    bucket_lists: Callable[[str, str], Sequence[Sequence[TunedBucket]]]
    scopes: OverrideScopes
    bucketed: bool  # a tuned table or the plan chooses this op's backend by token count somewhere


def resolve_once(lock: threading.Lock, table: dict[Any, Any], key: Any, resolve: Callable[[], _T]) -> _T:
    """The callable for `key`, resolved (and imported) once however many threads make the first call."""
    with lock:
        fn: _T | None = table.get(key)
        if fn is None:
            fn = table[key] = resolve()
    return fn
