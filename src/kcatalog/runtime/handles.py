"""Op handles: hot-path callables that resolve a backend once per (device, dtype) and then just call it; under
torch.compile they call the op's registered torch op instead, so that the graph keeps one opaque node."""

from __future__ import annotations

import ast
import bisect
import keyword
import threading
import types
from dataclasses import dataclass
from typing import Any, Callable

from ..model import OpInfo, Parameters, TableKeyValues
from ..select.buckets import BucketDispatch, dispatch_for, segments
from .dispatch import Dispatcher, choice, dtype_name, resolve_once, scoped_call, site_for
from .gates import is_gated, make_gated
from .trace import (
    Chosen,
    Recording,
    Swap,
    is_capturing,
    is_compiling,
    is_dynamo,
    tensor_length,
    tokens_of,
    torch_check,
    twin_code,
)
from .trace_file import Via

# The handle is generated with the op's own parameter list, because forwarding through
# *args/**kwargs costs more than everything else the handle does. Only identifiers of the parsed
# signature enter the source; default values are bound as objects, never pasted in as text.
# `_kc_torch_op` is None until the op is registered as a torch op (Catalog.register_torch_ops); then, while
# torch.compile traces the handle (torch.compiler.is_compiling() is constant True there), the graph gets the
# torch op. In eager mode that costs one global read, or one is_compiling() call once registered.
_TEMPLATE = """\
def handle({params}):
    {bind}if _kc_torch_op is not None and _kc_compiling():
        return _kc_torch_op({call})
    if _kc_scopes.active:  # a `with catalog.use(...)` is open somewhere: honour it, uncached
        return _kc_resolve({tensor})({call})
    if {tensor}.is_cuda:
        _kc_fn = _kc_by_cuda.get({tensor}.dtype)
    elif {tensor}.is_cpu:
        _kc_fn = _kc_by_cpu.get({tensor}.dtype)
    else:
        _kc_fn = _kc_by_device.get(({tensor}.device.type, {tensor}.dtype))
    if _kc_fn is None:
        _kc_fn = _kc_first_call({tensor})
    return _kc_fn({call})
"""

# An op a tuned table or plan chooses by token count: each (device, dtype) holds a BucketDispatch, and a call
# costs one bisect over a few boundaries on the leading dimension more (see benchmarks/dispatch_overhead.py).
_BUCKETED = (
    _TEMPLATE.replace("_kc_fn", "_kc_b")
    .replace("_kc_first_call(", "_kc_first_bucketed(")
    .replace(
        "    return _kc_b({call})\n",
        "    return _kc_b.fns[_kc_bisect(_kc_b.edges, {tensor}.shape[0])]({call})\n",
    )
    .replace("return _kc_resolve({tensor})({call})", "return _kc_resolve({tensor}, {tensor}.shape[0])({call})")
)

# An op keyed by its shape (`table_key`) and tuned or planned: the call's key read from its arguments' shapes, then
# one lookup on (dtype, key...) for the key's BucketDispatch and the bisect, as for a bucketed op; a key no entry
# has resolves once by priority and is cached the same way.
_KEYED = """\
def handle({params}):
    {bind}if _kc_torch_op is not None and _kc_compiling():
        return _kc_torch_op({call})
    if _kc_scopes.active:  # a `with catalog.use(...)` is open somewhere: honour it, uncached
        return _kc_resolve({tensor}, {tensor}.shape[0], ({key},))({call})
    if {tensor}.is_cuda:
        _kc_b = _kc_by_cuda.get(({tensor}.dtype, {key}))
    elif {tensor}.is_cpu:
        _kc_b = _kc_by_cpu.get(({tensor}.dtype, {key}))
    else:
        _kc_b = _kc_by_device.get(({tensor}.device.type, {tensor}.dtype, {key}))
    if _kc_b is None:
        _kc_b = _kc_first_keyed({tensor}, ({key},))
    return _kc_b.fns[_kc_bisect(_kc_b.edges, {tensor}.shape[0])]({call})
"""

