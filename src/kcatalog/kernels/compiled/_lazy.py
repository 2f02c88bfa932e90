"""Shared helper: wrap a torch reference so that torch.compile runs on its first call, not at import."""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def lazy_compile(fn: F, **compile_kwargs: Any) -> F:
    """Return a wrapper around `fn` that compiles it with torch.compile on its first call.

    Importing a module that calls ``lazy_compile`` at module level costs nothing: the compile
    happens once, on the first call, under a lock (so concurrent first calls compile only once),
    and the compiled function is cached and called directly afterwards. ``dynamic=False`` is the
    default; other keyword arguments go to torch.compile unchanged. ``functools.wraps`` keeps the
    reference's name, docstring and annotations; the reference stays reachable as ``__wrapped__``.
    """
    options: dict[str, Any] = {"dynamic": False, **compile_kwargs}
    lock = threading.Lock()
    compiled: list[Callable[..., Any]] = []  # empty until the first call; then [compiled_fn]

    def _get() -> Callable[..., Any]:
        with lock:
            if not compiled:
                import torch

                allow_recompiles()
                compiled.append(torch.compile(fn, **options))
            return compiled[0]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # Fast path: no lock once compiled (list reads are atomic under the GIL).
        impl = compiled[0] if compiled else _get()
        return impl(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


RECOMPILE_LIMIT = 256


def allow_recompiles(limit: int = RECOMPILE_LIMIT) -> None:
    """Raise dynamo's recompile limits (never lower them) so torch.compile(dynamic=False) stays compiled.

    It compiles once per shape and dtype; past the default limit (8) dynamo silently runs the
    function eagerly, so a serving process, or a benchmark, would get eager code under the name
    torch_compile. The limits are process-wide; this only ever raises them.
    """
    import torch._dynamo

    config = torch._dynamo.config
    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        current = getattr(config, name, None)
        if isinstance(current, int) and current < limit:
            setattr(config, name, limit)
