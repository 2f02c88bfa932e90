"""`with catalog.use(...)` scopes: the override sets open in this thread or task, and a count so that hot paths
skip the context variable while none is open anywhere."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar

from ..model import OverrideSet


class OverrideScopes:
    """The `use()` blocks of one catalog: a ContextVar of override sets, innermost first, and how many are open."""

    def __init__(self) -> None:
        self.var: ContextVar[tuple[OverrideSet, ...]] = ContextVar("kcatalog_scoped_overrides", default=())
        self.active = 0  # read without the lock by hot paths: only zero or not matters there
        self._lock = threading.Lock()

    def current(self) -> tuple[OverrideSet, ...]:
        """The override sets open in this context, innermost first."""
        return self.var.get()

    @contextlib.contextmanager
    def open(self, overrides: OverrideSet) -> Iterator[None]:
        """Within the block (this thread or task), `overrides` come first."""
        token = self.var.set((overrides, *self.var.get()))
        with self._lock:
            self.active += 1
        try:
            yield
        finally:
            self.var.reset(token)
            with self._lock:
                self.active -= 1
