"""The typed model every stage shares: plain frozen data, from the linker through the checks and the cache to
the registry and selection. The pydantic models (validate/schema.py) are the schema of the files; they are
converted into these once, by the linker, and the cache stores these as they are (cache/codec.py)."""

from __future__ import annotations

import fnmatch
import functools
import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from .errors import Diagnostic, KernelImportError, Location

if TYPE_CHECKING:
    from pathlib import Path

    from .validate.schema import SamplesDecl


@dataclass(frozen=True)
class Capability:
    """Where a backend runs: a device kind and, optionally, an architecture window or exact architectures."""

    device: str
    min_arch: str | None = None
    max_arch: str | None = None
    archs: tuple[str, ...] | None = None


class _LazyImport:
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
        refused = _refused_by_allow_lists(obj, spec.allowed_modules)
    except Exception as exc:  # any failure of the kernel's own import code is reported the same way
        raise KernelImportError(spec.op, spec.backend, spec.target, exc) from exc
    if refused is not None:
        raise KernelImportError(spec.op, spec.backend, spec.target, refused) from refused
    return obj


def defining_module(obj: Any) -> str:
    """The module an object was defined in: its `__module__`, else its type's (an instance's class)."""
    module = getattr(obj, "__module__", None)
    return module if isinstance(module, str) else type(obj).__module__


def is_under(module: str, prefixes: tuple[str, ...]) -> bool:
    """Whether a module is one of the prefixes or inside one of them (as packages, not as strings)."""
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def _refused_by_allow_lists(obj: Any, allow_lists: tuple[tuple[str, ...], ...]) -> PermissionError | None:
    """The allow-lists govern where the object returned is defined, not only the module a target names:
    `allowed.module:torch.os.system` reaches os.system, defined in posix, and is refused here."""
    if not allow_lists:
        return None
    module = defining_module(obj)
    for prefixes in allow_lists:
        if not is_under(module, prefixes):
            return PermissionError(
                f"the object is defined in module '{module}', outside the allowed modules ({', '.join(prefixes)})"
            )
    return None


@dataclass(frozen=True)
class KernelSpec:
    """One backend implementation of an op, as declared; `load()` imports it on first use."""

    op: str
    backend: str
    target: str
    requires: tuple[str, ...]
    capabilities: tuple[Capability, ...]
    dtypes: tuple[str, ...] | None  # None: any dtype (neither the op nor the backend lists any)
    location: Location  # the backend's key in its manifest
    target_location: Location  # its `target:` value, where target diagnostics point
    # Module prefixes the imported object must be defined under, one tuple per list that applies (the
    # settings file's, the caller's): checked on import, before the object is returned.
    allowed_modules: tuple[tuple[str, ...], ...] = ()
    # False: priority never picks it (a compiling backend, say); only `backend=`, an override, a plan or a tuned
    # table does. From the backend's `auto:` in its manifest, else the settings' for that backend.
    auto: bool = True
    layer: str = ""  # the name of the layer whose manifest declared it (see CatalogLayer)
    # torch.compile may trace into the target (select/torch_ops.py): Inductor then sees its Triton kernels.
    traceable: bool = False
    # A per-call gate 'module:attr' (select/gates.py): called with the call's arguments, once per argument shape.
    eligible: str | None = None
    _lazy: _LazyImport = field(init=False, default_factory=_LazyImport, compare=False, repr=False)

    def load(self) -> Callable[..., Any]:
        """Import the target (first call only) and return it; KernelImportError names op, backend, target."""
        return self._lazy.get(self)  # type: ignore[no-any-return]


FAKE_REFERENCE = "reference"  # `fake: reference`: the op's reference backend, run on fake (meta) tensors


@dataclass(frozen=True)
class OpInfo:
    """An op as declared: its contract and its backends in declaration order (extensions included).

    `samples` (needed by tests and benchmarks, never by dispatch) is kept as JSON text and validated into
    its model on first use, so that a cached catalog loads without pydantic.
    """

    id: str
    group: str
    description: str | None
    signature: str | None  # None: any arguments, forwarded as given
    reference: str | None
    dtypes: tuple[str, ...] | None  # None: any dtype
    mutates: tuple[str, ...]
    tolerance: Mapping[str, float]
    priority: tuple[str, ...] | None
    platform_priority: Mapping[str, tuple[str, ...]]
    dispatch_arg: str | int | None  # a parameter name or a position
    samples_json: str | None
    location: Location
    backends: Mapping[str, KernelSpec]
    # As a torch.library op (select/torch_ops.py): its fake implementation ('reference', a target, or None), its
    # schema derived from the signature (None when torch.library cannot express it), and why it cannot be
    # registered (KC212-KC214, located; warnings at load where the policy asks for torch ops).
    fake: str | None = None
    torch_schema: str | None = None
    torch_problems: tuple[Diagnostic, ...] = ()
    layer: str = ""  # the name of the layer whose manifest declared it

    @functools.cached_property
    def samples(self) -> SamplesDecl | None:
        """The op's declared samples, validated (they were checked at load, so this cannot fail)."""
        if self.samples_json is None:
            return None
        from .validate.schema import SamplesDecl

        return SamplesDecl.model_validate_json(self.samples_json)