# An op with a per-call gate (`eligible:`): resolved per argument shape by runtime/gates.py, in plain Python.
_GATED = """\
def handle({params}):
    {bind}if _kc_torch_op is not None and _kc_compiling():
        return _kc_torch_op({call})
    return _kc_gated({call})
"""

# While a trace is open (runtime/trace.py), the handle runs a twin of its code, swapped in as its __code__: the same
# choice, each call counted at its site (device, dtype, CUDA graph capture) and leading dimension. torch.compile
# traces the handle's own code (`_kc_plain`), so that a graph holds the same nodes, traced or not. A torch op's
# implementation records with the same body (runtime/torch_ops.py).
RECORDING_BODY = """\
    if _kc_scopes.active:
        return _kc_scoped({tensor})({call})
    try:  # a site's row: its counts, what it calls, the Site (runtime/trace.py)
        if {tensor}.is_cuda:
            _kc_c, _kc_f, _kc_s = (_kc_captured if _kc_capturing() else _kc_sites_cuda)[{tensor}.dtype]
        elif {tensor}.is_cpu:
            _kc_c, _kc_f, _kc_s = _kc_sites_cpu[{tensor}.dtype]
        else:
            _kc_c, _kc_f, _kc_s = _kc_sites_device[({tensor}.device.type, {tensor}.dtype)]
    except KeyError:
        _kc_c, _kc_f, _kc_s = _kc_first_site({tensor})
    try:  # counts: a list indexed by the leading dimension, C len() of the tensor
        _kc_c[_kc_len({tensor})] += 1
    except (IndexError, TypeError):  # 0, past the list, 0-dimensional
        _kc_s.count_slow({tensor})
    return _kc_f({call})
"""
# Chosen by token count: the leading dimension picks the bucket segment, as in _BUCKETED (read as it reads it).
RECORDING_BUCKETED_BODY = RECORDING_BODY.replace("_kc_c, _kc_f, _kc_s =", "_kc_c, _kc_f, _kc_e, _kc_s =").replace(
    """    try:  # counts: a list indexed by the leading dimension, C len() of the tensor
        _kc_c[_kc_len({tensor})] += 1
    except (IndexError, TypeError):  # 0, past the list, 0-dimensional
        _kc_s.count_slow({tensor})
    return _kc_f({call})
""",
    """    _kc_n = {tensor}.shape[0]
    try:
        _kc_c[_kc_n] += 1
    except (IndexError, TypeError):
        _kc_s.count_slow({tensor})
    return _kc_f[_kc_bisect(_kc_e, _kc_n)]({call})
""",
)
_RECORDING_HEAD = """\
def handle({params}):
    {bind}if _kc_compiling_now():
        return _kc_plain({call})
"""
# An op keyed by its shape: counted the slow way (runtime/handles.py's count_keyed), then the handle's own code.
_RECORDING_KEYED = (
    _RECORDING_HEAD
    + """    _kc_count_keyed({tensor}, ({key},))
    return _kc_plain({call})
"""
)


@dataclass(frozen=True)
class CallCode:
    """The pieces of generated source that take and forward an op's parameters."""

    params: str  # the parameter list, defaults named '_kc_default_<name>'
    call: str  # the arguments forwarded, positional as positional and keyword-only as keywords
    tensor: str  # the expression of the argument dispatched on
    bind: str  # a statement binding `tensor` first, when the parameters are forwarded as *args, **kwargs
    defaults: dict[str, Any]


def call_code(info: OpInfo, *, exact: bool = False) -> CallCode:
    """How generated code takes the op's parameters; `exact` refuses the *args/**kwargs fallback (ValueError)."""
    parameters, dispatch = info.parameters, info.dispatch
    if parameters is None:  # any arguments: forward them as given, dispatch on the declared one
        if exact:
            raise ValueError(f"op '{info.id}' declares no signature")
        return _forwarding_code(dispatch.name if dispatch.index is None else dispatch.index)
    if parameters.exact and all(_usable(name) for name in parameters.names):
        return _exact_code(parameters, dispatch.name)
    if exact:
        raise ValueError(f"op '{info.id}': its parameters cannot be taken exactly ({info.signature})")
    # variadic parameters or non-literal defaults: forward everything as given
    found = f"args[{dispatch.index}] if len(args) > {dispatch.index} else " if dispatch.index is not None else ""
    bind = f"tensor = {found}kwargs[{dispatch.name!r}]\n    "
    return CallCode("*args, **kwargs", "*args, **kwargs", "tensor", bind, {})


