"""The immutable registry a load produces: ops, their backend specs, lookups and lazy loading."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .errors import Diagnostic, KernelImportError, Location, UnknownBackendError, UnknownOpError

if TYPE_CHECKING:
    from ._platform import Platform
    from ._select import Selection
    from .schema import Capability, Settings


class _LazyTarget:
    """Imports a 'module:attr' target once, on first use, under a lock; a failure is not cached."""

    __slots__ = ("_lock", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: Any = None

    def get(self, spec: KernelSpec) -> Any:
        value = self._value
        if value is not None:
            return value
        with self._lock:
            if self._value is None:
                self._value = _import_target(spec)
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
    """An op as declared: its contract and its backends in declaration order."""

    id: str
    group: str
    description: str
    signature: str
    reference: str
    dtypes: tuple[str, ...]
    mutates: tuple[str, ...]
    tolerance: Mapping[str, float]
    priority: tuple[str, ...] | None
    location: Location
    backends: Mapping[str, KernelSpec]


class Catalog:
    """The loaded catalog: every op and backend, checked at load; kernels are imported on first use."""

    def __init__(self, ops: Mapping[str, OpInfo], settings: Settings, warnings: tuple[Diagnostic, ...]) -> None:
        self._ops = MappingProxyType(dict(sorted(ops.items())))
        self.settings = settings
        self.warnings = warnings
        self._platform: Platform | None = None
        self._kernels: dict[tuple[str, str | None], Callable[..., Any]] = {}

    def __repr__(self) -> str:
        specs = sum(len(op.backends) for op in self._ops.values())
        return f"<Catalog {len(self._ops)} ops, {specs} backend specs>"

    def __contains__(self, op: object) -> bool:
        return op in self._ops

    def __iter__(self) -> Iterator[str]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    @property
    def backends(self) -> tuple[str, ...]:
        """Every backend name the catalog settings declare."""
        return tuple(self.settings.backends)

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

    def platform(self) -> Platform:
        """This process's platform, detected (importing torch) on first call."""
        if self._platform is None:
            from ._platform import Platform

            self._platform = Platform.detect()
        return self._platform

    def select(self, op: str, platform: Platform | str | None = None, dtype: str | None = None) -> Selection:
        """Which backend runs the op on the platform (default: this machine), and why each other one does not."""
        from ._platform import Platform
        from ._select import select

        if isinstance(platform, str):
            platform = Platform.parse(platform)
        return select(self, self.info(op), platform or self.platform(), dtype)

    def kernel(self, op: str, backend: str | None = None) -> Callable[..., Any]:
        """The op's implementation: the named backend, or the best eligible one here; imported on first use."""
        key = (op, backend)
        fn = self._kernels.get(key)
        if fn is None:
            spec = self.get_backend(op, backend) if backend else self.select(op).require()
            fn = self._kernels[key] = spec.load()
        return fn
