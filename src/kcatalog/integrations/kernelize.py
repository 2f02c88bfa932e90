"""kernelize: a catalog's layer mappings applied to one model's module instances, and undone by unkernelize.

Only the model changes (beside an implementation registered once per process with transformers): each matching
module gets its own `forward` (the class, and every other model in the process, are untouched), and a mapping's
`prepare` may re-lay out the module's weights in place (same Parameters, same values), or bind the ops through
the library's own extension point instead, the module then keeping its class's forward and its config naming
the implementation (`Prepared`; transformers' experts interface). Which mapping applies is decided per instance
by its exact class and the mapping's conditions; what was replaced, by which op and backend, and what was left
and why, is the KernelizeReport.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import CatalogError, NamespaceTakenError, NoEligibleBackendError
from ..model import LayerCondition, LayerMapping, Mode
from ..platform import Platform
from ..runtime.dispatch import dtype_name

if TYPE_CHECKING:
    import torch

    from ..registry.catalog import Catalog

MODES = tuple(mode.value for mode in Mode)


@dataclass(frozen=True)
class OpChoice:
    """An op a replaced forward calls, and the backend selected for the module's device and dtype; in training,
    its backward op too (what autograd runs for its gradients), with that op's backend."""

    op: str
    backend: str
    backward: OpChoice | None = None

    def __str__(self) -> str:
        backward = f"; backward {self.backward.op} ({self.backward.backend})" if self.backward else ""
        return f"{self.op} ({self.backend}{backward})"


@dataclass(frozen=True)
class Replaced:
    """A module whose forward was replaced."""

    module: str  # its qualified name in the model ('' for the model itself)
    layer_class: str  # 'package.module:Class'
    mapping: str
    ops: tuple[OpChoice, ...]
    note: str = ""  # how the ops are reached, where the mapping's prepare says (Prepared.note)


@dataclass(frozen=True)
class Prepared:
    """What a mapping's prepare may return instead of its undo: the undo, whether kernelize then replaces the
    instance's forward (False: the prepare bound the ops through the library's own extension point, and the
    module keeps its class's forward), and a note for the report saying which way, and why."""

    undo: Callable[[], None] | None
    replace_forward: bool = True
    note: str = ""


@dataclass(frozen=True)
class Left:
    """A module of a mapped class that keeps its own forward, and why."""

    module: str
    layer_class: str
    reason: str


@dataclass(frozen=True)
class KernelizeReport:
    """What kernelize did: every replaced module, every module of a mapped class left as it was (with the reason),
    and how many modules of each class no mapping names."""

    replaced: tuple[Replaced, ...]
    left: tuple[Left, ...]
    unmapped: Mapping[str, int]
    mode: Mode = Mode.INFERENCE

    def __str__(self) -> str:
        lines = [f"kernelize ({self.mode.value}): {len(self.replaced)} modules replaced, {len(self.left)} left"]
        for item in self.replaced:
            ops = ", ".join(str(choice) for choice in item.ops)
            note = f"; {item.note}" if item.note else ""
            lines.append(f"  {item.module or '<model>'}: {item.layer_class} -> {item.mapping}: {ops}{note}")
        for left in self.left:
            lines.append(f"  {left.module or '<model>'}: {left.layer_class} left: {left.reason}")
        if self.unmapped:
            counts = ", ".join(f"{name} x{count}" for name, count in sorted(self.unmapped.items()))
            lines.append(f"  no mapping: {counts}")
        return "\n".join(lines)


@dataclass
class _Applied:
    """One module kernelize changed (it had no forward of its own before), and its prepare's undo."""

    module: Any
    undo: Callable[[], None] | None


