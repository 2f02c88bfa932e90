"""The immutable registry a load produces: ops, their backend specs, lookups, selection, lazy loading."""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ._overrides import Layer, OverridesArg, check_layer, parse_overrides
from ._platform import Capability, Platform
from .errors import CatalogError, KernelImportError, Location, UnknownBackendError, UnknownOpError

if TYPE_CHECKING:
    from ._select import Selection
    from .errors import Diagnostic
    from .schema import Samples, Settings


class _LazyTarget:
    """Imports a 'module:attr' target once, on first use, under a lock; a failure is not cached, but the
    callers that queued on the lock while an attempt failed share that failure instead of each retrying."""

    __slots__ = ("_lock", "_value", "_failures", "_cause")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: Any = None
        self._failures = 0
        self._cause: BaseException | None = None

    def get(self, spec: KernelSpec) -> Any:
        value = self._value
        if value is not None:
            return value
        failures = self._failures
        with self._lock:
            if self._value is None:
                if self._failures != failures and self._cause is not None:  # failed while we waited
                    raise KernelImportError(spec.op, spec.backend, spec.target, self._cause) from self._cause
                try:
                    self._value = _import_target(spec)
                except KernelImportError as exc:
                    self._cause = exc.__cause__
                    self._failures += 1
                    raise
            return self._value


def _import_target(spec: KernelSpec) -> Any:
    module_name, _, attr_path = spec.target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            obj = getattr(obj, attr)
    except Exception as exc:  # any failure of the kernel's own import code is reported the same way
        raise KernelImportError(spec.op, spec.backend, spec.target, exc) from exc
    return obj


@dataclass(frozen=True)
class KernelSpec:
    """One backend implementation of an op, as declared; `load()` imports it on first use."""

    op: str
    backend: str
    target: str
    requires: tuple[str, ...]
    capabilities: tuple[Capability, ...]
    dtypes: tuple[str, ...]
    location: Location
    _lazy: _LazyTarget = field(default_factory=_LazyTarget, compare=False, repr=False)

    def load(self) -> Callable[..., Any]:
        """Import the target (first call only) and return it; KernelImportError names op, backend, target."""
        return self._lazy.get(self)


@dataclass(frozen=True)
class OpInfo:
    """An op as declared: its contract and its backends in declaration order.

    Plain data only, so that a cached catalog loads without pydantic; `samples` (needed by tests and
    benchmarks, never by dispatch) is rebuilt from `samples_data` as the model on first use.
    """

    id: str
    group: str
    description: str
    signature: str
    reference: str
    dtypes: tuple[str, ...]
    mutates: tuple[str, ...]
    tolerance: Mapping[str, float]
    priority: tuple[str, ...] | None
    platform_priority: Mapping[str, tuple[str, ...]]
    dispatch_arg: str | None
    samples_data: Mapping[str, Any] | None
    location: Location
    backends: Mapping[str, KernelSpec]

    @functools.cached_property
    def samples(self) -> Samples | None:
        """The op's declared samples, validated (they were checked at load, so this cannot fail)."""
        if self.samples_data is None:
            return None
        from .schema import Samples

        return Samples.model_validate(self.samples_data)


@dataclass(frozen=True)
class CatalogPriority:
    """The settings file's backend orders, best first: the default, and per device kind."""

    priority: tuple[str, ...]
    platform_priority: Mapping[str, tuple[str, ...]]


class _Scopes:
    """Scoped overrides of one catalog: a ContextVar, plus a count so handles skip it when none is open."""

    def __init__(self) -> None:
        self.var: ContextVar[tuple[Layer, ...]] = ContextVar("kcatalog_scoped_overrides", default=())
        self.active = 0
        self.lock = threading.Lock()


