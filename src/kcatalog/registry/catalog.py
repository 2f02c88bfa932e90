"""The Catalog a load produces: a frozen value (ops, settings, layers, tuned tables, plan, digest) with pure
queries, and its runtime (runtime/), into which the calls that import, cache or dispatch go in one line each."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..errors import Diagnostic, UnknownOpError
from ..model import (
    CacheOutcome,
    CacheStatus,
    CatalogLayer,
    CatalogSettings,
    KernelSpec,
    LayerMapping,
    LockedPlan,
    OpInfo,
    OverrideSet,
    Required,
)
from ..platform import DEVICES, Platform, PlatformLike
from ..runtime.room import Runtime
from ..select.buckets import Tuning

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..read.files import PathLike
    from ..runtime.dispatch import CallKeywords
    from ..runtime.torch_ops import TorchOpReport
    from ..runtime.trace import Trace
    from ..select.overrides import OverridesArg
    from ..select.selection import Selection, SelectRequest

# Selection, dispatch and startup are imported by their first use, not by a load: a warm load stays lean.

_NOT_LOADED = CacheStatus(CacheOutcome.OFF, "catalog built directly, not loaded")


@dataclass(frozen=True, eq=False)
class Catalog:
    """The loaded catalog: every op and backend, checked at load; kernels are imported on first use.

    The value is frozen and its queries are pure: `info`, `specs`, `select(SelectRequest)`. What imports, caches
    or dispatches (`kernel`, `op`, `use`, `prepare`, torch ops) goes to the catalog's runtime, its one mutable part.

    Backend precedence for a call: a backend named in `kernel`/`select`/`resolve(..., backend=)` (op handles take
    only the op's own arguments) > `with catalog.use(...)` > KCATALOG_OVERRIDES
    > KCATALOG_BACKEND > `load_catalog(overrides=...)` > a plan > a tuned table > per-platform priority
    > per-op priority > catalog default. Every path checks that the backend can run here, and, where deterministic
    or batch-invariant outputs are required (use(), KCATALOG_DETERMINISTIC, load_catalog(), the settings), that it
    promises them.
    """

    ops_by_id: Mapping[str, OpInfo]
    settings: CatalogSettings
    warnings: tuple[Diagnostic, ...] = ()
    _: dataclasses.KW_ONLY  # the rest by name: `layers` once meant override sets, now the catalog's layers
    overrides: tuple[OverrideSet, ...] = ()  # the process-wide override sets (KCATALOG_OVERRIDES, ...), strongest first
    strict: bool = False
    # The promises every selection requires (KCATALOG_DETERMINISTIC, load_catalog(deterministic=...)); the
    # settings' own are on `settings.required`, a `use()` block's on the request.
    required: tuple[Required, ...] = ()
    cache_status: CacheStatus = _NOT_LOADED  # whether the load came from the cache, or why not (see load_catalog)
    layers: tuple[CatalogLayer, ...] = ()  # the layers it was read from, in order (read/layer_sources.py)
    layer_mappings: tuple[LayerMapping, ...] = ()  # the layers files' mappings, for kcatalog.kernelize
    tuning: Tuning = field(default_factory=Tuning)  # the tuned tables and the plan
    digest: str = ""  # the content digest of the catalog's files (plans record it)
    devices: tuple[str, ...] = field(init=False)  # the built-in device kinds, then those the settings declare
    runtime: Runtime = field(init=False, repr=False)  # the one mutable part: imports, caches, handles, torch ops

    def __post_init__(self) -> None:
        frozen = object.__setattr__
        if not all(isinstance(layer, CatalogLayer) for layer in self.layers):
            raise TypeError("Catalog(layers=...) takes CatalogLayers; override sets go in overrides=")
        frozen(self, "ops_by_id", MappingProxyType(dict(sorted(self.ops_by_id.items()))))
        frozen(self, "devices", (*DEVICES, *(d for d in self.settings.devices if d not in DEVICES)))
        runtime = Runtime(self)
        frozen(self, "runtime", runtime)
        # The hot path's two calls are the runtime's own bound methods, shadowing the methods below on the
        # instance: a call costs no frame of ours more.
        frozen(self, "op", runtime.op)
        frozen(self, "kernel", runtime.kernel)

    def __repr__(self) -> str:
        return f"<Catalog {len(self.ops_by_id)} ops, {len(self.specs())} backend specs>"

    def __contains__(self, op: object) -> bool:
        return op in self.ops_by_id

    def __iter__(self) -> Iterator[str]:
        return iter(self.ops_by_id)

    def __len__(self) -> int:
        return len(self.ops_by_id)

    # -- pure queries --------------------------------------------------------------------------------

    @property
    def backends(self) -> tuple[str, ...]:
        """Every backend name the catalog settings declare."""
        return tuple(self.settings.backends)

    @property
    def plan(self) -> LockedPlan | None:
        """The plan loaded with the catalog (load_catalog(plan=...)), or None."""
        return self.tuning.plan

    def ops(self) -> list[str]:
        """All op ids, sorted."""
        return list(self.ops_by_id)

    def info(self, op: str) -> OpInfo:
        """The op's declaration; UnknownOpError (a KeyError) naming the available ops."""
        info = self.ops_by_id.get(op)
        if info is None:
            raise UnknownOpError(op, list(self.ops_by_id))
        return info

    def specs(self, op: str | None = None) -> list[KernelSpec]:
        """The op's backend specs in declaration order; with no op, every spec of every op (ops sorted)."""
        infos = self.ops_by_id.values() if op is None else (self.info(op),)
        return [spec for info in infos for spec in info.backends.values()]

    def select(
        self, request: SelectRequest | str, /, platform: PlatformLike | None = None, dtype: str | None = None,
        **keywords: Unpack[CallKeywords],
    ) -> Selection:  # fmt: skip
        """Which backend runs the op, and why each other one does not.

        Given a SelectRequest, a pure function of the catalog and the request. Given an op id, the runtime makes
        the request with what this process knows (the platform, default: this machine; open `use()` blocks;
        imports that failed; with `call` (args, kwargs), what backends' per-call gates say of it): `tokens`
        (the dispatch argument's leading dimension) picks the bucket of a plan or tuned table, `key` (for an op
        keyed by its shape, its `table_key` sizes in order) the entry, and
        `packages_here=False` takes every backend's `requires` as met (choosing for another machine)."""
        if isinstance(request, str):
            return self.runtime.select(request, platform, dtype, **keywords)
        from ..select.selection import select

        info = self.info(request.op)
        key = request.key or ()
        tuning = self.tuning
        picks = tuning.picks(request.op, request.platform, request.dtype, request.tokens, request.environment, key)
        chosen = select(
            self.settings,
            info,
            request,
            overrides=self.overrides,
            strict=self.strict,
            picks=picks,
            required=self.required,
        )
        missed = tuning.key_miss(request.op, request.platform, request.dtype, key) if info.table_key else None
        return chosen if missed is None else dataclasses.replace(chosen, notes=(*chosen.notes, missed))

    # -- the runtime: imports, caches, handles ---------------------------------------------------------------

    def platform(self, device: str | None = None) -> Platform:
        """This process's platform, detected (importing torch) on first call; given a device type ('cuda',
        'cpu'), the platform a tensor on it means here."""
        return self.runtime.platform(device)

    def op(self, op: str) -> Callable[..., Any]:
        """The op's handle for the hot path (the same one every call): it dispatches on its tensor argument's
        device and dtype, resolving once per (device, dtype); scoped overrides are honoured. Under torch.compile,
        once torch ops are registered, the op's torch op."""
        return self.runtime.op(op)

    def kernel(self, op: str, backend: str | None = None) -> Callable[..., Any]:
        """The op's implementation: the named backend, or the best eligible one here; imported on first use."""
        return self.runtime.kernel(op, backend)

    def resolve(
        self,
        op: str,
        platform: PlatformLike | None = None,
        dtype: str | None = None,
        **keywords: Unpack[CallKeywords],
    ) -> Callable[..., Any]:
        """Select and import, falling back to the next eligible backend when an import fails (unless strict);
        `backend`, `tokens` and `call` as for `select`."""
        return self.runtime.resolve_spec(op, platform, dtype, **keywords).load()

    def use(
        self, overrides: OverridesArg = None, *, deterministic: bool = False, batch_invariant: bool = False
    ) -> AbstractContextManager[None]:
        """Within the block (this thread or task), prefer these backends: {'layernorm.*': 'triton'} or 'a=b,c=d'.

        With `deterministic=True`, select only backends that promise deterministic outputs (repeated runs bitwise
        equal) on the call's device; with `batch_invariant=True`, only those that promise batch-invariant ones
        (each row bitwise equal alone or in a batch). Every path checks it, overrides, plans and tuned tables
        included; an op none of whose backends promises it raises NoEligibleBackendError saying so for each.
        Blocks nest: an inner block adds to what the outer ones require, never lifts it."""
        return self.runtime.use(overrides, deterministic=deterministic, batch_invariant=batch_invariant)

    def trace(self, path: PathLike | None = None) -> Trace:
        """Record what this catalog's op handles and torch ops run while the block is open, in every thread:
        `with catalog.trace() as trace: ...`, then `trace.record` (a TraceRecord): per op, platform, dtype and
        backend, the calls at each leading dimension of the dispatch argument, the fallbacks and their reasons,
        and the shapes no tuned bucket covered. With `path` (`{pid}` and `{rank}` are filled in), the record is
        also written there as JSON (`kcatalog trace show`), merged with the trace the file holds; KCATALOG_TRACE
        does the same for a whole process.

        Off, tracing costs a handle's call nothing: while a trace is open, handles and torch ops run a recording
        twin of their code. Under torch.compile, a torch op's node records each run, a backend traced into the graph
        once per compilation; a CUDA graph records its capture, not its replays. `kernel()` returns the kernel
        itself: its calls are not recorded."""
        return self.runtime.trace(path)

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
        return self.runtime.register_torch_ops(namespace, ops, traced)

    def torch_op(self, op: str, namespace: str = "kcatalog") -> Any | None:
        """`torch.ops.<namespace>.<name>` of an op this catalog registered there, or None."""
        return self.runtime.torch_op(op, namespace)

    def describe_torch_op(
        self, op: str, namespace: str = "kcatalog", platform: Platform | None = None
    ) -> TorchOpReport:
        """How the op is (or would be) registered as a torch op (a TorchOpReport): per device type, the backend
        selected for each dtype on `platform` (default: this machine's)."""
        from ..runtime.torch_ops import describe  # what explain --torch-ops prints: not needed to load

        info = self.info(op)
        registered = self.runtime.torch_ops().registered(op, namespace) if self.torch_op(op, namespace) else None

        def chosen(where: Platform, dtype: str | None) -> str | None:
            found = self.select(op, where, dtype).chosen
            return None if found is None else found.backend

        return describe(info, namespace, platform or self.platform(), registered, chosen)

    def prepare(
        self, platform: PlatformLike | None = None, ops: Iterable[str] | None = None, *, group: Any = None
    ) -> dict[str, KernelSpec]:
        """Resolve and import every op (or `ops`) now, for each declared dtype and each bucket of a tuned table or
        the plan, so the hot path imports nothing.

        With `group` (a torch.distributed process group, or True for the default one), then check that every
        rank resolved alike (`check_consistent`): a collective, so every rank must call it.
        """
        from ..runtime import startup

        chosen = startup.prepare(self.runtime, platform, ops)
        if group is not None:
            self.check_consistent(None if group is True else group)
        return chosen

    def check_consistent(self, group: Any = None) -> None:
        """Raise InconsistentSelectionError, on every rank, when the ranks of `group` (default: the default
        process group) resolve any op differently: its plan, a fallback after a failed import, an override in
        one rank's environment. One all-gather of a 16-hex-digit digest at startup; more only when they differ."""
        from ..runtime import startup

        startup.check_consistent(self.runtime, group)
