"""The typed model every stage shares: plain frozen data, from the linker through the checks and the cache to
the registry and selection. The pydantic models (validate/schema.py) are the schema of the files; they are
converted into these once, by the linker, and the cache stores these as they are (cache/codec.py)."""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import Diagnostic, KernelImportError, Location

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True)
class Capability:
    """Where a backend runs: a device kind and, optionally, an architecture window or exact architectures."""

    device: str
    min_arch: str | None = None
    max_arch: str | None = None
    archs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Target:
    """An importable object, 'package.module:attr.path' split once at link time: never imported to be checked."""

    module: str
    attr: str  # the attribute path inside the module, dotted

    @classmethod
    def parse(cls, text: str) -> Target:
        """'pkg.mod:attr.path' as a Target; the file format's validation has checked the form."""
        module, _, attr = text.partition(":")
        return cls(module, attr)

    def __str__(self) -> str:
        return f"{self.module}:{self.attr}"


class Promise(str, Enum):
    """What a backend may promise of its outputs, weakest first: each promise implies the ones before it."""

    DETERMINISTIC = "deterministic"  # repeated runs on the same inputs (one machine, one build) are bitwise equal
    BATCH_INVARIANT = "batch_invariant"  # each row's output is bitwise equal alone or inside a larger batch

    def implies(self, other: Promise) -> bool:
        """Whether keeping this promise keeps `other` too (batch_invariant implies deterministic)."""
        members = list(Promise)
        return members.index(self) >= members.index(other)


@dataclass(frozen=True)
class Promised:
    """A promise a backend declares (`deterministic:`, `batch_invariant:` in its manifest) and the device kinds it
    holds on (None: every device the backend runs on)."""

    promise: Promise
    devices: tuple[str, ...] | None = None

    def keeps(self, promise: Promise, device: str) -> bool:
        """Whether it promises `promise` (or one that implies it) on this device kind."""
        return self.promise.implies(promise) and (self.devices is None or device in self.devices)


@dataclass(frozen=True)
class Required:
    """A promise every backend selected must keep, and who asks for it: `use(deterministic=True)`,
    KCATALOG_DETERMINISTIC, `load_catalog(batch_invariant=True)`, a settings file's `deterministic: true`."""

    promise: Promise
    source: str  # as a rejection names it: 'use(deterministic=True)', 'KCATALOG_DETERMINISTIC=1', ...


class TargetRole(str, Enum):
    """What a declared target is for: each is checked statically and imported on first use alike."""

    BACKEND = "backend"  # an op's implementation (a KernelSpec)
    GATE = "gate"  # a backend's per-call eligibility predicate (`eligible:`)
    FAKE = "fake"  # an op's fake implementation for torch.compile (`fake:` naming a target)
    FORWARD = "forward"  # a layer mapping's forward (kcatalog.kernelize)
    PREPARE = "prepare"  # a layer mapping's per-instance preparation


class _LazyImport:
    """Imports a target once, on first use, under a lock; a failure is not cached, but the callers that queued
    on the lock while an attempt failed share that failure instead of each retrying."""

    __slots__ = ("_lock", "_value", "_failures", "_cause")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: Any = None
        self._failures = 0
        self._cause: BaseException | None = None

    def get(self, load: Callable[[], Any], failed: Callable[[BaseException], KernelImportError]) -> Any:
        value = self._value
        if value is not None:
            return value
        failures = self._failures
        with self._lock:
            if self._value is None:
                if self._failures != failures and self._cause is not None:  # failed while we waited
                    raise failed(self._cause) from self._cause
                try:
                    self._value = load()
                except Exception as exc:  # any failure of the kernel's own import code is reported the same way
                    self._cause = exc
                    self._failures += 1
                    raise failed(exc) from exc
            return self._value