class Catalog:
    """The loaded catalog: every op and backend, checked at load; kernels are imported on first use.

    Backend precedence for a call: `backend=` in the call > `with catalog.use(...)` > KCATALOG_OVERRIDES
    > KCATALOG_BACKEND > `load_catalog(overrides=...)` > per-platform priority > per-op priority
    > catalog default. Every path checks that the backend can run here.
    """

    def __init__(
        self,
        ops: Mapping[str, OpInfo],
        settings: Mapping[str, Any],
        warnings: tuple[Diagnostic, ...],
        *,
        layers: Iterable[Layer] = (),
        strict: bool = False,
        cache_status: str = "",
    ) -> None:
        self._ops = MappingProxyType(dict(sorted(ops.items())))
        self._settings_data = settings  # the validated settings file as plain data; `settings` models it
        self._priority = CatalogPriority(
            tuple(settings["priority"]),
            MappingProxyType({device: tuple(order) for device, order in settings["platform_priority"].items()}),
        )
        self._backends = tuple(settings["backends"])
        self.warnings = warnings
        self.cache_status = cache_status  # whether the load came from the cache, or why not (see load_catalog)
        self.strict = strict
        self._layers = tuple(layers)
        self._scopes = _Scopes()
        self._platform: Platform | None = None
        self._kernels: dict[tuple[str, str | None], Callable[..., Any]] = {}
        self._failed: dict[tuple[str, str], str] = {}
        self._noted: set[str] = set()

    def __repr__(self) -> str:
        return f"<Catalog {len(self._ops)} ops, {len(self.all_specs())} backend specs>"

    def __contains__(self, op: object) -> bool:
        return op in self._ops

    def __iter__(self) -> Iterator[str]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    # -- lookups (SGLang KernelRegistry-compatible names) --------------------------------------------

    @property
    def backends(self) -> tuple[str, ...]:
        """Every backend name the catalog settings declare."""
        return self._backends

    @functools.cached_property
    def settings(self) -> Settings:
        """The catalog settings file, as its model (validated at load, so this cannot fail)."""
        from .schema import Settings

        return Settings.model_validate(self._settings_data)

    def ops(self) -> list[str]:
        """All op ids, sorted."""
        return list(self._ops)

    def has(self, op: str, backend: str | None = None) -> bool:
        """Whether the op exists (and, given a backend, whether it has that backend)."""
        info = self._ops.get(op)
        return info is not None and (backend is None or backend in info.backends)

    def info(self, op: str) -> OpInfo:
        """The op's declaration; UnknownOpError (a KeyError) naming the available ops."""
        info = self._ops.get(op)
        if info is None:
            raise UnknownOpError(op, list(self._ops))
        return info

    def get(self, op: str) -> list[KernelSpec]:
        """All backend specs of an op, in declaration order."""
        return list(self.info(op).backends.values())

    def get_backend(self, op: str, backend: str) -> KernelSpec:
        """One backend spec; UnknownBackendError (a KeyError) listing the op's backends."""
        info = self.info(op)
        spec = info.backends.get(backend)
        if spec is None:
            raise UnknownBackendError(op, backend, list(info.backends), info.location)
        return spec

    def all_specs(self) -> list[KernelSpec]:
        """Every spec of every op, ops sorted, backends in declaration order."""
        return [spec for info in self._ops.values() for spec in info.backends.values()]

    # -- selection -----------------------------------------------------------------------------------

    def platform(self) -> Platform:
        """This process's platform, detected (importing torch) on first call."""
        if self._platform is None:
            self._platform = Platform.detect()
        return self._platform

    def select(
        self, op: str, platform: Platform | str | None = None, dtype: str | None = None, *, backend: str | None = None
    ) -> Selection:
        """Which backend runs the op on the platform (default: this machine), and why each other one does not."""
        if isinstance(platform, str):
            platform = Platform.parse(platform)
        info = self.info(op)
        if backend is not None and backend not in info.backends:  # before detecting the platform imports torch
            raise UnknownBackendError(op, backend, list(info.backends), info.location)
        layers = self._scopes.var.get() + self._layers
        from ._select import select  # selection is not needed to load, only to choose

        selection = select(
            self._priority,
            info,
            platform or self.platform(),
            dtype,
            backend=backend,
            layers=layers,
            failed=self._failed,
            strict=self.strict,
        )
        for note in selection.notes:
            self._note(note)
        return selection

    @contextlib.contextmanager
    def use(self, overrides: OverridesArg) -> Iterator[None]:
        """Within the block (this thread or task), prefer these backends: {'layernorm.*': 'triton'} or 'a=b,c=d'."""
        try:
            layer = parse_overrides(overrides, "use()")
        except ValueError as exc:
            raise CatalogError(str(exc)) from None
        problems = check_layer(layer, self.ops(), self.backends)
        if problems:
            raise CatalogError("; ".join(message for _, message in problems))
        scopes = self._scopes
        token = scopes.var.set((layer, *scopes.var.get()))
        with scopes.lock:
            scopes.active += 1
        try:
            yield
        finally:
            scopes.var.reset(token)
            with scopes.lock:
                scopes.active -= 1

    # -- loading ---------------------------------------------------------------------------------------

    def kernel(self, op: str, backend: str | None = None) -> Callable[..., Any]:
        """The op's implementation: the named backend, or the best eligible one here; imported on first use."""
        key = (op, backend)
        fn = self._kernels.get(key)
        if fn is None or self._scopes.active:
            fn = self.resolve(op, backend=backend)
            if not self._scopes.active:
                self._kernels[key] = fn
        return fn

    def resolve(
        self, op: str, platform: Platform | str | None = None, dtype: str | None = None, *, backend: str | None = None
    ) -> Callable[..., Any]:
        """Select and import, falling back to the next eligible backend when an import fails (unless strict)."""
        while True:
            spec = self.select(op, platform, dtype, backend=backend).require()
            try:
                return spec.load()
            except KernelImportError as exc:
                if self.strict or backend is not None:
                    raise
                self._failed[(op, spec.backend)] = f"{type(exc.__cause__).__name__}: {exc.__cause__}"
                self._note(
                    f"backend '{spec.backend}' of op '{op}' failed to import ({exc.__cause__}); "
                    "falling back to the next eligible backend"
                )

    def op(self, op: str) -> Callable[..., Any]:
        """A callable for the hot path that dispatches on its tensor argument's device and dtype.

        Resolution happens once per (device, dtype) and is cached; scoped overrides are honoured.
        """
        from ._dispatch import make_handle

        return make_handle(self, self.info(op))

    def prepare(
        self, platform: Platform | str | None = None, ops: Iterable[str] | None = None
    ) -> dict[str, KernelSpec]:
        """Resolve and import every op (or `ops`) now, for each declared dtype, so the hot path imports nothing."""
        chosen = {}
        for op in self.ops() if ops is None else ops:
            for dtype in self.info(op).dtypes:
                self.resolve(op, platform, dtype)
            chosen[op] = self.select(op, platform).require()
        return chosen

    def _note(self, message: str) -> None:
        """Log a warning once per distinct message (fallbacks, ignored overrides)."""
        if message not in self._noted:
            import logging  # only fallbacks and ignored overrides log; keep it off the load path

            self._noted.add(message)
            logging.getLogger("kcatalog").warning(message)
