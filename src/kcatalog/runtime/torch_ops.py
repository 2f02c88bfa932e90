"""Catalog ops as torch.library ops (Catalog.register_torch_ops): one torch op per catalog op, its schema derived
from the manifest, per device type the implementation the catalog selects there, and a fake for torch.compile.

Torch is imported only when ops are registered; `describe` (what `kcatalog explain --torch-ops` prints) needs none.
"""

from __future__ import annotations

import bisect
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..errors import CatalogError, Diagnostic, NamespaceTakenError
from ..link.torch_schema import torch_op_name
from ..model import Importable, OpInfo, TableKeyValues
from ..platform import Platform
from .dispatch import Dispatcher, choice, dtype_name, resolve_once
from .gates import is_gated, make_gated
from .handles import (
    RECORDING_BODY,
    RECORDING_BUCKETED_BODY,
    CallCode,
    begin,
    bind_torch_op,
    bucket_dispatch,
    call_code,
    generate,
    key_code,
    recording_names,
    twin,
)
from .trace import Swap, tokens_of, twin_code
from .trace_file import Via

# The dispatch keys an op gets an implementation for, and the device type each one means. Torch's ROCm build
# dispatches HIP tensors through the CUDA key too; the detected platform says which of the two this is.
DEVICE_TYPES: Mapping[str, str] = MappingProxyType({"CPU": "cpu", "CUDA": "cuda"})
_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Torch's operator registry is process-wide: which registry defined each qualified name, for the collision error.
_DEFINED: dict[str, TorchOps] = {}
_DEFINED_LOCK = threading.Lock()

# One implementation per device type, generated with the op's parameter list like the op handle: the dispatcher
# passes every argument (defaults filled in), keyword-only ones as keywords.
_IMPL = """\
def impl({params}):
    if _kc_scopes.active:  # a `with catalog.use(...)` is open somewhere: honour it, uncached
        return _kc_resolve({tensor}.dtype)({call})
    _kc_fn = _kc_by_dtype.get({tensor}.dtype)
    if _kc_fn is None:
        _kc_fn = _kc_first_call({tensor}.dtype)
    return _kc_fn({call})
"""
# For an op chosen by token count: the real leading dimension at run time picks the bucket, in eager mode and in
# a compiled graph alike (the op is opaque there: static or dynamic shapes, each call sees its tensors' sizes).
_IMPL_BUCKETED = (
    _IMPL.replace("_kc_resolve({tensor}.dtype)", "_kc_resolve({tensor}.dtype, {tensor}.shape[0])")
    .replace("_kc_first_call({tensor}.dtype)", "_kc_first_bucketed({tensor})")
    .replace(
        "    return _kc_fn({call})\n", "    return _kc_fn.fns[_kc_bisect(_kc_fn.edges, {tensor}.shape[0])]({call})\n"
    )
)

# For an op keyed by its shape (`table_key`): the call's key read from its arguments picks the entry, then the bucket.
_IMPL_KEYED = (
    _IMPL.replace("_kc_resolve({tensor}.dtype)", "_kc_resolve({tensor}.dtype, {tensor}.shape[0], ({key},))")
    .replace("_kc_by_dtype.get({tensor}.dtype)", "_kc_by_dtype.get(({tensor}.dtype, {key}))")
    .replace("_kc_first_call({tensor}.dtype)", "_kc_first_keyed({tensor}, ({key},))")
    .replace(
        "    return _kc_fn({call})\n", "    return _kc_fn.fns[_kc_bisect(_kc_fn.edges, {tensor}.shape[0])]({call})\n"
    )
)


@dataclass(frozen=True)
class TorchOp:
    """One catalog op registered as a torch op."""

    op: str  # the catalog op id
    qualname: str  # 'kcatalog::layernorm_rms_norm'
    schema: str  # without the name: '(Tensor x, Tensor weight, float eps=1e-06) -> Tensor'
    packet: Any  # torch.ops.kcatalog.layernorm_rms_norm
    traced: bool  # torch.compile traces into the chosen backend where it is traceable (register(traced=))