def _usable(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_kc_")


def _forwarding_code(dispatch: str | int) -> CallCode:
    """*args, **kwargs forwarded as given; the tensor dispatched on is at a position, or given by name."""
    if isinstance(dispatch, int):
        found = f"args[{dispatch}] if len(args) > {dispatch}"
    else:
        found = f"kwargs[{dispatch!r}] if {dispatch!r} in kwargs"
    bind = f"tensor = {found} else _kc_no_dispatch_arg(args, kwargs)\n    "
    return CallCode("*args, **kwargs", "*args, **kwargs", "tensor", bind, {})


def _no_dispatch_arg(op_id: str, dispatch: str | int | None) -> Callable[..., Any]:
    where = f"argument '{dispatch}' (by keyword)" if isinstance(dispatch, str) else f"position {dispatch or 0}"

    def missing(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise TypeError(
            f"op '{op_id}' dispatches on the tensor at {where}; the call gave {len(args)} positional "
            f"argument{'s' * (len(args) != 1)} and keywords ({', '.join(kwargs) or 'none'})"
        )

    return missing


def _exact_code(parameters: Parameters, dispatch: str) -> CallCode:
    defaults: dict[str, Any] = {}
    declared = {name: ast.literal_eval(text) for name, text in parameters.defaults}  # literals, checked at link
    params, call = [], []
    for index, name in enumerate(parameters.names):
        if index == len(parameters.positional):
            params.append("*")
        if name in declared:
            defaults[f"_kc_default_{name}"] = declared[name]
            params.append(f"{name}=_kc_default_{name}")
        else:
            params.append(name)
        call.append(name if index < len(parameters.positional) else f"{name}={name}")
    return CallCode(", ".join(params), ", ".join(call), dispatch, "", defaults)


def key_code(info: OpInfo, code: CallCode) -> str:
    """The expressions of a call's table key in generated code, comma-separated ('gate_up.shape[0], x.shape[1]'):
    each size read from its argument, by name where the parameters are taken exactly, else from args or kwargs."""
    parts = []
    for dim in info.table_key:
        if code.params == "*args, **kwargs":
            found = f"kwargs[{dim.arg!r}]"
            if dim.index is not None:
                found = f"(args[{dim.index}] if len(args) > {dim.index} else {found})"
        else:
            found = dim.arg
        parts.append(f"{found}.shape[{dim.dim}]")
    return ", ".join(parts)


def generate(
    template: str, code: CallCode, namespace: dict[str, Any], name: str, filename: str, key: str = ""
) -> Callable[..., Any]:
    """Compile `template` (with {params}, {bind}, {tensor}, {call}, and {key} for a keyed op) in `namespace`; the
    function `name` it defines."""
    source = template.format(params=code.params, bind=code.bind, tensor=code.tensor, call=code.call, key=key)
    namespace.update(code.defaults)
    exec(compile(source, filename, "exec"), namespace)
    function: Callable[..., Any] = namespace[name]
    return function


def _not_compiling() -> bool:
    return False


def bind_torch_op(handle: Callable[..., Any], torch_op: Any, is_compiling: Callable[[], bool]) -> None:
    """Route the handle through `torch_op` while torch.compile traces it (set once it is registered)."""
    namespace: dict[str, Any] = handle.__globals__
    namespace["_kc_compiling"] = is_compiling  # first: a concurrent call must never see the op without it
    if "_kc_compiling_now" in namespace:  # the recording twin's check, as the handle's own (see `begin`)
        namespace["_kc_compiling_now"] = is_compiling
    namespace["_kc_torch_op"] = torch_op


def make_handle(info: OpInfo, dispatcher: Dispatcher) -> Callable[..., Any]:
    """Build the dispatching callable for one op."""
    lock = threading.Lock()
    op_id = info.id
    resolve_spec = dispatcher.resolve
    by_cuda: dict[Any, Callable[..., Any]] = {}
    by_cpu: dict[Any, Callable[..., Any]] = {}
    by_device: dict[tuple[str, Any], Callable[..., Any]] = {}

    def resolve(tensor: Any, tokens: int | None = None, key: TableKeyValues | None = None) -> Callable[..., Any]:
        return resolve_spec(tensor.device.type, dtype_name(tensor.dtype), tokens, None, key).load()

    def resolve_locked(tensor: Any, tokens: int | None = None, key: TableKeyValues | None = None) -> Callable[..., Any]:
        with lock:
            return resolve(tensor, tokens, key)

    def slot(tensor: Any) -> tuple[dict[Any, Any], Any]:
        """The table the template looks the tensor up in, and its key there."""
        if tensor.is_cuda:
            return by_cuda, tensor.dtype
        if tensor.is_cpu:
            return by_cpu, tensor.dtype
        return by_device, (tensor.device.type, tensor.dtype)

    def first_call(tensor: Any) -> Callable[..., Any]:
        return resolve_once(lock, *slot(tensor), lambda: resolve(tensor))

    def first_bucketed(tensor: Any) -> Any:
        return resolve_once(lock, *slot(tensor), lambda: bucket_dispatch(dispatcher, tensor.device.type, tensor))

    def first_keyed(tensor: Any, key: TableKeyValues) -> Any:
        table, where = slot(tensor)
        found = (*where, *key) if isinstance(where, tuple) else (where, *key)
        return resolve_once(lock, table, found, lambda: bucket_dispatch(dispatcher, tensor.device.type, tensor, key))

    namespace: dict[str, Any] = {
        "_kc_scopes": dispatcher.scopes,
        "_kc_resolve": resolve_locked,
        "_kc_first_call": first_call,
        "_kc_by_cuda": by_cuda,
        "_kc_by_cpu": by_cpu,
        "_kc_by_device": by_device,
        "_kc_torch_op": None,
        "_kc_compiling": _not_compiling,
        "_kc_no_dispatch_arg": _no_dispatch_arg(op_id, info.dispatch_arg),
        "_kc_first_bucketed": first_bucketed,
        "_kc_first_keyed": first_keyed,
        "_kc_bisect": bisect.bisect_left,
    }
    code = call_code(info)
    template = _BUCKETED if dispatcher.bucketed else _TEMPLATE
    if dispatcher.key_of is not None:
        template = _KEYED
    recording = _RECORDING_HEAD + (RECORDING_BUCKETED_BODY if dispatcher.bucketed else RECORDING_BODY)
    if template is _KEYED:
        recording = _RECORDING_KEYED
    gated = is_gated(info)
    if gated:  # a gated op records in its gate's dispatch (runtime/gates.py): the handle has no twin
        template, namespace["_kc_gated"] = _GATED, make_gated(info, dispatcher, Via.HANDLE)
    key = key_code(info, code) if template is _KEYED else ""
    filename = f"<kcatalog op handle {op_id}>"
    handle = generate(template, code, namespace, "handle", filename, key)
    handle.__name__ = handle.__qualname__ = op_id.replace(".", "_")
    signature = info.signature or "(*args, **kwargs)"
    handle.__doc__ = f"{op_id}{signature}: {info.description or 'no description'} (dispatching op handle)"
    if not gated:
        namespace.update(recording_names(dispatcher, namespace, lock, Via.HANDLE))
        namespace["_kc_plain"] = twin(handle)
        source = recording.format(params=code.params, bind=code.bind, tensor=code.tensor, call=code.call, key=key)
        swap = Swap(handle, twin_code(source, namespace, "handle", filename), lambda rec: begin(namespace, rec))
        dispatcher.trace.register(swap)
    return handle


def twin(function: Callable[..., Any]) -> Callable[..., Any]:
    """Another function of the same code, globals and defaults: the untraced handle, while its twin records."""
    assert isinstance(function, types.FunctionType)
    copy = types.FunctionType(function.__code__, function.__globals__, function.__name__, function.__defaults__)
    copy.__kwdefaults__ = function.__kwdefaults__
    return copy


def recording_names(
    dispatcher: Dispatcher, namespace: dict[str, Any], lock: threading.Lock, via: Via
) -> dict[str, Any]:
    """What a recording twin calls besides its sites: the first call at a site, and a call inside `use()`."""

    def first_site(tensor: Any) -> tuple[Any, ...]:
        recording: Recording = namespace["_kc_recording"]
        device, key = tensor.device.type, tensor.dtype
        if tensor.is_cuda and namespace["_kc_capturing"]():
            table, kind = namespace["_kc_captured"], Via.CAPTURED
        elif tensor.is_cuda:
            table, kind = namespace["_kc_sites_cuda"], via
        elif tensor.is_cpu:
            table, kind = namespace["_kc_sites_cpu"], via
        else:
            table, kind, key = namespace["_kc_sites_device"], via, (device, key)

        def made() -> tuple[Any, ...]:
            return recording.add(site_for(dispatcher, device, tensor.dtype, kind)).row

        return resolve_once(lock, table, key, made)

    def scoped(tensor: Any) -> Callable[..., Any]:
        with lock:
            return scoped_call(dispatcher, namespace["_kc_recording"], tensor, via)

    def count_keyed(tensor: Any, key: TableKeyValues) -> None:
        """Count a call of an op keyed by its shape, the slow way: its choice asked once per dtype, key and leading
        dimension (each call inside a `use()` block)."""
        recording: Recording = namespace["_kc_recording"]
        if dispatcher.scopes.active:
            with lock:
                scoped_call(dispatcher, recording, tensor, via, key)
            return
        seen: dict[tuple[Any, ...], tuple[str, int | None, Chosen]] = namespace["_kc_keyed"]
        where = (tensor.device.type, tensor.dtype, key, tokens_of(tensor))
        found = seen.get(where)
        if found is None:
            device, dtype, _, tokens = where
            name = dtype_name(dtype)
            spec = dispatcher.resolve(device, name, tokens, None, key)
            found = seen[where] = (name, tokens, choice(dispatcher, device, name, tokens, None, spec.backend, key))
        name, tokens, picked = found
        recording.count(dispatcher.op, name, via, picked, tokens)

    return {"_kc_first_site": first_site, "_kc_scoped": scoped, "_kc_count_keyed": count_keyed}


def begin(namespace: dict[str, Any], recording: Recording) -> None:
    """A new recording: fresh sites, and the checks bound to torch's where torch is imported."""
    namespace.update(_kc_recording=recording, _kc_sites_cuda={}, _kc_captured={}, _kc_sites_cpu={}, _kc_sites_device={})
    namespace["_kc_keyed"] = {}
    # The twin hands the call to the handle's own code wherever that code would differ: where torch.compile (or
    # torch.export) traces it once the op is a torch op, as that code checks; else only where Dynamo traces it,
    # whose check costs half as much per call.
    torch_check(namespace, "_kc_compiling_now", is_compiling if namespace.get("_kc_torch_op") else is_dynamo)
    torch_check(namespace, "_kc_capturing", is_capturing)
    tensor_length(namespace, "_kc_len")


def bucket_dispatch(
    dispatcher: Dispatcher, device: str, tensor: Any, key: TableKeyValues | None = None
) -> BucketDispatch[Callable[..., Any]]:
    """The boundary lookup for one (device, dtype) (and key, for an op keyed by its shape): every segment of the
    plan's and the tuned table's buckets resolved (and imported) now, so that a call only bisects."""
    dtype = dtype_name(tensor.dtype)
    lists = dispatcher.bucket_lists(device, dtype, key or ())
    return dispatch_for(segments(lists), lambda tokens: dispatcher.resolve(device, dtype, tokens, None, key).load())
