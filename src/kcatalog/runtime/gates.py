"""Per-call eligibility gates: a backend's `eligible: module:attr` predicate, called with the call's arguments
once per distinct argument shape (cached), its reason kept for the selection (and `explain`)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..model import KernelSpec, OpInfo, TableKeyValues
from .dispatch import Dispatcher, choice, dtype_name
from .trace import Chosen, Recording
from .trace_file import Via


def is_gated(info: OpInfo) -> bool:
    """Whether any backend of the op has a per-call gate."""
    return any(spec.gate is not None for spec in info.backends.values())


def gate_reasons(info: OpInfo, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, str]:
    """Backend -> why its gate refuses this call (backends whose gate accepts it are left out)."""
    reasons = {}
    for spec in info.backends.values():
        gate = spec.gate
        if gate is None:
            continue
        try:  # imported once, under the layer's allow-lists, like a kernel
            verdict = gate.load()(*args, **kwargs)
        except Exception as exc:  # a gate that breaks refuses the call, and says why, rather than the call failing
            verdict = f"its gate raised {type(exc).__name__}: {exc}"
        if verdict is True or verdict is None:
            continue
        why = verdict if isinstance(verdict, str) else "refused"
        reasons[spec.backend] = f"not eligible for this call: {why} ({gate.target})"
    return reasons


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


GATED_SHAPES_KEPT = 4096  # argument shapes a gated op keeps its choice for


def make_gated(info: OpInfo, dispatcher: Dispatcher, via: Via) -> Callable[..., Any]:
    """A dispatching callable for a gated op: resolved once per argument shape (uncached inside a `use()` block).
    While a trace is open, each call is counted too (`via`: the handle's or the torch op's), with the choice for
    its argument shape, asked once per shape."""
    dispatch = info.dispatch
    scopes = dispatcher.scopes
    trace = dispatcher.trace
    key_of = dispatcher.key_of  # a gate's cache is per argument shape: a table key's sizes are among them
    by_key: dict[tuple[Any, ...], Callable[..., Any]] = {}
    lock = threading.Lock()
    # A decode's key length grows every step: one entry each, so the cache is bounded (emptied when full).
    bound = GATED_SHAPES_KEPT
    recorded: dict[tuple[Any, ...], tuple[Callable[..., Any], str, int | None, Chosen]] = {}  # of `recording_of`
    recording_of: list[Recording | None] = [None]

    def spec_for(
        args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[KernelSpec, str, str, int | None, TableKeyValues | None]:
        index = dispatch.index
        tensor = args[index] if index is not None and index < len(args) else kwargs[dispatch.name]
        tokens = int(tensor.shape[0]) if tensor.dim() else None
        device, dtype = tensor.device.type, dtype_name(tensor.dtype)
        key = None if key_of is None else key_of(args, kwargs)
        return dispatcher.resolve(device, dtype, tokens, (args, kwargs), key), device, dtype, tokens, key

    def resolve(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[..., Any]:
        return spec_for(args, kwargs)[0].load()

    def chosen_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Callable[..., Any], str, int | None, Chosen]:
        spec, device, dtype, tokens, key = spec_for(args, kwargs)
        picked = choice(dispatcher, device, dtype, tokens, (args, kwargs), spec.backend, key)
        return spec.load(), dtype, tokens, picked

    def record(recording: Recording, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if scopes.active:
            found = chosen_for(args, kwargs)
        else:
            key = shape_key(args, kwargs)
            with lock:
                if recording_of[0] is not recording or len(recorded) >= bound:  # a new recording asks afresh
                    recorded.clear()
                    recording_of[0] = recording
                found = recorded.get(key) or recorded.setdefault(key, chosen_for(args, kwargs))
        fn, dtype, tokens, picked = found
        recording.count(dispatcher.op, dtype, via, picked, tokens)
        return fn(*args, **kwargs)

    def gated(*args: Any, **kwargs: Any) -> Any:
        recording = trace.recording
        if recording is not None and not _compiling():
            return record(recording, args, kwargs)
        if scopes.active:
            return resolve(args, kwargs)(*args, **kwargs)
        key = shape_key(args, kwargs)
        fn = by_key.get(key)
        if fn is None:
            with lock:
                fn = by_key.get(key)
                if fn is None:
                    if len(by_key) >= bound:
                        by_key.clear()
                    fn = by_key[key] = resolve(args, kwargs)
        return fn(*args, **kwargs)

    return gated


def _compiling() -> bool:
    """Whether torch.compile traces the caller: then a trace records nothing per call."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())
