"""Op handles: hot-path callables that resolve a backend once per (device, dtype) and then just call it."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from ._platform import Platform
from .schema import signature_params

if TYPE_CHECKING:
    from ._catalog import Catalog, OpInfo


def _dispatch_position(info: OpInfo) -> tuple[int, str]:
    """Index and name of the argument whose tensor decides dispatch (the first one unless declared)."""
    params = signature_params(info.signature)
    name = info.dispatch_arg or (params[0] if params else "")
    if name not in params:
        raise ValueError(f"op '{info.id}': dispatch argument '{name}' is not in its signature {info.signature}")
    return params.index(name), name


def make_handle(catalog: Catalog, info: OpInfo) -> Callable[..., Any]:
    """Build the dispatching callable for one op."""
    position, name = _dispatch_position(info)
    by_dtype_cpu: dict[Any, Callable[..., Any]] = {}
    by_dtype_cuda: dict[Any, Callable[..., Any]] = {}
    by_device: dict[tuple[str, Any], Callable[..., Any]] = {}
    scopes = catalog._scopes
    lock = threading.Lock()
    op_id = info.id

    def _resolve(tensor: Any) -> Callable[..., Any]:
        device = tensor.device.type
        here = catalog.platform()
        # torch calls ROCm devices 'cuda' too; the detected platform knows which this is.
        if device == "cuda" and here.device in ("cuda", "hip"):
            platform = here
        else:
            platform = here if device == here.device else Platform(device)
        dtype = str(tensor.dtype).removeprefix("torch.")
        return catalog.resolve(op_id, platform, dtype)

    def resolve(tensor: Any) -> Callable[..., Any]:
        with lock:
            return _resolve(tensor)

    def handle(*args: Any, **kwargs: Any) -> Any:
        tensor = args[position] if len(args) > position else kwargs[name]
        if scopes.active:  # some `with catalog.use(...)` is open somewhere: honour it, uncached
            return resolve(tensor)(*args, **kwargs)
        if tensor.is_cuda:
            table, key = by_dtype_cuda, tensor.dtype
        elif tensor.is_cpu:
            table, key = by_dtype_cpu, tensor.dtype
        else:
            table, key = by_device, (tensor.device.type, tensor.dtype)
        fn = table.get(key)
        if fn is None:
            with lock:  # one resolution (and import) per key, however many threads make the first call
                fn = table.get(key)
                if fn is None:
                    fn = table[key] = _resolve(tensor)
        return fn(*args, **kwargs)

    handle.__name__ = info.id.replace(".", "_")
    handle.__qualname__ = handle.__name__
    handle.__doc__ = f"{info.id}{info.signature}: {info.description} (dispatching op handle)"
    return handle
