"""The immutable registry a load produces: ops, their backend specs, lookups, selection, lazy loading."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..check.overrides import OverridesArg, check_layer, parse_overrides
from ..errors import CatalogError, KernelImportError, UnknownBackendError, UnknownOpError
from ..model import (
    CacheOutcome,
    CacheStatus,
    CatalogLayer,
    CatalogSettings,
    KernelSpec,
    Layer,
    LayerMapping,
    LockedPlan,
    OpInfo,
    TunedOp,
)
from ..platform import DEVICES, Platform

if TYPE_CHECKING:
    from ..errors import Diagnostic
    from ..select.selection import Selection
    from ..select.torch_ops import TorchOps


_NOT_LOADED = CacheStatus(CacheOutcome.OFF, "catalog built directly, not loaded")


class OverrideScopes:
    """Scoped overrides of one catalog: a ContextVar, plus a count so handles skip it when none is open."""

    def __init__(self) -> None:
        self.var: ContextVar[tuple[Layer, ...]] = ContextVar("kcatalog_scoped_overrides", default=())
        self.active = 0
        self.lock = threading.Lock()


class Catalog:
    """The loaded catalog: every op and backend, checked at load; kernels are imported on first use.

    Backend precedence for a call: a backend named in `kernel`/`select`/`resolve(..., backend=)` (op handles take
    only the op's own arguments) > `with catalog.use(...)` > KCATALOG_OVERRIDES
    > KCATALOG_BACKEND > `load_catalog(overrides=...)` > per-platform priority > per-op priority
    > catalog default. Every path checks that the backend can run here.
    """

    def __init__(
        self,
        ops: Mapping[str, OpInfo],
        settings: CatalogSettings,
        warnings: tuple[Diagnostic, ...],
        *,
        layers: Iterable[Layer] = (),
        strict: bool = False,
        cache_status: CacheStatus = _NOT_LOADED,
        catalog_layers: Iterable[CatalogLayer] = (),
        layer_mappings: tuple[LayerMapping, ...] = (),
        tuned: Iterable[TunedOp] = (),
        plan: LockedPlan | None = None,
        digest: str = "",
    ) -> None:
        self._ops = MappingProxyType(dict(sorted(ops.items())))
        self._settings = settings
        self._backends = tuple(settings.backends)
        self._devices = (*DEVICES, *(d for d in settings.devices if d not in DEVICES))
        self.warnings = warnings
        self.cache_status = cache_status  # whether the load came from the cache, or why not (see load_catalog)
        self.strict = strict
        self._layers = tuple(layers)
        self.catalog_layers = tuple(catalog_layers)  # the layers it was read from, in order (read/layers.py)
        self._scopes = OverrideScopes()
        self._platform: Platform | None = None
        self._kernels: dict[tuple[str, str | None], Callable[..., Any]] = {}
        self._failed: dict[tuple[str, str], str] = {}
        self._noted: set[str] = set()
        self._torch_ops: TorchOps | None = None  # made with the first op handle or torch op registration
        self._torch_lock = threading.Lock()
        self.layer_mappings = layer_mappings  # the layers files' mappings, for kcatalog.kernelize
        self.digest = digest  # the content digest of the catalog's files (plans record it)
        self.plan = plan
        self._tuned = {(t.op, t.platform, t.dtype): t for t in tuned}
        self._bucketed = {t.op for t in self._tuned.values()}
        if plan is not None:
            self._bucketed |= {e.op for e in plan.entries.values() if e.buckets}

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
    def settings(self) -> CatalogSettings:
        """The catalog settings: known backends, backend orders, policy, allow-list."""
        return self._settings

    @property
    def backends(self) -> tuple[str, ...]:
        """Every backend name the catalog settings declare."""
        return self._backends

    @property
    def devices(self) -> tuple[str, ...]:
        """The device kinds platforms may name: the built-in ones, then those the settings declare."""
        return self._devices

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
        self,
        op: str,
        platform: Platform | str | None = None,
        dtype: str | None = None,
        *,
        backend: str | None = None,
        tokens: int | None = None,
        call: tuple[tuple[Any, ...], dict[str, Any]] | None = None,
        packages_here: bool = True,
    ) -> Selection:
        """Which backend runs the op on the platform (default: this machine), and why each other one does not;
        `tokens` (the dispatch argument's leading dimension) picks the bucket of a plan or tuned table, and `call`
        (args, kwargs) is what backends' per-call gates (`eligible:`) are asked about. `packages_here=False`
        takes every backend's `requires` as met (choosing for another machine, as `kcatalog plan` does)."""
        if isinstance(platform, str):
            platform = Platform.parse(platform, self._devices)
        info = self.info(op)
        if backend is not None and backend not in info.backends:  # before detecting the platform imports torch
            raise UnknownBackendError(op, backend, list(info.backends), info.location)
        layers = self._scopes.var.get() + self._layers
        from ..select.buckets import picks
        from ..select.selection import select  # selection is not needed to load, only to choose

        platform = platform or self.platform()
        if self.plan is not None and self.plan.platform != str(platform) and platform == self._platform:
            self._plan_elsewhere(platform)
        selection = select(
            self._settings,
            info,
            platform,
            dtype,
            backend=backend,
            layers=layers,
            failed=self._failed,
            strict=self.strict,
            picks=picks(op, platform, dtype, tokens, self.plan, self.tuned(op, platform, dtype)),
            gates=None if call is None else _gate_reasons(info, call),
            packages_here=packages_here,
        )
        for note in selection.notes:
            self._note(note)
        return selection

    def _plan_elsewhere(self, here: Platform) -> None:
        """A plan for another platform pins nothing on this machine's own device: never silently."""
        assert self.plan is not None
        message = f"plan {self.plan.path} is for {self.plan.platform}; this machine is {here}: nothing is pinned"
        if self.strict:
            raise CatalogError(message)
        self._note(message)

    def tuned(self, op: str, platform: Platform | str, dtype: str | None) -> TunedOp | None:
        """The tuned table's buckets for the op on the platform and dtype, or None."""
        return self._tuned.get((op, str(platform), dtype or ""))

    def is_bucketed(self, op: str) -> bool:
        """Whether a tuned table or the plan chooses this op's backend by token count somewhere."""
        return op in self._bucketed

    @contextlib.contextmanager
    def use(self, overrides: OverridesArg) -> Iterator[None]:
        """Within the block (this thread or task), prefer these backends: {'layernorm.*': 'triton'} or 'a=b,c=d'."""
        try:
            layer = parse_overrides(overrides, "use()")
        except ValueError as exc:
            raise CatalogError(str(exc)) from None
        problems = check_layer(layer, self.ops(), self.backends)
        if problems:
            raise CatalogError("; ".join(problem.message for problem in problems), problems)
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
        self,
        op: str,
        platform: Platform | str | None = None,
        dtype: str | None = None,
        *,
        backend: str | None = None,
        tokens: int | None = None,
        call: tuple[tuple[Any, ...], dict[str, Any]] | None = None,
    ) -> Callable[..., Any]:
        """Select and import, falling back to the next eligible backend when an import fails (unless strict)."""
        return self.resolve_spec(op, platform, dtype, backend=backend, tokens=tokens, call=call).load()

    def resolve_spec(
        self,
        op: str,
        platform: Platform | str | None = None,
        dtype: str | None = None,
        *,
        backend: str | None = None,
        tokens: int | None = None,
        call: tuple[tuple[Any, ...], dict[str, Any]] | None = None,
    ) -> KernelSpec:
        """The spec `resolve` runs: the selected backend, imported, or the next eligible one whose import works."""
        while True:
            spec = self.select(op, platform, dtype, backend=backend, tokens=tokens, call=call).require()
            try:
                spec.load()
                return spec
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
        torch_ops = self._torch_ops
        if torch_ops is not None:  # inside a function torch.compile traces, the registered torch op itself
            traced = torch_ops.when_compiling(op)
            if traced is not None:
                return traced  # type: ignore[no-any-return]
        from ..select.handles import make_handle

        handle = make_handle(self, self.info(op), self._scopes)
        self._torch().track(handle, op)  # under torch.compile, it calls the op's torch op once registered
        return handle

    # -- torch ops ------------------------------------------------------------------------------------

    def register_torch_ops(
        self, namespace: str = "kcatalog", ops: Iterable[str] | str | None = None, *, traced: bool = False
    ) -> Mapping[str, Any]:
        """Define each op (default: every op) as a torch op, `torch.ops.<namespace>.<group>_<name>`, for
        torch.compile and CUDA graphs; returns op id -> that op (an OpOverloadPacket).

        The schema comes from the op's signature (arguments in `mutates` are `Tensor(a!)`, `-> None` returns
        nothing); per device type (CPU, CUDA, which ROCm builds of torch use too) the implementation is the one
        this catalog selects there for the call's dtype, with its overrides, fallback and `strict`, resolved once
        per dtype; the fake implementation is the op's `fake:` (its target, or its reference run on fake tensors).
        Imports torch. Idempotent and thread-safe: a second call returns the same ops, and registers only those
        not registered yet. Raises CatalogError, registering none of them, for an op that cannot be a torch op
        (its KC212-KC214 diagnostics, located), and NamespaceTakenError (a CatalogError) for a name already
        defined in the namespace by other code or another Catalog, or registered there with the other `traced`.
        Op handles call the registered op while torch.compile traces them.

        Each op is one opaque node of the compiled graph. With `traced=True`, where the backend chosen for a call
        is declared `traceable: true`, torch.compile traces into it instead (as torch.library.triton_op does):
        Inductor sees its Triton kernels and keeps them in the graph, CUDA graphs included. Opaque is the default
        because it measured faster on an H200 at every shape (benchmarks/results/model_h200.md).
        """
        return self._torch().register(namespace, ops, traced)

    def torch_op(self, op: str, namespace: str = "kcatalog") -> Any | None:
        """`torch.ops.<namespace>.<name>` of an op this catalog registered there, or None."""
        self.info(op)
        torch_ops = self._torch_ops
        registered = None if torch_ops is None else torch_ops.registered(op, namespace)
        return None if registered is None else registered.packet

    def _torch(self) -> TorchOps:
        torch_ops = self._torch_ops
        if torch_ops is None:
            with self._torch_lock:
                if self._torch_ops is None:
                    from ..select.torch_ops import TorchOps

                    self._torch_ops = TorchOps(self, self._scopes)
                torch_ops = self._torch_ops
        return torch_ops

    def prepare(
        self, platform: Platform | str | None = None, ops: Iterable[str] | None = None, *, group: Any = None
    ) -> dict[str, KernelSpec]:
        """Resolve and import every op (or `ops`) now, for each declared dtype and each bucket of a tuned table or
        the plan, so the hot path imports nothing.

        With `group` (a torch.distributed process group, or True for the default one), then check that every
        rank resolved alike (`check_consistent`): a collective, so every rank must call it.
        """
        from ..select.buckets import token_probes

        chosen = {}
        here = Platform.parse(platform, self._devices) if isinstance(platform, str) else platform or self.platform()
        for op in self.ops() if ops is None else ops:
            for dtype in self.info(op).dtypes or (None,):  # an op without dtypes: any, resolved once
                for tokens in token_probes(self, op, here, dtype):  # each bucket's backend, where tuned or planned
                    self.resolve(op, here, dtype, tokens=tokens)
            chosen[op] = self.select(op, platform).require()
        if group is not None:
            self.check_consistent(None if group is True else group)
        return chosen

    def check_consistent(self, group: Any = None) -> None:
        """Raise InconsistentSelectionError, on every rank, when the ranks of `group` (default: the default
        process group) resolve any op differently: its plan, a fallback after a failed import, an override in
        one rank's environment. One all-gather of a 16-hex-digit digest at startup; more only when they differ."""
        from ..select.consistency import check_consistent

        check_consistent(self, group)

    def _note(self, message: str) -> None:
        """Log a warning once per distinct message (fallbacks, ignored overrides)."""
        if message not in self._noted:
            import logging  # only fallbacks and ignored overrides log; keep it off the load path

            self._noted.add(message)
            logging.getLogger("kcatalog").warning(message)


def _gate_reasons(info: OpInfo, call: tuple[tuple[Any, ...], dict[str, Any]]) -> dict[str, str]:
    from ..select.gates import gate_reasons

    return gate_reasons(info, *call)
