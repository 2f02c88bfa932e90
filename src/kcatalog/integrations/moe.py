"""The routed experts of transformers' mixture-of-experts layers, on moe.fused_experts; the shipped MoE layers
file (transformers.moe.layers.yaml) maps them.

transformers (>= 5.17) keeps a MoE layer's experts in one module per layer (Qwen3MoeExperts, MixtralExperts,
...) whose class forward is its experts interface: ``forward(hidden_states [T, H], top_k_index [T, K],
top_k_weights [T, K])``, dispatched by ``@use_experts_implementation`` on ``config._experts_implementation``
through ``ExpertsInterface``. kernelize goes through that extension point (`bind_experts`): `experts` is
registered there as the implementation 'kcatalog', the module's op handle is kept on the instance, and the
config the module dispatches on is set to 'kcatalog'; the module keeps its class's forward. Where the interface
does not exist, or the class does not dispatch through it, the instance's forward is replaced by
`experts_forward` instead. Either way the router, the shared experts and the weights (gate_up_proj [E, 2I, H],
down_proj [E, H, I], read in place) stay as they are. Nothing here imports transformers until a prepare runs.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .kernelize import Prepared

Ops = Mapping[str, Callable[..., Any]]
FUSED_EXPERTS = "moe.fused_experts"
IMPLEMENTATION = "kcatalog"  # the name registered in transformers' ExpertsInterface
OPS = "_kcatalog_experts"  # the instance attribute holding a kernelized experts module's _Bound
# The implementations kernelize replaces: transformers' own, whose results the op computes (and its own). Others
# (deepgemm, sonicmoe, deepgemm_megamoe, one a user registered) are the user's choice and may lay weights out
# their own way: those models keep them.
_REPLACED = (None, "eager", "batched_mm", "grouped_mm", IMPLEMENTATION)
_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Bound:
    """A kernelized experts module's op handle, and the implementation its config named before kernelize set it
    to 'kcatalog' (where the calls the op cannot take go)."""

    fused_experts: Callable[..., torch.Tensor]
    previous: str | None


@dataclass
class _Config:
    """A config that kernelize set to 'kcatalog': what it named before, and how many bound modules dispatch on it
    (the last one's undo puts the name back, whatever order the undos run in)."""

    config: weakref.ref[Any]
    previous: str | None
    modules: int


_CONFIGS: list[_Config] = []  # configs are unhashable: found by identity


def experts(
    module: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """transformers' experts function contract, through the module's moe.fused_experts handle. Calls whose
    weights are of another dtype than the hidden states (autocast) go to the implementation the config named
    before; a module never kernelized (its config set to 'kcatalog' by hand) to its class's own loop."""
    bound: _Bound | None = module.__dict__.get(OPS)
    if bound is None:  # any experts class may name it: its weights need not be the op's
        return _implementation(module, None)(module, hidden_states, top_k_index, top_k_weights)
    gate_up, down = module.gate_up_proj, module.down_proj
    if gate_up.dtype != hidden_states.dtype or down.dtype != hidden_states.dtype:
        return _implementation(module, bound.previous)(module, hidden_states, top_k_index, top_k_weights)
    return bound.fused_experts(hidden_states, top_k_index, top_k_weights, gate_up, down)


def experts_forward(
    module: Any, ops: Ops, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """The fallback: the experts of one MoE layer through moe.fused_experts, as the instance's forward. Calls
    whose weights are of another dtype than the hidden states (autocast) keep the class's own forward, which
    promotes as transformers does."""
    gate_up, down = module.gate_up_proj, module.down_proj
    if gate_up.dtype != hidden_states.dtype or down.dtype != hidden_states.dtype:
        return type(module).forward(module, hidden_states, top_k_index, top_k_weights)  # type: ignore[no-any-return]
    return ops[FUSED_EXPERTS](hidden_states, top_k_index, top_k_weights, gate_up, down)  # type: ignore[no-any-return]


def bind_experts(module: Any, ops: Ops) -> Prepared:
    """An experts module's prepare: through transformers' experts interface where the module's class dispatches
    through it (the function registered as 'kcatalog', the op handle kept on the instance, the module's config
    set to 'kcatalog'; the class's forward stays), else the instance's forward (the report says why). Raises
    ValueError where the config names an implementation that is the user's choice (not one the op computes)."""
    interface = experts_interface()
    if interface is None:
        return Prepared(None, note="instance forward: transformers here has no experts interface")
    config: Any = getattr(module, "config", None)
    if not _dispatches(type(module), interface) or not hasattr(config, "_experts_implementation"):
        return Prepared(
            None, note="instance forward: its class does not dispatch through transformers' experts interface"
        )
    current = config._experts_implementation
    with _LOCK:
        record = _record(config)
        if record is None and current not in _REPLACED:
            shown = ", ".join(repr(name) for name in _REPLACED)
            raise ValueError(f"the model's experts implementation is {current!r}, not one of {shown}")
        interface.register(IMPLEMENTATION, experts)
        if record is None:
            record = _Config(weakref.ref(config), current, 0)
            _CONFIGS.append(record)
        record.modules += 1
        module.__dict__[OPS] = _Bound(ops[FUSED_EXPERTS], record.previous)
        _set(config, IMPLEMENTATION)

    def undo() -> None:
        module.__dict__.pop(OPS, None)
        with _LOCK:
            record.modules -= 1
            if record.modules:
                return
            _CONFIGS.remove(record)
            if config._experts_implementation == IMPLEMENTATION:  # not since changed by the user
                _set(config, record.previous)

    return Prepared(undo, replace_forward=False, note=f"through transformers' experts interface ('{IMPLEMENTATION}')")


def experts_interface() -> Any | None:
    """transformers' ExpertsInterface instance (ALL_EXPERTS_FUNCTIONS), or None where transformers has none."""
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
    except ImportError:
        return None
    return ALL_EXPERTS_FUNCTIONS


def _dispatches(cls: Any, interface: Any) -> bool:
    """Whether the class's forward is @use_experts_implementation's, dispatching through `interface` (a class may
    be decorated with an interface of its own, where 'kcatalog' is not registered)."""
    try:
        return inspect.getclosurevars(cls.forward).nonlocals.get("experts_interface") is interface
    except TypeError:  # not a Python function
        return False


def _implementation(module: Any, name: str | None) -> Callable[..., torch.Tensor]:
    """transformers' experts function named `name`; the class's own loop (which the interface's decorator keeps
    as __wrapped__) for None, 'eager' and 'kcatalog'."""
    forward: Any = type(module).forward
    own: Callable[..., torch.Tensor] = getattr(forward, "__wrapped__", forward)
    if name in (None, "eager", IMPLEMENTATION):
        return own
    interface = experts_interface()
    return own if interface is None else interface.get_interface(name, own)


def _record(config: Any) -> _Config | None:
    """The config's record, where kernelize has set it (dropping the records of configs no longer alive)."""
    _CONFIGS[:] = [record for record in _CONFIGS if record.config() is not None]
    return next((record for record in _CONFIGS if record.config() is config), None)


def _set(config: Any, name: str | None) -> None:
    """Name the config's experts implementation, only its own (its sub-configs are not the module's)."""
    if "_experts_implementation_internal" in vars(config):  # transformers' property, which would recurse
        config._experts_implementation_internal = name
    else:
        config._experts_implementation = name
