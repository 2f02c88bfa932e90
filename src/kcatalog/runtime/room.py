"""The runtime: the one mutable part of a catalog. It detects the platform, selects with what this process knows
(open `use()` scopes, imports that failed, per-call gates), imports kernels and falls back, and keeps the kernel
and handle caches, the torch ops and the notes. It reads the catalog through `CatalogValue` (its frozen data and
pure selection); handles, gates and torch ops get narrow callables (`Dispatcher`), never the runtime."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import CatalogError, KernelImportError, UnknownBackendError, printable
from ..model import CatalogSettings, Environment, KernelSpec, OpInfo, TableKeyValues, TunedBucket
from ..platform import Platform, PlatformLike
from .scopes import OverrideScopes

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..select.buckets import Tuning
    from ..select.overrides import OverridesArg
    from ..select.selection import Selection, SelectRequest
    from .dispatch import Call, CallKeywords, Dispatcher
    from .torch_ops import TorchOps
    from .trace import Trace, TraceState

# What selects, dispatches or registers is imported by its first use, not by a load: a warm load stays lean.

_TRACES_LOCK = threading.Lock()


class CatalogValue(Protocol):
    """What the runtime reads of the catalog: frozen data and its pure selection."""

    @property
    def settings(self) -> CatalogSettings: ...
    @property
    def devices(self) -> tuple[str, ...]: ...
    @property
    def strict(self) -> bool: ...
    @property
    def tuning(self) -> Tuning: ...
    @property
    def digest(self) -> str: ...
    def ops(self) -> list[str]: ...
    def info(self, op: str) -> OpInfo: ...
    def select(self, request: SelectRequest, /) -> Selection: ...


class Runtime:
    """Selection with this process's state, lazy imports with fallback, op handles, scopes and torch ops."""

    def __init__(self, value: CatalogValue) -> None:
        self.value = value
        self.scopes = OverrideScopes()
        self._platform: Platform | None = None
        self._lock = threading.Lock()
        self._kernels: dict[tuple[str, str | None], Callable[..., Any]] = {}
        self._handles: dict[str, Callable[..., Any]] = {}
        self._failed: dict[tuple[str, str], str] = {}  # (op, backend) -> why its import failed
        self._noted: set[str] = set()
        self._torch_ops: TorchOps | None = None  # made with the first op handle or torch op registration
        self._when_compiling: Callable[[str], Any] | None = None  # set once torch ops are registered
        self._environment: tuple[Environment | None] | None = None  # this machine's, for tuned entries (once)
        self._traces: TraceState | None = None  # made with the first dispatcher or trace
        target = os.environ.get("KCATALOG_TRACE")
        if target:  # the whole process, from this load to its exit (runtime/trace.py)
            from .trace import process_trace

            process_trace(target).attach(self.traces(), value.digest)

    # -- where, and what runs there ---------------------------------------------------------------------

    def platform(self, device: str | None = None) -> Platform:
        """This process's platform (detected, importing torch, on first call); given a tensor's device type, the
        platform it means here: torch calls ROCm devices 'cuda' too, and the detected platform knows which."""
        here = self._platform
        if here is None:
            here = self._platform = Platform.detect()
        if device is None or device == here.device or (device == "cuda" and here.device == "hip"):
            return here
        return Platform(device)

    def environment(self, platform: Platform) -> Environment | None:
        """This machine's device and versions (detected once), where `platform` is this machine's as detected and a
        tuned table for it records an environment to compare; else None. It detects nothing itself: a selection
        for a platform named outside any call imports no torch."""
        if self._platform is None or platform != self._platform:
            return None
        if self._environment is None:
            packages = self.value.tuning.packages(platform)
            self._environment = (None if packages is None else platform.environment(packages),)
        return self._environment[0]

    def parse_platform(self, platform: Platform | str | None) -> Platform:
        """A platform given as text (with the catalog's device kinds), as a Platform, or this machine's."""
        if isinstance(platform, str):
            return Platform.parse(platform, self.value.devices)
        return platform or self.platform()

    def select(
        self, op: str, platform: PlatformLike | None = None, dtype: str | None = None, **keywords: Unpack[CallKeywords]
    ) -> Selection:
        """The catalog's selection for this request, with what this process knows now; its notes logged once."""
        value = self.value
        if isinstance(platform, str):
            platform = Platform.parse(platform, value.devices)
        info = value.info(op)
        backend, tokens, call = keywords.get("backend"), keywords.get("tokens"), keywords.get("call")
        key = keywords.get("key")
        if backend is not None and backend not in info.backends:  # before detecting the platform imports torch
            raise UnknownBackendError(op, backend, list(info.backends), info.location)
        here = platform or self.platform()
        plan = value.tuning.plan
        if plan is not None and plan.platform != str(here) and here == self._platform:
            self._plan_elsewhere(plan.path, plan.platform, here)
        from ..select.selection import SelectRequest
        from .gates import gate_reasons

        gates: Mapping[str, str] | None = None if call is None else gate_reasons(info, *call)
        request = SelectRequest(
            op,
            here,
            dtype,
            backend=backend,
            tokens=tokens,
            key=key,
            scoped=self.scopes.current(),
            failed=MappingProxyType(dict(self._failed)) if self._failed else None,  # a snapshot: the request is a value
            gates=gates,
            packages_here=keywords.get("packages_here", True),
            environment=self.environment(here) if keywords.get("packages_here", True) else None,
            required=self.scopes.required(),
        )
        selection = value.select(request)
        for note in selection.notes:
            self.note(note)
        return selection

    def _plan_elsewhere(self, path: str, planned: str, here: Platform) -> None:
        """A plan for another platform pins nothing on this machine's own device: never silently."""
        message = f"plan {path} is for {planned}; this machine is {here}: nothing is pinned"
        if self.value.strict:
            raise CatalogError(message)
        self.note(message)

    # -- imports ---------------------------------------------------------------------------------------------

    def resolve_spec(
        self,
        op: str,
        platform: PlatformLike | None = None,
        dtype: str | None = None,
        **keywords: Unpack[CallKeywords],
    ) -> KernelSpec:
        """The selected backend, imported, or the next eligible one whose import works (unless strict)."""
        while True:
            spec = self.select(op, platform, dtype, **keywords).require()
            try:
                spec.load()
                return spec
            except KernelImportError as exc:
                if self.value.strict or keywords.get("backend") is not None:
                    raise
                self._failed[(op, spec.backend)] = f"{type(exc.__cause__).__name__}: {exc.__cause__}"
                self.note(
                    f"backend '{spec.backend}' of op '{op}' failed to import ({exc.__cause__}); "
                    "falling back to the next eligible backend"
                )

    def kernel(self, op: str, backend: str | None = None) -> Callable[..., Any]:
        """The op's implementation here: the named backend, or the best eligible one; imported on first use and
        cached outside `use()` blocks."""
        fn = self._kernels.get((op, backend))
        if fn is None or self.scopes.active:
            fn = self.resolve_spec(op, backend=backend).load()
            if not self.scopes.active:
                self._kernels[(op, backend)] = fn
        return fn

    # -- handles, scopes, torch ops ------------------------------------------------------------------------

    def op(self, op: str) -> Callable[..., Any]:
        """The op's handle for the hot path (the same one every call): it dispatches on its tensor argument's
        device and dtype, resolving once per (device, dtype); scoped overrides are honoured. One per op, made on
        first use; while torch.compile traces the caller (once torch ops are registered), the op's torch op."""
        handle = self._handles.get(op)
        if handle is not None and self._when_compiling is None:  # the hot path: a dict lookup
            return handle
        if self._when_compiling is not None:  # inside a function torch.compile traces, the registered torch op
            traced = self._when_compiling(op)
            if traced is not None:
                return traced  # type: ignore[no-any-return]
        if handle is None:
            torch_ops = self.torch_ops()  # first: a handle is published only once it is tracked
            with self._lock:
                handle = self._handles.get(op)
                if handle is None:
                    from .handles import make_handle

                    handle = make_handle(self.value.info(op), self.dispatcher(op))
                    torch_ops.track(handle, op)  # under torch.compile, it calls the op's torch op once registered
                    self._handles[op] = handle
        return handle

    def dispatcher(self, op: str, device: str | None = None) -> Dispatcher:
        """What a handle (or a torch op's implementation for `device`) of `op` needs from the runtime."""
        from .dispatch import Dispatcher, key_reader

        tuning = self.value.tuning

        def resolve(
            device_type: str, dtype: str, tokens: int | None, call: Call | None, key: TableKeyValues | None
        ) -> KernelSpec:
            where = self.platform(device or device_type)
            return self.resolve_spec(op, where, dtype, tokens=tokens, call=call, key=key)

        def bucket_lists(device_type: str, dtype: str, key: TableKeyValues) -> Sequence[Sequence[Any]]:
            return tuning.bucket_lists(op, self.platform(device or device_type), dtype, key)

        def select(
            device_type: str, dtype: str, tokens: int | None, call: Call | None, key: TableKeyValues | None
        ) -> Selection:
            return self.select(op, self.platform(device or device_type), dtype, tokens=tokens, call=call, key=key)

        def tuned_bucket(device_type: str, dtype: str, tokens: int, key: TableKeyValues) -> TunedBucket | None:
            from ..select.buckets import covering

            table = tuning.table(op, self.platform(device or device_type), dtype, key)
            return None if table is None else covering(table.buckets, tokens)

        bucketed = op in tuning.bucketed
        # Only an op keyed by its shape and tuned or planned somewhere reads its key per call: others as before.
        key_of = key_reader(self.value.info(op)) if bucketed else None
        traces = self.traces()
        return Dispatcher(op, resolve, bucket_lists, self.scopes, bucketed, select, tuned_bucket, traces, key_of)

    def traces(self) -> TraceState:
        """The runtime's traces (made on first use)."""
        traces = self._traces
        if traces is None:
            from .trace import TraceState

            with _TRACES_LOCK:  # not self._lock: `op()` makes dispatchers holding it
                if self._traces is None:
                    self._traces = TraceState()
                traces = self._traces
        return traces

    def trace(self, path: Any = None) -> Trace:
        """See Catalog.trace."""
        from .trace import Trace

        return Trace(self.traces(), self.value.digest, path)

    @contextlib.contextmanager
    def use(
        self, overrides: OverridesArg = None, *, deterministic: bool = False, batch_invariant: bool = False
    ) -> Iterator[None]:
        """Within the block (this thread or task), prefer these backends: {'layernorm.*': 'triton'} or 'a=b,c=d';
        with `deterministic` (or `batch_invariant`), select only backends that promise it."""
        from ..select.overrides import check_overrides, parse_overrides
        from ..select.promises import asked

        try:
            scoped = parse_overrides(overrides, "use()")
        except ValueError as exc:
            raise CatalogError(str(exc)) from None
        problems = check_overrides(scoped, self.value.ops(), self.value.settings.backends)
        if problems:
            raise CatalogError("; ".join(problem.message for problem in problems), problems)
        with self.scopes.open(scoped, asked(deterministic, batch_invariant, "use")):
            yield

    def torch_ops(self) -> TorchOps:
        """The catalog's torch ops (made on first use; registering them imports torch)."""
        torch_ops = self._torch_ops
        if torch_ops is None:
            from .torch_ops import TorchOps  # torch.library's side: not needed to load, only to dispatch

            with self._lock:
                if self._torch_ops is None:
                    self._torch_ops = TorchOps(self.value.info, self.value.ops, self.dispatcher, self.note)
                torch_ops = self._torch_ops
        return torch_ops

    def register_torch_ops(self, namespace: str, ops: Iterable[str] | str | None, traced: bool) -> Mapping[str, Any]:
        """See Catalog.register_torch_ops; from then on, `op()` checks whether torch.compile is tracing."""
        torch_ops = self.torch_ops()
        registered = torch_ops.register(namespace, ops, traced)
        self._when_compiling = torch_ops.when_compiling
        return registered

    def torch_op(self, op: str, namespace: str) -> Any | None:
        """`torch.ops.<namespace>.<name>` of an op registered there, or None."""
        self.value.info(op)
        torch_ops = self._torch_ops
        registered = None if torch_ops is None else torch_ops.registered(op, namespace)
        return None if registered is None else registered.packet

    def note(self, message: str) -> None:
        """Log a warning once per distinct message (fallbacks, ignored overrides)."""
        if message not in self._noted:
            import logging  # only fallbacks and ignored overrides log; keep it off the load path

            self._noted.add(message)
            logging.getLogger("kcatalog").warning(printable(message))  # it may quote an exception: one log line