class TorchOps:
    """The torch ops one catalog has registered, by namespace, and the op handles to route through them."""

    def __init__(
        self,
        info: Callable[[str], OpInfo],
        ops: Callable[[], list[str]],
        dispatcher: Callable[[str, str | None], Dispatcher],
        note: Callable[[str], None],
    ) -> None:
        # Registered torch ops live as long as the process, and their implementations use the runtime's callables.
        self._info = info
        self._ops = ops
        self._dispatcher = dispatcher  # (op, device type) -> what the op's implementation for it asks
        self._note = note
        self.lock = threading.Lock()
        self.ops: dict[tuple[str, str], TorchOp] = {}  # (namespace, op id) -> op
        self._libraries: list[Any] = []  # torch.library.Library objects: a registration lives as long as its own
        self._routed: dict[str, Any] = {}  # op id -> the overload handles call under torch.compile (the first)
        self._handles: dict[str, weakref.WeakSet[Callable[..., Any]]] = {}
        self._is_compiling: Callable[[], bool] | None = None

    def track(self, handle: Callable[..., Any], op: str) -> None:
        """Route a new op handle through the op's torch op under torch.compile, now or once it is registered."""
        with self.lock:
            self._handles.setdefault(op, weakref.WeakSet()).add(handle)
            if op in self._routed and self._is_compiling is not None:
                bind_torch_op(handle, self._routed[op], self._is_compiling)

    def when_compiling(self, op: str) -> Any | None:
        """The torch op a handle of `op` calls, while torch.compile traces the caller; None otherwise."""
        is_compiling = self._is_compiling
        return self._routed.get(op) if is_compiling is not None and is_compiling() else None

    def registered(self, op: str, namespace: str) -> TorchOp | None:
        """The op as registered under the namespace, or None."""
        return self.ops.get((namespace, op))

    def register(self, namespace: str, ops: Iterable[str] | str | None, traced: bool = False) -> Mapping[str, Any]:
        """See Catalog.register_torch_ops."""
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise CatalogError(f"torch op namespace {namespace!r} is not an identifier")
        wanted = [ops] if isinstance(ops, str) else list(self._ops() if ops is None else ops)
        asked = [self._info(op) for op in dict.fromkeys(wanted)]  # UnknownOpError names what exists
        infos = _with_backwards(asked, self._info)  # a backward op is registered with its forward op
        import torch

        with self.lock:
            other = [
                op.op
                for op in map(self.ops.get, ((namespace, info.id) for info in infos))
                if op and op.traced != traced
            ]
            if other:
                raise NamespaceTakenError(
                    f"ops {', '.join(other)} are already registered under '{namespace}' with traced={not traced}"
                )
            new = [info for info in infos if (namespace, info.id) not in self.ops]
            if new:
                self._define(torch, namespace, new, traced)
            return MappingProxyType({info.id: self.ops[(namespace, info.id)].packet for info in asked})

    def _define(self, torch: Any, namespace: str, infos: list[OpInfo], traced: bool) -> None:
        problems = [problem for info in infos for problem in info.torch_problems]
        if problems:
            shown = "\n".join(f"  {problem}" for problem in problems)
            ops = ", ".join(dict.fromkeys(info.id for info in infos if info.torch_problems))
            raise CatalogError(f"cannot register {ops} as torch ops:\n{shown}", problems)
        with _DEFINED_LOCK:
            self._check_names(torch, namespace, infos)
            library = torch.library.Library(namespace, "FRAGMENT")
            defined: list[TorchOp] = []
            try:
                for info in infos:
                    defined.append(self._define_one(torch, library, namespace, info, traced))
            except Exception as exc:
                library._destroy()  # none of this call's ops stays half-registered
                raise CatalogError(f"torch.library refused op '{info.id}' ({info.location}): {exc}") from exc
            for op in defined:
                self.ops[(namespace, op.op)] = op
            try:
                for info in infos:
                    if info.backward is not None:
                        backward = self.ops[(namespace, info.backward.op)]
                        forward = self.ops[(namespace, info.id)]
                        _register_autograd(torch, library, forward, info, backward, self._info(backward.op))
            except Exception as exc:
                for op in defined:
                    del self.ops[(namespace, op.op)]
                library._destroy()
                raise CatalogError(
                    f"torch.library refused the autograd of op '{info.id}' ({info.location}): {exc}"
                ) from exc
            self._libraries.append(library)
            for op in defined:
                _DEFINED[op.qualname] = self
        self._is_compiling = torch.compiler.is_compiling
        for op in defined:
            if op.op not in self._routed:
                self._routed[op.op] = op.packet.default
                for handle in list(self._handles.get(op.op, ())):
                    bind_torch_op(handle, op.packet.default, torch.compiler.is_compiling)

    def _check_names(self, torch: Any, namespace: str, infos: list[OpInfo]) -> None:
        taken = []
        for info in infos:
            qualname = f"{namespace}::{torch_op_name(info.id)}"
            owner = _DEFINED.get(qualname)
            if owner is not None or hasattr(getattr(torch.ops, namespace), torch_op_name(info.id)):
                by = "another Catalog" if owner is not None else "code outside this catalog"
                taken.append(f"op '{info.id}' ({info.location}): torch op '{qualname}' is already defined by {by}")
        if taken:
            raise NamespaceTakenError(
                "torch op names already taken; register under another namespace=:\n"
                + "\n".join(f"  {line}" for line in taken)
            )

    def _define_one(self, torch: Any, library: Any, namespace: str, info: OpInfo, traced: bool) -> TorchOp:
        name = torch_op_name(info.id)
        assert info.torch_schema is not None  # an op without one has a torch problem, refused above
        library.define(f"{name}{info.torch_schema}", tags=(torch.Tag.pt2_compliant_tag,))
        code = call_code(info, exact=True)  # a schema torch.library expresses has an exact parameter list
        for key, device in DEVICE_TYPES.items():
            library.impl(name, self._impl(info, device, code), key)
        torch.library.register_fake(f"{namespace}::{name}", _fake(info), lib=library)
        if traced and any(spec.traceable for spec in info.backends.values()) and _can_trace(torch):
            rule = self._decomposition(torch, info, code.tensor)
            torch.library.register_torch_dispatch(f"{namespace}::{name}", _functional_mode(), rule, lib=library)
        packet = getattr(getattr(torch.ops, namespace), name)
        return TorchOp(info.id, f"{namespace}::{name}", info.torch_schema, packet, traced)

    def _impl(self, info: OpInfo, device: str, code: CallCode) -> Callable[..., Any]:
        """The implementation for one device type: the catalog's choice for each dtype, resolved on first use."""
        op_id = info.id
        dispatcher = self._dispatcher(op_id, device)
        lock = threading.Lock()
        by_dtype: dict[Any, Callable[..., Any]] = {}

        def resolve(dtype: Any, tokens: int | None = None, key: TableKeyValues | None = None) -> Callable[..., Any]:
            return dispatcher.resolve(device, dtype_name(dtype), tokens, None, key).load()

        def resolve_locked(
            dtype: Any, tokens: int | None = None, key: TableKeyValues | None = None
        ) -> Callable[..., Any]:
            with lock:
                return resolve(dtype, tokens, key)

        def first_bucketed(tensor: Any) -> Any:
            return resolve_once(lock, by_dtype, tensor.dtype, lambda: bucket_dispatch(dispatcher, device, tensor))

        def first_keyed(tensor: Any, key: TableKeyValues) -> Any:
            found = (tensor.dtype, *key)
            return resolve_once(lock, by_dtype, found, lambda: bucket_dispatch(dispatcher, device, tensor, key))

        def first_call(dtype: Any) -> Callable[..., Any]:
            return resolve_once(lock, by_dtype, dtype, lambda: resolve(dtype))

        namespace: dict[str, Any] = {
            "_kc_scopes": dispatcher.scopes,
            "_kc_resolve": resolve_locked,
            "_kc_first_call": first_call,
            "_kc_by_dtype": by_dtype,
            "_kc_first_bucketed": first_bucketed,
            "_kc_first_keyed": first_keyed,
            "_kc_bisect": bisect.bisect_left,
        }
        template = _IMPL_BUCKETED if dispatcher.bucketed else _IMPL
        if dispatcher.key_of is not None:
            template = _IMPL_KEYED
        gated = is_gated(info)
        if gated:
            template, namespace["_kc_gated"] = (
                "def impl({params}):\n    return _kc_gated({call})\n",
                make_gated(info, dispatcher, Via.TORCH_OP),
            )
        key = key_code(info, code) if template is _IMPL_KEYED else ""
        filename = f"<kcatalog torch op {op_id} {device}>"
        impl = generate(template, code, namespace, "impl", filename, key)
        impl.__name__ = impl.__qualname__ = f"{torch_op_name(op_id)}_{device}"
        if not gated:  # while a trace is open, the implementation counts its calls as a handle does
            namespace.update(recording_names(dispatcher, namespace, lock, Via.TORCH_OP))
            body = RECORDING_BUCKETED_BODY if dispatcher.bucketed else RECORDING_BODY
            if template is _IMPL_KEYED:  # counted the slow way, then the implementation's own code
                namespace["_kc_plain"] = twin(impl)
                body = "    _kc_count_keyed({tensor}, ({key},))\n    return _kc_plain({call})\n"
            source = ("def impl({params}):\n" + body).format(
                params=code.params, tensor=code.tensor, call=code.call, key=key
            )
            swap = Swap(impl, twin_code(source, namespace, "impl", filename), lambda rec: begin(namespace, rec))
            dispatcher.trace.register(swap)
        return impl

    def _decomposition(self, torch: Any, info: OpInfo, dispatch: str) -> Callable[..., Any]:
        """The op's rule under functionalization (AOTAutograd, inside torch.compile), as torch.library.triton_op
        registers one: trace into the chosen backend where it is traceable, else keep the op as one node."""
        from torch._subclasses.fake_tensor import FakeTensor
        from torch._subclasses.functional_tensor import FunctionalTensor
        from torch.export._trace import custom_triton_ops_decomposition_disabled

        from ..kernels import tracing

        op_id = info.id
        dispatcher = self._dispatcher(op_id, None)
        # The dispatcher passes positional parameters positionally, keyword-only ones as keywords.
        assert info.parameters is not None  # an op with a torch schema has a signature
        index = info.dispatch.index if info.dispatch.index is not None else len(info.parameters.positional)
        plain = (torch.Tensor, FunctionalTensor)
        bucketed = dispatcher.bucketed
        key_of = dispatcher.key_of
        gated = is_gated(info)

        def rule(mode: Any, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            tensor = args[index] if index < len(args) else kwargs[dispatch]
            tokens = None
            if gated:  # a per-call gate is asked about real arguments, at run time: the op stays one node
                return mode.__torch_dispatch__(func, types, args, kwargs)
            key = None
            if bucketed:  # a static leading dimension traces its bucket's backend; a symbolic one stays opaque,
                tokens = tensor.shape[0] if tensor.dim() else None  # and the node dispatches by bucket per call
                key = None if key_of is None else key_of(args, kwargs)  # a table key's sizes likewise
                if not isinstance(tokens, int) or not all(isinstance(size, int) for size in key or ()):
                    return mode.__torch_dispatch__(func, types, args, kwargs)
            spec = dispatcher.resolve(tensor.device.type, dtype_name(tensor.dtype), tokens, None, key)
            # torch.export keeps custom ops whole, and so does a tensor subclass that is not torch's own.
            whole = custom_triton_ops_decomposition_disabled() or any(  # type: ignore[no-untyped-call]
                not issubclass(t, FakeTensor) and t not in plain for t in types
            )
            if spec.traceable and not whole:
                recording = dispatcher.trace.recording
                if recording is not None:  # traced into the graph: recorded once, here, for every run of the graph
                    dtype = dtype_name(tensor.dtype)
                    shape = tokens_of(tensor)
                    picked = choice(dispatcher, tensor.device.type, dtype, shape, None, spec.backend)
                    recording.count(op_id, dtype, Via.COMPILED, picked, shape)
                try:
                    with mode, tracing.tracing():
                        return spec.load()(*args, **kwargs)
                except tracing.NotTraceable as exc:  # what it traced so far is unused: dead code in the graph
                    self._note(f"op '{op_id}': backend '{spec.backend}' stays opaque under torch.compile: {exc}")
            return mode.__torch_dispatch__(func, types, args, kwargs)

        return rule


def _with_backwards(infos: list[OpInfo], info: Callable[[str], OpInfo]) -> list[OpInfo]:
    """The ops, each followed by its backward op, its backward's backward, ... (once each)."""
    found: dict[str, OpInfo] = {}
    pending = list(infos)
    while pending:
        op = pending.pop(0)
        if op.id not in found:
            found[op.id] = op
            if op.backward is not None:
                pending.append(info(op.backward.op))
    return list(found.values())


def _register_autograd(
    torch: Any, library: Any, forward: TorchOp, info: OpInfo, backward: TorchOp, backward_info: OpInfo
) -> None:
    """torch.library.register_autograd for the forward op: setup_context keeps only what the backward op takes
    (the `inputs` of the forward's arguments, tensors saved for backward, others on ctx; the handed-over outputs,
    `saves` marked non-differentiable); the backward calls the backward torch op with the gradients of the other
    outputs, those inputs and those outputs, and gives its results to `grads`."""
    assert info.backward is not None and info.parameters is not None  # linked: the pair follow the convention
    names = info.parameters.names
    saves, handed = info.backward.saves, info.backward.handed
    grad_at = tuple(names.index(name) for name in info.backward.grads)
    input_at = tuple(names.index(name) for name in info.backward.inputs)
    call = backward.packet.default
    assert backward_info.parameters is not None
    positional, keywords = len(backward_info.parameters.positional), backward_info.parameters.keyword_only

    keyword_only = info.parameters.keyword_only

    def setup_context(
        ctx: Any, inputs: tuple[Any, ...], output: Any, keyword_only_inputs: Mapping[str, Any] | None = None
    ) -> None:
        if keyword_only:  # torch hands keyword-only arguments apart: back in the signature's order
            given = keyword_only_inputs or {}
            inputs = (*inputs, *(given[name] for name in keyword_only))
        outputs = output if isinstance(output, tuple) else (output,)
        if saves:
            ctx.mark_non_differentiable(*(outputs[i] for i in saves))
        taken = [inputs[i] for i in input_at]
        tensors = [slot for slot, value in enumerate(taken) if isinstance(value, torch.Tensor)]
        ctx.save_for_backward(*(taken[slot] for slot in tensors), *(outputs[i] for i in handed))
        ctx.kc_inputs = tuple(None if slot in tensors else value for slot, value in enumerate(taken))
        ctx.kc_tensors = tensors

    def backward_fn(ctx: Any, *grads: Any) -> Any:
        saved = ctx.saved_tensors
        taken = list(ctx.kc_inputs)
        for index, slot in enumerate(ctx.kc_tensors):
            taken[slot] = saved[index]
        kept = saved[len(ctx.kc_tensors) :]
        differentiable = [grad for i, grad in enumerate(grads) if i not in saves]
        args = (*differentiable, *taken, *kept)
        results = call(*args[:positional], **dict(zip(keywords, args[positional:])))
        results = results if isinstance(results, tuple) else (results,)
        gradients: list[Any] = [None] * len(names)
        for i, grad in zip(grad_at, results):
            gradients[i] = grad
        return tuple(gradients) if len(gradients) > 1 else gradients[0]

    torch.library.register_autograd(forward.qualname, backward_fn, setup_context=setup_context, lib=library)


def _can_trace(torch: Any) -> bool:
    """Whether this torch can trace a backend into the graph (torch.library.wrap_triton: torch >= 2.6)."""
    return hasattr(torch.library, "wrap_triton") and hasattr(torch.library, "register_torch_dispatch")


def _functional_mode() -> Any:
    from torch._subclasses.functional_tensor import FunctionalTensorMode

    return FunctionalTensorMode


def _fake(info: OpInfo) -> Callable[..., Any]:
    """The op's fake: its declared target, its reference run on the fake tensors, or nothing for no outputs."""
    fake: Importable | Any
    if info.fake_reference:  # the linker has checked the op names its reference (KC204)
        assert info.reference is not None
        fake = info.backends[info.reference]
    elif info.fake is not None:
        fake = info.fake
    else:

        def returns_nothing(*args: Any, **kwargs: Any) -> None:
            return None

        return returns_nothing

    def run(*args: Any, **kwargs: Any) -> Any:
        return fake.load()(*args, **kwargs)  # imported on first trace, under the layer's allow-lists

    return run


# -- what explain shows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceBinding:
    """What one dispatch key of a torch op runs: the platform it means here, and the backend for each dtype."""

    key: str  # 'CPU', 'CUDA'
    platform: Platform | None  # None: no such device on this platform
    chosen: tuple[tuple[str, str | None], ...]  # (dtype, backend; None where nothing is eligible)
    traced: frozenset[str] = frozenset()  # the chosen backends torch.compile traces into (the rest are opaque)
    traceable: frozenset[str] = frozenset()  # the chosen backends it would trace into with register(traced=True)

    def __str__(self) -> str:
        if self.platform is None:
            return f"{self.key}: no {DEVICE_TYPES[self.key]} device here"
        by_backend: dict[str | None, list[str]] = {}
        for dtype, backend in self.chosen:
            by_backend.setdefault(backend, []).append(dtype)
        parts = [f"{self._shown(backend)} ({', '.join(dtypes)})" for backend, dtypes in by_backend.items()]
        return f"{self.key} ({self.platform}): {'; '.join(parts)}"

    def _shown(self, backend: str | None) -> str:
        if backend is None:
            return "nothing eligible"
        if backend in self.traced:
            return f"{backend} in graph"
        return f"{backend} opaque, traceable" if backend in self.traceable else f"{backend} opaque"


@dataclass(frozen=True)
class TorchOpReport:
    """An op as a torch op: its name, schema, fake, what each device type binds, and why it cannot be one."""

    op: str
    qualname: str  # 'kcatalog::layernorm_rms_norm'
    schema: str | None  # None when the signature cannot be one
    fake: str
    bindings: tuple[DeviceBinding, ...]
    problems: tuple[Diagnostic, ...]
    registered: bool

    def lines(self) -> list[str]:
        """The report as `kcatalog explain --torch-ops` prints it, under the op's selection."""
        head = f"torch op {self.qualname}{self.schema}" if self.schema else f"torch op {self.qualname}: no schema"
        lines = [f"  {head}{' (registered)' if self.registered else ''}", f"    fake: {self.fake}"]
        lines += [f"    {binding}" for binding in self.bindings]
        lines += [f"    {problem}" for problem in self.problems]
        return lines

    def as_dict(self) -> dict[str, Any]:
        """The report as `explain --output-format json --torch-ops` writes it."""
        return {
            "qualname": self.qualname,
            "schema": self.schema,
            "fake": self.fake,
            "registered": self.registered,
            "bindings": {
                b.key: None if b.platform is None else {"platform": str(b.platform), "chosen": dict(b.chosen)}
                for b in self.bindings
            },
            "problems": [str(problem) for problem in self.problems],
        }


def describe(
    info: OpInfo,
    namespace: str,
    here: Platform,
    registered: TorchOp | None,
    chosen: Callable[[Platform, str | None], str | None],
) -> TorchOpReport:
    """How the op is (or would be) registered: per device type, the backend `chosen` (platform, dtype) gives for
    each dtype on `here`; the CPU key always means the CPU."""
    traceable = frozenset(name for name, spec in info.backends.items() if spec.traceable)
    traced = traceable if registered is not None and registered.traced else frozenset()
    bindings = []
    for key, device in DEVICE_TYPES.items():
        if device == "cpu":
            bound: Platform | None = here if here.device == "cpu" else Platform("cpu")
        else:
            bound = here if here.device in ("cuda", "hip") else None
        picked: tuple[tuple[str, str | None], ...] = ()
        if bound is not None:
            picked = tuple((dtype or "any dtype", chosen(bound, dtype)) for dtype in info.dtypes or (None,))
        backends = {backend for _, backend in picked if backend}
        bindings.append(DeviceBinding(key, bound, picked, traced & backends, traceable & backends))
    qualname = f"{namespace}::{torch_op_name(info.id)}"
    return TorchOpReport(
        info.id,
        qualname,
        info.torch_schema,
        _fake_text(info),
        tuple(bindings),
        info.torch_problems,
        registered is not None,
    )


def _fake_text(info: OpInfo) -> str:
    if info.fake_reference:
        spec = info.backends.get(info.reference) if info.reference is not None else None
        target = spec.target if spec is not None else "?"
        return f"reference: the '{info.reference}' backend ({target}) run on fake tensors"
    if info.fake is not None:
        return str(info.fake.target)
    if info.torch_schema is not None and info.torch_schema.endswith("-> ()"):
        return "none needed: the op returns nothing"
    return "none: torch.compile cannot trace the op"
