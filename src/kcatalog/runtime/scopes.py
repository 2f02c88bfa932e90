"""`with catalog.use(...)` scopes: the override sets and required promises open in this thread or task, and a count
so that hot paths skip the context variables while none is open anywhere."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar

from ..model import OverrideSet, Required


class OverrideScopes:
    """The `use()` blocks of one catalog: ContextVars of override sets and of required promises (deterministic
    outputs), innermost first, and how many blocks are open."""

    def __init__(self) -> None:
        self.var: ContextVar[tuple[OverrideSet, ...]] = ContextVar("kcatalog_scoped_overrides", default=())
        self.required_var: ContextVar[tuple[Required, ...]] = ContextVar("kcatalog_scoped_required", default=())
        self.active = 0  # read without the lock by hot paths: only zero or not matters there
        self._lock = threading.Lock()

    def current(self) -> tuple[OverrideSet, ...]:
        """The override sets open in this context, innermost first."""
        return self.var.get()

    def required(self) -> tuple[Required, ...]:
        """The promises the blocks open in this context require, innermost first."""
        return self.required_var.get()

    @contextlib.contextmanager
    def open(self, overrides: OverrideSet, required: Required | None = None) -> Iterator[None]:
        """Within the block (this thread or task), `overrides` come first, and `required` is asked of every
        backend selected (on top of what the outer blocks ask: a block can add a promise, never lift one)."""
        token = self.var.set((overrides, *self.var.get()))
        asked = None if required is None else self.required_var.set((required, *self.required_var.get()))
        with self._lock:
            self.active += 1
        try:
            yield
        finally:
            self.var.reset(token)
            if asked is not None:
                self.required_var.reset(asked)
            with self._lock:
                self.active -= 1