def import_target(target: Target, allowed_modules: tuple[tuple[str, ...], ...]) -> Any:
    """Import the target's module and walk its attribute path; PermissionError when the object is defined outside
    an allow-list."""
    obj: Any = importlib.import_module(target.module)
    for attr in target.attr.split("."):
        obj = getattr(obj, attr)
    refused = _refused_by_allow_lists(obj, allowed_modules)
    if refused is not None:
        raise refused
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
    target: Target
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
    # torch.compile may trace into the target (runtime/torch_ops.py): Inductor then sees its Triton kernels.
    traceable: bool = False
    # A per-call gate (`eligible:`, runtime/gates.py): called with the call's arguments, once per argument shape.
    gate: Importable | None = None
    # What it promises of its outputs (`deterministic:`, `batch_invariant:`), and where: selection keeps to the
    # backends that promise what a request requires (select/promises.py); `kcatalog test` checks each promise.
    promises: tuple[Promised, ...] = ()
    _lazy: _LazyImport = field(init=False, default_factory=_LazyImport, compare=False, repr=False)
    role: ClassVar[TargetRole] = TargetRole.BACKEND  # as the load checks see a declared target

    def load(self) -> Callable[..., Any]:
        """Import the target (first call only) and return it; KernelImportError names op, backend, target."""
        return self._lazy.get(  # type: ignore[no-any-return]
            lambda: import_target(self.target, self.allowed_modules),
            lambda cause: KernelImportError(self.op, self.backend, str(self.target), cause),
        )

    @property
    def owner(self) -> str:
        """The op it implements (what an Importable calls its owner: the checks read either)."""
        return self.op

    def keeps(self, promise: Promise, device: str) -> bool:
        """Whether it promises `promise` (or one that implies it) on this device kind."""
        return any(declared.keeps(promise, device) for declared in self.promises)


@dataclass(frozen=True)
class Importable:
    """A declared target that is not a backend (a gate, a fake, a layer forward) or a backend's as the checks see
    it: checked statically at load, imported on first use under its layer's allow-lists as kernels are."""

    target: Target
    role: TargetRole
    owner: str  # the op id, or the layer mapping's name (forward, prepare)
    location: Location  # its key in its file
    target_location: Location  # its value, where target diagnostics point
    allowed_modules: tuple[tuple[str, ...], ...] = ()
    layer: str = ""
    backend: str = ""  # the backend whose target (or gate) it is; '' for fakes and layer mappings
    _lazy: _LazyImport = field(init=False, default_factory=_LazyImport, compare=False, repr=False)

    def load(self) -> Callable[..., Any]:
        """Import the target (first call only) and return it; KernelImportError says what it is for."""
        return self._lazy.get(  # type: ignore[no-any-return]
            lambda: import_target(self.target, self.allowed_modules),
            lambda cause: KernelImportError(self.owner, self.backend, str(self.target), cause, what=self.what),
        )

    @property
    def what(self) -> str:
        """'the gate of backend 'triton' of op 'x'', as errors name it."""
        if self.role is TargetRole.BACKEND:
            return f"backend '{self.backend}' of op '{self.owner}'"
        if self.role is TargetRole.GATE:
            return f"the gate of backend '{self.backend}' of op '{self.owner}'"
        if self.role is TargetRole.FAKE:
            return f"the fake of op '{self.owner}'"
        return f"the {self.role.value} of layer mapping '{self.owner}'"

    def with_allow_list(self, prefixes: tuple[str, ...]) -> Importable:
        """The same target, imported under one allow-list more (the caller's)."""
        return dataclasses.replace(self, allowed_modules=(*self.allowed_modules, prefixes))


# A target the load checks read (a backend's spec, or a gate's, fake's or layer forward's): target, its location,
# allow-lists, layer, role and owner.
Declared = KernelSpec | Importable


@dataclass(frozen=True)
class Parameters:
    """An op's parameter list, read once from its signature at link time (link/signature.py)."""

    positional: tuple[str, ...]  # positional-only and positional-or-keyword, in order
    keyword_only: tuple[str, ...]
    required: tuple[str, ...]  # the parameters without a default, in order
    # (parameter, its default as Python source) for each default that is a literal: evaluated (ast.literal_eval)
    # where code is generated to take these parameters, so that a list default stays a fresh list per handle.
    defaults: tuple[tuple[str, str], ...]
    # No *args/**kwargs and every default a literal: generated code can take exactly these parameters.
    exact: bool

    @property
    def names(self) -> tuple[str, ...]:
        """Every parameter, in order."""
        return (*self.positional, *self.keyword_only)