_APPLIED: weakref.WeakKeyDictionary[Any, list[_Applied]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """The shipped catalog, loaded once per process for kernelize(model) without a catalog."""
    from ..load import load_catalog

    return load_catalog()


def kernelize(
    model: torch.nn.Module,
    catalog: Catalog | None = None,
    *,
    device: str | None = None,
    mode: str | Mode = Mode.INFERENCE,
) -> KernelizeReport:
    """Replace the forward of each module of `model` that a layer mapping of `catalog` (default: the shipped
    one) matches, on the instance; returns what was replaced, by which op and backend, and what was left and why.

    A mapping matches a module of exactly one of its classes whose conditions all hold; among several, the
    first in file and declaration order. The ops a forward calls are this catalog's op handles, registered as
    torch ops (namespace 'kcatalog') so that `torch.compile(model, fullgraph=True)` and CUDA graphs see one
    opaque node per call. `device` ('cuda', 'cpu', 'cuda:9.0') is where the backends are selected for (default:
    where each module's parameters are); selection still happens per call, on the tensors' device and dtype.
    `mode` picks the mappings declared for it (the layers file's `modes:`): 'inference' (default) calls the
    op handles, which have no autograd; 'training' calls the registered torch ops, whose backward runs each op's
    `backward:` op (selected per call like any op; the report names it and its backend here), so that gradients
    flow through the catalog's kernels. Weights, state_dict keys and parameter identity stay as they are; a
    second kernelize first undoes the first. Kernelize after moving the model to its device: a mapping's
    prepare lays weights out on the device they are on.
    """
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not supported; kernelize supports {', '.join(MODES)}")
    catalog = catalog if catalog is not None else default_catalog()
    with _LOCK:
        _undo(model)
        run = _Run(catalog, device, Mode(mode))
        try:
            for name, module in model.named_modules():
                run.visit(name, module)
        except BaseException:  # a forward that fails to import, say: put back what was replaced, then raise
            _restore(run.applied)
            raise
        if run.applied:
            _APPLIED[model] = run.applied
        return KernelizeReport(tuple(run.replaced), tuple(run.left), dict(run.unmapped), run.mode)


class _Run:
    """One kernelize call: the catalog's mappings by class, and what was replaced, left and undone so far."""

    def __init__(self, catalog: Catalog, device: str | None, mode: Mode) -> None:
        self.catalog, self.device, self.mode = catalog, device, mode
        mappings = tuple(mapping for mapping in catalog.layer_mappings if mode in mapping.modes)
        self.by_class = _classes(mappings)  # a class mapped in the other mode only is unmapped in this one
        self.needed = sorted({op for mapping in mappings for op in mapping.ops})
        self.namespace: str | None = None  # where the needed ops are registered as torch ops, once one applies
        self.replaced: list[Replaced] = []
        self.left: list[Left] = []
        self.unmapped: Counter[str] = Counter()
        self.applied: list[_Applied] = []

    def visit(self, name: str, module: Any) -> None:
        """Replace the module's forward by the first of its class's mappings that applies, or say why none does."""
        cls = type(module)
        label = f"{cls.__module__}:{cls.__qualname__}"
        mappings = self.by_class.get(cls)
        if not mappings:
            self.unmapped[label] += 1
            return
        if "forward" in vars(module):
            self.left.append(Left(name, label, "its forward is already replaced on the instance (e.g. by hooks)"))
            return
        reasons = []
        for mapping in mappings:
            choices, reason = self.applies(mapping, module)
            if reason is None:
                forward = mapping.forward.load()  # before prepare changes anything
                ops = self.ops(mapping)
                try:
                    prepared = mapping.prepare.load()(module, ops) if mapping.prepare is not None else None
                except ValueError as exc:  # the layer cannot take this forward: the reason says why
                    reasons.append(f"{mapping.name}: {exc}")
                    continue
                if not isinstance(prepared, Prepared):  # an undo, or None
                    prepared = Prepared(prepared)
                self.applied.append(_Applied(module, prepared.undo))
                if prepared.replace_forward:
                    module.forward = functools.partial(forward, module, ops)
                passed = "; ".join(f"not {reason}" for reason in reasons)  # the earlier mappings', and why
                note = "; ".join(part for part in (prepared.note, passed) if part)
                self.replaced.append(Replaced(name, label, mapping.name, choices, note))
                return
            reasons.append(f"{mapping.name}: {reason}")
        self.left.append(Left(name, label, "; ".join(reasons)))

    def applies(self, mapping: LayerMapping, module: Any) -> tuple[tuple[OpChoice, ...], str | None]:
        """The backends the mapping's ops would run on here, or why the mapping does not apply to the module."""
        reason = _unmet(module, mapping.conditions)
        if reason is not None:
            return (), reason
        choices, reason = _choose(self.catalog, mapping, module, self.device, self.mode)
        if reason is None and self.namespace is None:
            self.namespace = _register(self.catalog, self.needed)  # so that torch.compile traces one op per call
        return choices, reason

    def ops(self, mapping: LayerMapping) -> dict[str, Callable[..., Any]]:
        """What the mapping's forward calls: the op handles (inference: no autograd), or the registered torch ops
        (training: their autograd runs the backward ops)."""
        if self.mode is Mode.INFERENCE:
            return {op: self.catalog.op(op) for op in mapping.ops}
        ops = {op: self.catalog.torch_op(op, self.namespace or "kcatalog") for op in mapping.ops}
        return {op: torch_op for op, torch_op in ops.items() if torch_op is not None}  # all are: _register made them


def _register(catalog: Catalog, ops: list[str]) -> str:
    """The ops as torch ops (with the backward ops they name, and their autograd): in namespace 'kcatalog', or,
    where another Catalog of this process holds those names there (it registered the same shipped ops), or this
    one registered some of them there with traced=True, in the first free 'kcatalog_<n>'; op handles call
    whichever. Returns the namespace."""
    for number in range(1, 65):
        namespace = "kcatalog" if number == 1 else f"kcatalog_{number}"
        if all(catalog.torch_op(op, namespace) is not None for op in ops):
            return namespace
        try:
            catalog.register_torch_ops(namespace, ops=ops)
            return namespace
        except NamespaceTakenError:
            continue
    raise CatalogError("kernelize: torch op namespaces kcatalog, kcatalog_2 .. kcatalog_64 are all taken")


def unkernelize(model: torch.nn.Module) -> int:
    """Restore every forward kernelize replaced in `model` (and undo its weight layouts and the implementations it
    set through the library's extension points); returns how many modules it had changed."""
    with _LOCK:
        return _undo(model)


def _undo(model: Any) -> int:
    applied = _APPLIED.pop(model, [])
    _restore(applied)
    return len(applied)


def _restore(applied: list[_Applied]) -> None:
    for item in reversed(applied):
        item.module.__dict__.pop("forward", None)  # the instance attribute (if set): the class's forward shows again
        if item.undo is not None:
            item.undo()


def _classes(mappings: tuple[LayerMapping, ...]) -> dict[type, list[LayerMapping]]:
    """Each mapped class that this process has imported (no instance of any other can exist), with its mappings."""
    found: dict[type, list[LayerMapping]] = {}
    for mapping in mappings:
        for layer_class in mapping.classes:
            obj: Any = sys.modules.get(layer_class.target.module)
            for part in layer_class.target.attr.split("."):
                obj = getattr(obj, part, None)
            if isinstance(obj, type):
                found.setdefault(obj, []).append(mapping)
    return found


def _unmet(module: Any, conditions: tuple[LayerCondition, ...]) -> str | None:
    """Why a condition does not hold on the instance, or None when all hold."""
    for condition in conditions:
        value: Any = module
        for part in condition.attribute.split("."):
            value = getattr(value, part, None)
            if value is None:
                break
        if not any(_same(value, allowed) for allowed in condition.allowed):
            shown = repr(value) if value is None or isinstance(value, (str, int, float, bool)) else type(value).__name__
            wanted = ", ".join("null" if a is None else repr(a) for a in condition.allowed)
            return f"{condition.attribute} is {shown}, not one of: {wanted} (at {condition.location})"
    return None


def _same(value: object, allowed: object) -> bool:
    if allowed is None or value is None:
        return value is allowed
    return type(value) is type(allowed) and value == allowed


def _choose(
    catalog: Catalog, mapping: LayerMapping, module: Any, device: str | None, mode: Mode
) -> tuple[tuple[OpChoice, ...], str | None]:
    """The backend of each op (in training, and of its backward op) for the module's device and dtype, or why
    one cannot run there."""
    tensor = next(iter(module.parameters()), None)
    platform = _platform(catalog, device, tensor)
    dtype = None if tensor is None else dtype_name(tensor.dtype)
    choices = []
    for op in mapping.ops:
        # in training, the op's backward op too: every op of a training mapping has one (KC256 otherwise)
        backward = catalog.info(op).backward if mode is Mode.TRAINING else None
        try:
            backend = _backend(catalog, op, platform, dtype)
            grad = None if backward is None else OpChoice(backward.op, _backend(catalog, backward.op, platform, dtype))
        except (NoEligibleBackendError, CatalogError) as exc:
            return (), f"op {op}: {exc}"
        choices.append(OpChoice(op, backend, grad))
    return tuple(choices), None


def _backend(catalog: Catalog, op: str, platform: Platform, dtype: str | None) -> str:
    return catalog.select(op, platform, dtype).require().backend


def _platform(catalog: Catalog, device: str | None, tensor: torch.Tensor | None) -> Platform:
    if device is not None and ":" in device and not device.split(":")[1].isdigit():
        return Platform.parse(device)  # 'cuda:9.0', 'hip:gfx942'
    kind = device.split(":")[0] if device is not None else (tensor.device.type if tensor is not None else "cpu")
    return catalog.platform(kind)