@dataclass(frozen=True)
class BackendInfo:
    """A backend the catalog settings declare."""

    description: str | None
    auto: bool = True  # False: priority never picks it, only a name does (see KernelSpec.auto)


@dataclass(frozen=True)
class Policy:
    """Rules every op of the catalog must satisfy."""

    required_backends: tuple[str, ...] = ()
    required_platforms: tuple[str, ...] = ()
    torch_ops: bool = False  # every op should become a torch op: its KC212-KC214 problems are warnings at load
    require_reference: bool = False  # every op must name its reference backend


@dataclass(frozen=True)
class CatalogSettings:
    """The catalog settings file: known backends, backend orders (best first), policy, allow-list."""

    backends: Mapping[str, BackendInfo]
    priority: tuple[str, ...]
    platform_priority: Mapping[str, tuple[str, ...]]
    policy: Policy
    allowed_modules: tuple[str, ...] | None
    priorities: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # named orders ops refer to
    devices: tuple[str, ...] = ()  # device kinds declared beyond the built-in ones


LayerValue = str | int | float | bool | None


@dataclass(frozen=True)
class LayerCondition:
    """A condition on a layer instance: the value at a dotted attribute path ('config.hidden_act') is one of these."""

    attribute: str
    allowed: tuple[LayerValue, ...]
    location: Location


@dataclass(frozen=True)
class LayerClass:
    """A model layer class a mapping applies to, as a target 'package.module:Class'; checked statically at load,
    never imported by kcatalog (kernelize finds it among the modules the application has imported)."""

    target: str
    location: Location


@dataclass(frozen=True)
class LayerMapping:
    """A layer mapping (a layers file's entry): instances of `classes` whose `conditions` all hold get `forward`,
    called as ``forward(module, ops, *args, **kwargs)`` with `ops` mapping each declared op id to its op handle.

    `forward` is a KernelSpec (op 'layers:<name>', backend 'forward') so that it is checked, allow-listed and
    imported on first use as every kernel target is."""

    name: str
    description: str | None
    classes: tuple[LayerClass, ...]
    forward: KernelSpec
    prepare: KernelSpec | None  # called once per instance before its forward is replaced (backend 'prepare')
    ops: tuple[str, ...]
    conditions: tuple[LayerCondition, ...]
    location: Location


@dataclass(frozen=True)
class CatalogLayer:
    """One layer of a catalog: a directory of manifests with an optional settings file, and where it came from."""

    name: str  # what diagnostics and `kcatalog layers` call it: 'shipped', a distribution's name, a path
    origin: str  # how it was found: the shipped catalog, a path given, KCATALOG_PATH, an entry point
    paths: tuple[str, ...]  # the directories (or files) read for it


@dataclass(frozen=True)
class TunedBucket:
    """One token-count bucket of a tuned table: the dispatch argument's leading dimension in [low, high] (high
    None: no upper bound), the backend measured fastest there, and every candidate's median in microseconds."""

    low: int
    high: int | None
    backend: str
    medians_us: Mapping[str, float]
    location: Location  # the bucket's entry in its table

    def covers(self, tokens: int) -> bool:
        """Whether a call with this leading dimension falls in the bucket."""
        return self.low <= tokens and (self.high is None or tokens <= self.high)

    @property
    def span(self) -> str:
        """'T∈[17, 64]', as explain shows it."""
        return f"T∈[{self.low}, {'∞' if self.high is None else self.high}]"


@dataclass(frozen=True)
class TunedOp:
    """A tuned table's choices for one op on one platform ('cuda:9.0') and dtype: buckets sorted, disjoint."""

    op: str
    platform: str
    dtype: str
    buckets: tuple[TunedBucket, ...]