@dataclass(frozen=True)
class Dispatch:
    """The argument an op dispatches on: its name ('' where it has none: a position of an op without a
    signature) and its position (None: given by keyword only)."""

    name: str
    index: int | None


@dataclass(frozen=True)
class KeyDim:
    """One size of an op's table key (`table_key:`): its name and the argument dimension that gives it, found in the
    op's samples at link time ('E': dimension 0 of `gate_up`); `index` is the argument's position (None: keyword-only),
    so that a call given by position is read as well as one given by keyword."""

    name: str
    arg: str
    dim: int
    index: int | None


TableKeyValues = tuple[int, ...]  # a call's (or an entry's) table key: the sizes in the op's `table_key` order


def key_text(names: tuple[str, ...], values: TableKeyValues) -> str:
    """'E=8 H=2048', as tables, explain and reasons show a key ('' for none)."""
    return " ".join(f"{name}={value}" for name, value in zip(names, values))


@dataclass(frozen=True)
class Backward:
    """The op that computes an op's gradients (its manifest's `backward:`), checked against the convention at link
    time (link/backward.py): it takes one gradient per differentiable output of the forward op, then the forward
    op's parameters named by `inputs`, then the outputs of `outputs` and of `saves`, and returns the gradients of
    `grads`, in that order. Autograd keeps for backward only what it takes (runtime/torch_ops.py)."""

    op: str  # the backward op's id, qualified
    grads: tuple[str, ...]  # the forward op's parameters that get a gradient, in the order the backward returns them
    inputs: tuple[str, ...]  # the forward op's parameters handed to the backward op, in order (by default all)
    outputs: tuple[int, ...]  # the forward outputs (by position) handed over next, still differentiable
    saves: tuple[int, ...]  # the forward outputs (by position) handed over last, not differentiable
    location: Location  # the `backward:` key in the forward op's manifest

    @property
    def handed(self) -> tuple[int, ...]:
        """The forward outputs (by position) the backward op takes after the inputs, in its order."""
        return self.outputs + self.saves


@dataclass(frozen=True)
class OpInfo:
    """An op as declared: its contract and its backends in declaration order (extensions included).

    Its samples (needed by tests and benchmarks, never by dispatch) are kept as JSON text, `samples_json`, and
    validated by `kcatalog.tools.inputs.samples_of`, so that a cached catalog loads without pydantic. `parameters`
    and `dispatch` are read from `signature` and `dispatch_arg` at link time (link/signature.py): an OpInfo made or
    replaced by hand sets them together.
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
    dispatch_arg: str | int | None  # as declared: a parameter name or a position
    samples_json: str | None
    location: Location
    backends: Mapping[str, KernelSpec]
    # The signature's parameters (None: no signature, any arguments) and the argument dispatched on, read once.
    parameters: Parameters | None = None
    dispatch: Dispatch = Dispatch("", 0)
    # As a torch.library op (runtime/torch_ops.py): its fake implementation (a target; or, with `fake_reference`,
    # the op's reference backend run on fake tensors; or none), its schema derived from the signature (None when
    # torch.library cannot express it), and why it cannot be registered (KC212-KC214, located; warnings at load
    # where the policy asks for torch ops).
    fake: Importable | None = None
    fake_reference: bool = False
    torch_schema: str | None = None
    torch_problems: tuple[Diagnostic, ...] = ()
    layer: str = ""  # the name of the layer whose manifest declared it
    # The sizes its tuned tables and plans are keyed by beside the token count (`table_key:`), resolved to argument
    # dimensions at link time; () for an op that declares none: one table per platform and dtype, as before.
    table_key: tuple[KeyDim, ...] = ()
    # The op that computes its gradients (`backward:`), linked and checked; None: it has no gradient.
    backward: Backward | None = None

    @property
    def key_names(self) -> tuple[str, ...]:
        """The names of its table key's sizes ('E', 'H', ...), in declaration order."""
        return tuple(dim.name for dim in self.table_key)


