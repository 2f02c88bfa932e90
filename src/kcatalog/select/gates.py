"""Per-call eligibility gates: a backend's `eligible: module:attr` predicate, called with the call's arguments
once per distinct argument shape (cached), its reason kept for the selection (and `explain`)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..link.signature import parse_signature

if TYPE_CHECKING:
    from ..model import KernelSpec, OpInfo
    from ..registry.catalog import Catalog, OverrideScopes


def is_gated(info: OpInfo) -> bool:
    """Whether any backend of the op has a per-call gate."""
    return any(spec.eligible for spec in info.backends.values())


def gate_reasons(info: OpInfo, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, str]:
    """Backend -> why its gate refuses this call (backends whose gate accepts it are left out)."""
    reasons = {}
    for spec in info.backends.values():
        if spec.eligible is None:
            continue
        try:
            verdict = _predicate(spec)(*args, **kwargs)
        except Exception as exc:  # a gate that breaks refuses the call, and says why, rather than the call failing
            verdict = f"its gate raised {type(exc).__name__}: {exc}"
        if verdict is True or verdict is None:
            continue
        why = verdict if isinstance(verdict, str) else "refused"
        reasons[spec.backend] = f"not eligible for this call: {why} ({spec.eligible})"
    return reasons


_PREDICATES: dict[tuple[str, str, str], KernelSpec] = {}
_LOCK = threading.Lock()


def _predicate(spec: KernelSpec) -> Callable[..., Any]:
    """The gate, imported once (under the spec's allow-lists) like a kernel."""
    assert spec.eligible is not None
    key = (spec.op, spec.backend, spec.eligible)
    with _LOCK:
        gate = _PREDICATES.get(key)
        if gate is None:
            gate = _PREDICATES[key] = dataclasses.replace(
                spec, backend=f"{spec.backend} (eligible)", target=spec.eligible
            )
    return gate.load()


def shape_key(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a gate's answer may depend on: each tensor's device, dtype and shape, and every other argument."""
    key = tuple(map(_part, args))
    return key + tuple((k, _part(v)) for k, v in sorted(kwargs.items())) if kwargs else key


def _part(value: Any) -> Any:
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):  # built on every call: the device, not its slow `.type`
        return (value.device, value.dtype, shape)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def dispatch_parameter(info: OpInfo) -> str:
    """The name of the parameter the op dispatches on: `dispatch_arg` (a name, or a position), else the first;
    '' where it has no name (a position in an op without a signature)."""
    if info.signature is None:
        return info.dispatch_arg if isinstance(info.dispatch_arg, str) else ""
    signature = parse_signature(info.signature)
    positional = [a.arg for a in (*signature.posonlyargs, *signature.args)]
    names = [*positional, *(a.arg for a in signature.kwonlyargs)]
    if isinstance(info.dispatch_arg, int):
        return positional[info.dispatch_arg] if info.dispatch_arg < len(positional) else ""
    return info.dispatch_arg or (names[0] if names else "")


def make_gated(catalog: Catalog, info: OpInfo, scopes: OverrideScopes, device: str | None = None) -> Callable[..., Any]:
    """A dispatching callable for a gated op: resolved once per argument shape (uncached inside a `use()` block);
    `device` fixes the platform (a torch op's implementation for one device type), else the tensor's own."""
    from .handles import platform_of

    dispatch = dispatch_parameter(info)
    index: int | None  # the dispatch tensor's position; None: given by keyword only
    if info.signature is None:  # any arguments: the declared position (default 0), or a keyword
        index = None if isinstance(info.dispatch_arg, str) else info.dispatch_arg or 0
    else:
        signature = parse_signature(info.signature)
        names = [a.arg for a in (*signature.posonlyargs, *signature.args)]
        index = names.index(dispatch) if dispatch in names else None
    by_key: dict[tuple[Any, ...], Callable[..., Any]] = {}
    lock = threading.Lock()

    def resolve(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[..., Any]:
        tensor = args[index] if index is not None and index < len(args) else kwargs[dispatch]
        tokens = int(tensor.shape[0]) if tensor.dim() else None
        dtype = str(tensor.dtype).removeprefix("torch.")
        platform = platform_of(catalog, device or tensor.device.type)
        return catalog.resolve(info.id, platform, dtype, tokens=tokens, call=(args, kwargs))

    def gated(*args: Any, **kwargs: Any) -> Any:
        if scopes.active:
            return resolve(args, kwargs)(*args, **kwargs)
        key = shape_key(args, kwargs)
        fn = by_key.get(key)
        if fn is None:
            with lock:
                fn = by_key.get(key)
                if fn is None:
                    fn = by_key[key] = resolve(args, kwargs)
        return fn(*args, **kwargs)

    return gated