@dataclass(frozen=True)
class PlanEntry:
    """What a plan pins for one op and dtype: one backend for every call, or one per bucket of token counts."""

    op: str
    dtype: str
    backend: str | None
    buckets: tuple[TunedBucket, ...] = ()
    location: Location | None = None


@dataclass(frozen=True)
class LockedPlan:
    """A plan file loaded with the catalog (load_catalog(plan=...)): the platform it is for, the content digest of
    the catalog it was made from, and its entries by (op, dtype)."""

    path: str
    platform: str
    digest: str
    entries: Mapping[tuple[str, str], PlanEntry]


@dataclass(frozen=True)
class LinkedCatalog:
    """What linking the files yields: settings and ops, plus every backend declaration read."""

    settings: CatalogSettings | None  # None when the settings file is missing or invalid
    ops: Mapping[str, OpInfo]
    # Every backend declaration, duplicates included (they are reported, and their targets checked too), and
    # every fake given as a target (backend 'fake'), checked as targets are.
    declared: tuple[KernelSpec, ...]
    # The linker's warnings (KC212-KC214 where the policy asks for torch ops), for a load from the cache to report
    # as a load that links the files does.
    warnings: tuple[Diagnostic, ...] = ()
    # The layer mappings of the catalog's layers files (kcatalog.kernelize), in file then declaration order; their
    # forwards are among `declared`.
    layer_mappings: tuple[LayerMapping, ...] = ()
    # The tuned tables' choices (validated and checked against the ops), one per op x platform x dtype.
    tuned: tuple[TunedOp, ...] = ()
    # The text digests of the files that hold them: a plan's content digest leaves them out, since the plan
    # holds their choices (a plan made with `--tuned DIR` holds without DIR).
    tuned_texts: tuple[str, ...] = ()

    @property
    def known(self) -> tuple[str, ...]:
        """The backend names the settings file declares."""
        return tuple(self.settings.backends) if self.settings is not None else ()


@dataclass(frozen=True)
class ModuleFingerprint:
    """What a static check of one module depended on (see check/fingerprints.py): reused only while it holds."""

    module: str
    found: tuple[Any, ...]


@dataclass(frozen=True)
class TargetChecks:
    """The static target checks of one load: each target's problem (None: it resolves), and the modules read."""

    problems: Mapping[str, Diagnostic | None]
    modules: tuple[ModuleFingerprint, ...]
    # Where each target's object is defined, where the sources show it (a re-export followed to its source).
    defined_in: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Rejected:
    """A backend that will not run, and why."""

    backend: str
    reason: str
    eligible: bool = False  # it could run here: ranked below the chosen one, or `auto: false` and not named


@dataclass(frozen=True)
class Override:
    """Use `backend` for ops matching `pattern` (an op id or a glob such as 'layernorm.*')."""

    pattern: str
    backend: str
    source: str  # where it was set: KCATALOG_OVERRIDES, KCATALOG_BACKEND, overrides=, use()

    def __str__(self) -> str:
        return f"{self.source} {self.pattern}={self.backend}"

    @property
    def specificity(self) -> tuple[int, int]:
        """Exact ids beat globs; among globs, the longer pattern is the more specific."""
        is_exact = not any(ch in self.pattern for ch in "*?[")
        return (int(is_exact), len(self.pattern))

    def matches(self, op: str) -> bool:
        """Whether the op id matches the pattern."""
        return fnmatch.fnmatchcase(op, self.pattern)


# One source of overrides (KCATALOG_OVERRIDES, KCATALOG_BACKEND, overrides=, a `use()` block).
Layer = tuple[Override, ...]


class CacheOutcome(str, Enum):
    """What the load cache did for one load."""

    OFF = "off"  # not consulted: `reason` says why
    HIT = "hit"  # the entry at `path` was used as it was
    REFRESHED = "refreshed"  # the entry was used, its target checks redone (`reason`) and stored again
    WRITTEN = "written"  # no usable entry (`reason`); the files were read and a new entry stored at `path`
    NOT_WRITTEN = "not written"  # no usable entry (`reason`), and none stored (`write_error`)


@dataclass(frozen=True)
class CacheStatus:
    """What the load cache did, and why (see load_catalog)."""

    outcome: CacheOutcome
    reason: str = ""
    path: Path | None = None
    write_error: str = ""

    def __str__(self) -> str:
        parts = [self.outcome.value] + [part for part in (self.reason, self.write_error) if part]
        return (
            ": ".join(parts[:2]) + "".join(f"; {part}" for part in parts[2:]) + (f" ({self.path})" if self.path else "")
        )