@dataclass(frozen=True)
class BackendInfo:
    """A backend the catalog settings declare."""

    description: str | None
    auto: bool = True  # False: priority never picks it, only a name does (see KernelSpec.auto)


@dataclass(frozen=True)
class Policy:
    """Rules each op they govern must satisfy (see LayerPolicy for which ops those are)."""

    required_backends: tuple[str, ...] = ()
    required_platforms: tuple[str, ...] = ()
    torch_ops: bool = False  # each op should become a torch op: its KC212-KC214 problems are warnings at load
    require_reference: bool = False  # each op must name its reference backend

    @property
    def is_empty(self) -> bool:
        """Whether it asks nothing."""
        return self == Policy()


@dataclass(frozen=True)
class LayerPolicy:
    """One layer's rules, from its settings file: `policy` governs the ops the layer declares (and, for backends
    and platforms, the ops it extends), `require_of_all` every op the catalog loads, whichever layer declares it."""

    layer: str  # the layer's name ('' for a catalog read without layers)
    policy: Policy = Policy()
    require_of_all: Policy = Policy()


class StalePolicy(str, Enum):
    """What a catalog does with a stale tuned entry (settings `tuned: {stale: ...}`): one measured on other kernel
    source, another GPU or other versions than those here."""

    USE = "use"  # choose by it all the same, saying so
    IGNORE = "ignore"  # leave it out: priority decides, and explain says why
    ERROR = "error"  # fail the load (the kernels' source), or the first selection on this machine (the environment)


@dataclass(frozen=True)
class CatalogSettings:
    """The catalog settings file: known backends, backend orders (best first), each layer's policy, allow-list."""

    backends: Mapping[str, BackendInfo]
    priority: tuple[str, ...]
    platform_priority: Mapping[str, tuple[str, ...]]
    allowed_modules: tuple[str, ...] | None
    priorities: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # named orders ops refer to
    devices: tuple[str, ...] = ()  # device kinds declared beyond the built-in ones
    policies: tuple[LayerPolicy, ...] = ()  # one per layer with a settings file, in layer order
    stale: StalePolicy = StalePolicy.IGNORE  # `tuned: {stale: ...}` of the last layer that says
    # The promises the settings files require of every backend selected (`deterministic: true`), in layer order.
    required: tuple[Required, ...] = ()

    @property
    def required_platforms(self) -> tuple[str, ...]:
        """Every platform some layer's rules require (of its own ops or of all), in layer order, once each."""
        found = (
            p for lp in self.policies for rules in (lp.policy, lp.require_of_all) for p in rules.required_platforms
        )
        return tuple(dict.fromkeys(found))


LayerValue = str | int | float | bool | None


class Mode(str, Enum):
    """A kernelize mode: which layer mappings apply, and how their forwards reach the ops."""

    INFERENCE = "inference"  # the op handles: no autograd
    TRAINING = "training"  # the registered torch ops, with the backward op each declares


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

    target: Target
    location: Location


@dataclass(frozen=True)
class LayerMapping:
    """A layer mapping (a layers file's entry): instances of `classes` whose `conditions` all hold get `forward`,
    called as ``forward(module, ops, *args, **kwargs)`` with `ops` mapping each declared op id to its op handle.

    `forward` is checked, allow-listed and imported on first use as every kernel target is."""

    name: str
    description: str | None
    classes: tuple[LayerClass, ...]
    forward: Importable
    prepare: Importable | None  # called once per instance before its forward is replaced
    ops: tuple[str, ...]
    conditions: tuple[LayerCondition, ...]
    location: Location
    modes: tuple[Mode, ...] = (Mode.INFERENCE,)  # the kernelize modes it is declared for


@dataclass(frozen=True)
class Plugin:
    """The installed distribution an entry-point layer comes from: what to fix, upgrade or uninstall."""

    distribution: str
    version: str | None  # None where its metadata names none
    entry_point: str  # 'catalog = kc_vendor.catalog'

    def __str__(self) -> str:
        return f"{self.distribution} {self.version}" if self.version else self.distribution


