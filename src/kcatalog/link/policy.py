"""The layers' rules checked across the linked ops: every op has the backends its rules require (KC401), a backend
that serves each platform they require (KC402) and a reference where they ask for one (KC403); where they ask for
torch ops, its KC212-KC214 problems become warnings.

The rules that govern an op, each checked on the op as loaded (every layer's extensions and replacements in):
- the `policy` of the layer that declares it, all of it: a layer's rules keep its own ops complete;
- the `policy` of each other layer that extends it (adds or replaces backends), for required backends and
  platforms, which what that layer adds can meet; a reference and a torch op's signature and fake belong to the
  declaration, so `require_reference` and `torch_ops` stay with the declaring layer;
- every layer's `require_of_all`, all of it: what an application requires of every op it loads.
So the shipped catalog's rules bind the shipped ops, never an op a user's layer declares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from .. import codes
from ..errors import Location
from ..model import LayerPolicy, OpInfo, Policy
from ..platform import Platform
from ..validate.schema import Manifest
from ..validate.validator import ValidatedFile
from .context import LinkContext


@dataclass(frozen=True)
class Demand:
    """Who asks a rule of an op: a layer (named only when the catalog has several), under which settings key."""

    layer: str
    of_all: bool  # under `require_of_all`, else under `policy`
    # For the policy of a layer that extends the op (not its declaring one): where that layer's file extends it,
    # where an error only such layers' rules raise is reported, since the fix is theirs.
    extension: Location | None = None


@dataclass
class _Rules:
    """Everything an op's governing rules require of it, each requirement with the demands that ask for it."""

    backends: dict[str, list[Demand]] = field(default_factory=dict)
    platforms: dict[str, list[Demand]] = field(default_factory=dict)
    reference: list[Demand] = field(default_factory=list)
    torch_ops: bool = False

    def add(self, demand: Demand, policy: Policy) -> None:
        for asked, wanted in ((self.backends, policy.required_backends), (self.platforms, policy.required_platforms)):
            for name in wanted:
                _once(asked.setdefault(name, []), demand)
        if policy.require_reference:
            _once(self.reference, demand)
        self.torch_ops = self.torch_ops or policy.torch_ops


def _once(demands: list[Demand], demand: Demand) -> None:
    if demand not in demands:  # a layer that lists a name twice asks for it once
        demands.append(demand)


def check_policy(context: LinkContext, files: Sequence[ValidatedFile], ops: Mapping[str, OpInfo]) -> None:
    """Add an error for each op that lacks what the rules governing it require (see the module's docstring)."""
    if not context.policies:
        return
    declared_in: dict[str, int] = {}
    extended_in: dict[str, dict[int, Location]] = {}  # op -> the layers that extend it -> where (the first)
    for file in files:
        if isinstance(file.model, Manifest):
            for name in file.model.ops:
                declared_in.setdefault(f"{file.model.group}.{name}", file.layer)  # a duplicate is an error already
            for op_id in file.model.extends:
                extended_in.setdefault(op_id, {}).setdefault(file.layer, file.locations.key(("extends", op_id)))
    named = len(context.layers) > 1
    platforms: dict[str, Platform | None] = {}
    for op_id, info in ops.items():
        rules = _Rules()
        for demand, policy in _governing(context.policies, declared_in[op_id], extended_in.get(op_id, {}), named):
            rules.add(demand, policy)
        _check(context, op_id, info, rules, platforms)


def _governing(
    policies: Mapping[int, LayerPolicy], declared: int, extended: Mapping[int, Location], named: bool
) -> Iterator[tuple[Demand, Policy]]:
    """The rules that govern an op declared in layer `declared` and extended in the layers of `extended`."""
    for number, layer in policies.items():
        name = layer.layer if named else ""
        if number == declared:
            yield Demand(name, of_all=False), layer.policy
        elif number in extended:
            only = dataclasses.replace(layer.policy, require_reference=False, torch_ops=False)
            yield Demand(name, of_all=False, extension=extended[number]), only
        yield Demand(name, of_all=True), layer.require_of_all


def _check(
    context: LinkContext, op_id: str, info: OpInfo, rules: _Rules, platforms: dict[str, Platform | None]
) -> None:
    specs = info.backends
    missing: dict[tuple[Demand, ...], list[str]] = {}  # backends lacking, by who requires them
    for name, asked in rules.backends.items():
        if name in context.known and name not in specs:  # an unknown name is reported with the settings
            missing.setdefault(tuple(asked), []).append(name)
    for who, names in missing.items():
        context.diagnostics.error(
            codes.POLICY_BACKEND_MISSING,
            f"op '{op_id}' lacks the {', '.join(names)} backend {_who(who)}; it has {', '.join(specs)}",
            _where(info, who),
        )
    for text, demands in rules.platforms.items():
        platform = _platform(context, text, platforms)
        if platform is None:
            continue
        # An `auto: false` backend serves no platform by itself: selection there would choose nothing.
        reasons = {
            name: platform.mismatch(spec.capabilities) or (None if spec.auto else "auto: false")
            for name, spec in specs.items()
        }
        if all(reasons.values()):
            detail = "; ".join(f"{_backend(info, name)}: {reason}" for name, reason in reasons.items())
            context.diagnostics.error(
                codes.POLICY_PLATFORM_UNSERVED,
                f"op '{op_id}' has no backend for platform {platform} ({detail}), which {_who(demands)}",
                _where(info, demands),
            )
    if rules.reference and info.reference is None:
        context.diagnostics.error(
            codes.POLICY_REFERENCE_MISSING,
            f"op '{op_id}' names no reference backend, which {_who(rules.reference, 'require_reference')}; "
            f"its backends: {', '.join(specs)}",
            info.location,
        )
    if rules.torch_ops:
        context.diagnostics.extend(info.torch_problems)


def _where(info: OpInfo, demands: Sequence[Demand]) -> Location:
    """Where an op's error goes: where a layer extends it when only extending layers' rules raise it, else the op."""
    extensions = [d.extension for d in demands]
    return extensions[0] if all(extensions) and extensions[0] is not None else info.location


def _backend(info: OpInfo, name: str) -> str:
    """A backend's name, with its layer where another layer than the op's added or replaced it."""
    layer = info.backends[name].layer
    return f"{name} [layer {layer}]" if layer != info.layer else name


def _platform(context: LinkContext, text: str, parsed: dict[str, Platform | None]) -> Platform | None:
    """A required platform, parsed once; None where it does not parse (reported with the settings)."""
    if text not in parsed:
        try:
            parsed[text] = Platform.parse(text, context.devices)
        except ValueError:
            parsed[text] = None
    return parsed[text]


def _who(demands: Sequence[Demand], rule: str = "") -> str:
    """Who requires it: 'the policy requires', 'the policy of layer 'x' requires', "layer 'app' requires of every
    op (require_of_all)", joined with 'and'; `rule` names the settings key where it is not evident."""
    parts = []
    for demand in demands:
        if demand.of_all:
            who = f"layer '{demand.layer}' requires" if demand.layer else "the catalog requires"
            parts.append(f"{who} of every op (require_of_all{'.' + rule if rule else ''})")
        else:
            where = f" of layer '{demand.layer}'" if demand.layer else ""
            parts.append(f"the policy{where} requires" + (f" ({rule})" if rule else ""))
    return " and ".join(parts)
