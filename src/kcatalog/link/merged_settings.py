"""The settings files of a catalog's layers merged into one: backends and priorities are the union of the
layers' (a later layer places its backends among the earlier ones', never reorders them), and each layer keeps its
own policies (link/policy.py says which ops each governs) and its own allow-list for the targets of its own files."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from .. import codes
from ..diagnostics import Diagnostics
from ..model import BackendInfo, CatalogLayer, CatalogSettings, LayerPolicy, Policy, Promise, Required, StalePolicy
from ..validate.schema import PolicyDecl, Settings
from ..validate.validator import ValidatedFile

# Reports a priority list's unknown names: (names, file, path to the list in the file, what the list is).
NameCheck = Callable[[Sequence[str], ValidatedFile, Sequence[str], str], None]


@dataclass(frozen=True)
class MergedSettings:
    """The catalog's settings, and each layer's allow-list (None: any module) and policies, by layer number."""

    settings: CatalogSettings
    allow_lists: Mapping[int, tuple[str, ...] | None]
    policies: Mapping[int, LayerPolicy]


def layer_name(layers: Sequence[CatalogLayer], number: int) -> str:
    """The name of layer `number` ('' for a catalog read without layers)."""
    return layers[number].name if 0 <= number < len(layers) else ""


def known_backends(
    files: Sequence[ValidatedFile], layers: Sequence[CatalogLayer], diagnostics: Diagnostics
) -> list[str]:
    """Every backend the settings files declare, in layer order; one declared by two layers is an error."""
    first: dict[str, ValidatedFile] = {}
    for file in files:
        assert isinstance(file.model, Settings)
        for name in file.model.backends:
            earlier = first.setdefault(name, file)
            if earlier is not file:
                diagnostics.error(
                    codes.BACKEND_REDECLARED,
                    f"backend '{name}' is already declared by layer '{layer_name(layers, earlier.layer)}' "
                    f"({earlier.path}); a layer uses the backends of earlier layers without declaring them",
                    file.locations.key(("backends", name)),
                )
    return list(first)


def merge_settings(
    files: Sequence[ValidatedFile],
    layers: Sequence[CatalogLayer],
    known: Sequence[str],
    check_names: NameCheck,
    diagnostics: Diagnostics,
) -> MergedSettings:
    """One settings file per layer (at most), in layer order, merged; what conflicts is added to `diagnostics`."""
    backends: dict[str, BackendInfo] = {}
    priority: list[str] = []
    platform_priority: dict[str, list[str]] = {}
    priorities: dict[str, list[str]] = {}
    devices: list[str] = []
    allow_lists: dict[int, tuple[str, ...] | None] = {}
    policies: dict[int, LayerPolicy] = {}
    required: list[Required] = []
    stale = StalePolicy.IGNORE
    for file in files:
        settings = file.model
        assert isinstance(settings, Settings)
        for name, info in settings.backends.items():
            backends.setdefault(name, BackendInfo(info.description, info.auto))
        check_names(settings.priority, file, ("priority",), "priority list")
        priority = _merge_order(priority, settings.priority, file, ("priority",), "priority", diagnostics)
        for device, order in settings.platform_priority.items():
            check_names(order, file, ("platform_priority", device), f"{device} priority list")
            platform_priority[device] = _merge_order(
                platform_priority.get(device, []),
                order,
                file,
                ("platform_priority", device),
                f"{device} priority",
                diagnostics,
            )
        for name, order in settings.priorities.items():
            check_names(order, file, ("priorities", name), f"priority list '{name}'")
            priorities[name] = _merge_order(
                priorities.get(name, []), order, file, ("priorities", name), f"priority list '{name}'", diagnostics
            )
        devices += [d for d in settings.devices if d not in devices]
        for key, decl in (("policy", settings.policy), ("require_of_all", settings.require_of_all)):
            check_names(decl.required_backends, file, (key, "required_backends"), key)
        policies[file.layer] = LayerPolicy(
            layer_name(layers, file.layer), _policy(settings.policy), _policy(settings.require_of_all)
        )
        allow_lists[file.layer] = settings.allowed_modules
        required += _required(settings, layer_name(layers, file.layer))
        if "stale" in settings.tuned.model_fields_set:  # a later layer's word replaces an earlier one's
            stale = StalePolicy(settings.tuned.stale)
    # One layer's list is the catalog's; with several, each spec carries its own layer's, and the catalog has none.
    only = files[0].model if len(files) == 1 and len(layers) <= 1 else None
    merged = CatalogSettings(
        backends=MappingProxyType(backends),
        priority=tuple(name for name in priority if name in known),
        platform_priority=MappingProxyType(
            {d: tuple(n for n in o if n in known) for d, o in platform_priority.items()}
        ),
        allowed_modules=only.allowed_modules if isinstance(only, Settings) else None,
        priorities=MappingProxyType({name: tuple(order) for name, order in priorities.items()}),
        devices=tuple(devices),
        policies=tuple(policies.values()),
        required=tuple(required),
        stale=stale,
    )
    return MergedSettings(merged, MappingProxyType(allow_lists), MappingProxyType(policies))


def _required(settings: Settings, layer: str) -> list[Required]:
    """The promises one layer's settings require of every backend selected; a later layer cannot lift them."""
    source = f"the settings of layer '{layer}'" if layer else "the catalog settings"
    asked = ((Promise.BATCH_INVARIANT, settings.batch_invariant), (Promise.DETERMINISTIC, settings.deterministic))
    return [Required(promise, source) for promise, on in asked if on]


def _policy(decl: PolicyDecl) -> Policy:
    return Policy(decl.required_backends, decl.required_platforms, decl.torch_ops, decl.require_reference)


def _merge_order(
    merged: list[str],
    order: Sequence[str],
    file: ValidatedFile,
    path: Sequence[str],
    what: str,
    diagnostics: Diagnostics,
) -> list[str]:
    """`order` merged into the earlier layers' `merged`: each new name goes right after the name before it in
    `order` (or, first in `order`, before the earlier name after it); the earlier names keep their order."""
    earlier = [name for name in order if name in merged]
    if earlier != [name for name in merged if name in earlier]:
        diagnostics.error(
            codes.LAYER_PRIORITY_CONFLICT,
            f"{what} ranks {', '.join(earlier)} in another order than the earlier layers ({', '.join(merged)}); "
            "a layer places its own backends among the earlier ones but cannot reorder those",
            file.locations.value(path),
        )
        return merged
    result = list(merged)
    previous: str | None = None
    for index, name in enumerate(order):
        if name not in result:
            if previous is not None:
                at = result.index(previous) + 1
            else:
                after = next((n for n in order[index + 1 :] if n in merged), None)
                at = result.index(after) if after is not None else len(result)
            result.insert(at, name)
        previous = name
    return result