@dataclass(frozen=True)
class CatalogLayer:
    """One layer of a catalog: a directory of manifests with an optional settings file, and where it came from."""

    name: str  # what diagnostics and `kcatalog layers` call it: 'shipped', a distribution's name, a path
    origin: str  # how it was found: the shipped catalog, a path given, KCATALOG_PATH, an entry point
    paths: tuple[str, ...]  # the directories (or files) read for it
    plugin: Plugin | None = None  # for a layer of the installed plugins (entry points)


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
class Environment:
    """What timings depend on besides the kernels' source: the device's name ('NVIDIA H200', 'cpu'), its streaming
    multiprocessors (compute units on ROCm; None: unknown), and the versions of the distributions the backends use
    (torch, triton, what they require; None: not installed)."""

    device: str
    sms: int | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class TunedOp:
    """A tuned table's choices for one op on one platform ('cuda:9.0') and dtype: its buckets, sorted and
    disjoint, each naming the backend measured fastest for its token counts; with what the timings depend on."""

    op: str
    platform: str
    dtype: str
    buckets: tuple[TunedBucket, ...]
    location: Location | None = None  # the op's dtype entry in its table
    layer: str = ""  # the name of the layer whose table it is
    replaced: str | None = None  # the earlier layer whose table for this op x platform x dtype it replaces
    measured_on: Environment | None = None  # the table's provenance: device, SMs, versions as measured
    # Each timed backend's kernel source digest as measured (pyresolve/sources.py); None: the table records
    # none (written by hand, or before tables recorded them): its kernels are not compared.
    kernels: Mapping[str, str] | None = None
    packages: tuple[str, ...] = ()  # the distributions its timings depend on: torch, and what its backends require
    # For an op keyed by its shape (`table_key:`), the sizes this entry was measured for (in the op's key order)
    # and their names; () for an op that declares no key.
    key: TableKeyValues = ()
    key_names: tuple[str, ...] = ()

    @property
    def key_text(self) -> str:
        """'E=8 H=2048' ('' for an entry of an op without a key)."""
        return key_text(self.key_names, self.key)

    @property
    def label(self) -> str:
        """'cuda:9.0 bfloat16' or, keyed, 'cuda:9.0 bfloat16 E=8 H=2048': the table entry as picks name it."""
        return " ".join(part for part in (self.platform, self.dtype, self.key_text) if part)

    @property
    def described(self) -> str:
        """'norm.rms_norm float32 on cpu', keyed 'moe.experts bfloat16 E=8 H=64 on cpu': the entry in messages."""
        return " ".join(part for part in (self.op, self.dtype, self.key_text) if part) + f" on {self.platform}"

    @property
    def timed(self) -> tuple[str, ...]:
        """Every backend the entry's choices rest on: those chosen and those timed against them, sorted."""
        return tuple(sorted({name for b in self.buckets for name in (b.backend, *b.medians_us)}))


@dataclass(frozen=True)
class PlanEntry:
    """What a plan pins for one op and dtype: one backend for every call, or one per bucket of token counts
    (the dispatch argument's leading dimension)."""

    op: str
    dtype: str
    backend: str | None
    buckets: tuple[TunedBucket, ...] = ()
    location: Location | None = None
    key: TableKeyValues = ()  # for an op keyed by its shape, the key the entry pins (see TunedOp.key)
    key_names: tuple[str, ...] = ()

    @property
    def key_text(self) -> str:
        """'E=8 H=2048' ('' for an entry of an op without a key)."""
        return key_text(self.key_names, self.key)


@dataclass(frozen=True)
class LockedPlan:
    """A plan file loaded with the catalog (load_catalog(plan=...)): the platform it is for, the content digest of
    the catalog it was made from, and its entries by (op, dtype, key) (key () for an op keyed by nothing)."""

    path: str
    platform: str
    digest: str
    entries: Mapping[tuple[str, str, TableKeyValues], PlanEntry]


@dataclass(frozen=True)
class BrokenOps:
    """The ops the files declare but that could not be read: an op (or an extension of it) that failed the schema,
    or every op of a manifest lost whole. Their errors are reported where they are written; the stages after
    validation treat these names as declared but broken, so that nothing naming them is reported a second time as
    unknown (a layer mapping, a tuned table, an extension, `require=`)."""

    ops: tuple[str, ...] = ()  # op ids
    groups: tuple[str, ...] = ()  # every op of these groups: a manifest of the group was lost before its ops were read
    any_op: bool = False  # a manifest was lost before even its group could be read: it may have declared any op

    def covers(self, op_id: str) -> bool:
        """Whether `op_id` may be one of the ops that could not be read."""
        return self.any_op or op_id in self.ops or op_id.partition(".")[0] in self.groups

    def __bool__(self) -> bool:
        return self.any_op or bool(self.ops or self.groups)


NOTHING_BROKEN = BrokenOps()


@dataclass(frozen=True)
class LinkedCatalog:
    """What linking the files yields: settings and ops, plus every backend declaration read."""

    settings: CatalogSettings | None  # None when the settings file is missing or invalid
    ops: Mapping[str, OpInfo]
    # Every target declared: each backend (duplicates included: they are reported, and checked too), gate, fake
    # and layer forward, checked as targets are.
    declared: tuple[Declared, ...]
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
    # The ops declared but broken (BrokenOps): never among `ops`; empty whenever the catalog links without errors.
    broken: BrokenOps = NOTHING_BROKEN

    @property
    def known(self) -> tuple[str, ...]:
        """The backend names the settings file declares."""
        return tuple(self.settings.backends) if self.settings is not None else ()

    def with_allow_list(self, prefixes: tuple[str, ...]) -> LinkedCatalog:
        """The caller's allow-list added to every target the catalog imports (backends, gates, fakes, layer
        forwards), so that importing checks it too; `declared` is left as it is: the load checks, which read it,
        have checked the caller's list already."""

        def spec(spec: KernelSpec) -> KernelSpec:
            gate = spec.gate and spec.gate.with_allow_list(prefixes)
            return dataclasses.replace(spec, allowed_modules=(*spec.allowed_modules, prefixes), gate=gate)

        ops = {
            op_id: dataclasses.replace(
                info,
                backends=MappingProxyType({name: spec(s) for name, s in info.backends.items()}),
                fake=info.fake and info.fake.with_allow_list(prefixes),
            )
            for op_id, info in self.ops.items()
        }
        mappings = tuple(
            dataclasses.replace(
                m,
                forward=m.forward.with_allow_list(prefixes),
                prepare=m.prepare and m.prepare.with_allow_list(prefixes),
            )
            for m in self.layer_mappings
        )
        return dataclasses.replace(self, ops=MappingProxyType(ops), layer_mappings=mappings)


@dataclass(frozen=True)
class ModuleFingerprint:
    """What a static check of one module depended on (see pyresolve/fingerprints.py): reused only while it holds."""

    module: str
    found: tuple[Any, ...]


@dataclass(frozen=True)
class SourceDigests:
    """The kernel source digests of one load (pyresolve/sources.py) by target text (None: no source to read here),
    and the modules read for them: reused by a later load only while every one is unchanged."""

    digests: Mapping[str, str | None]
    modules: tuple[ModuleFingerprint, ...]


@dataclass(frozen=True)
class TargetChecks:
    """The static target checks of one load: each target's problem (None: it resolves), and the modules read."""

    problems: Mapping[str, Diagnostic | None]  # by the target's text
    modules: tuple[ModuleFingerprint, ...]
    # Where each target's object is defined, where the sources show it (a re-export followed to its source).
    defined_in: Mapping[str, str | None] = field(default_factory=dict)
    # For a target not verifiable statically (a warning), the modules it was followed into before the sources
    # stopped showing more (pyresolve's Resolution.imported_from): the allow-lists apply to them too.
    imported_from: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The layer classes that name no class: what they name instead ('a function', 'a module').
    non_classes: Mapping[str, str] = field(default_factory=dict)


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


# The overrides of one source (KCATALOG_OVERRIDES, KCATALOG_BACKEND, overrides=, a `use()` block).
OverrideSet = tuple[Override, ...]


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
