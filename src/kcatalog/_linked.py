"""What linking the files yields: plain data a Catalog is built from, and its JSON form for the cache."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ._catalog import KernelSpec, OpInfo
from ._platform import Capability
from .errors import Location


@dataclass
class Linked:
    """The files' ops and settings as plain data (no pydantic models, no YAML nodes)."""

    settings: Mapping[str, Any] | None  # the settings file, JSON-compatible; None when missing or invalid
    ops: dict[str, OpInfo]
    # Every backend declaration read, duplicates included, with its target's position: all get checked.
    declared: list[tuple[KernelSpec, Location]]

    @property
    def known(self) -> tuple[str, ...]:
        """The backend names the settings file declares."""
        return tuple(self.settings["backends"]) if self.settings is not None else ()


# The cached form: nested tuples that `marshal` writes and reads fast (as Python's .pyc files are).
# Each file is named once, by its index in the entry's file list, so positions survive a change of working
# directory: the loader shows them relative to wherever it runs. Equal values are stored once.


def to_plain(linked: Linked, files: Sequence[str]) -> tuple[Any, ...]:
    """`linked` (which must be free of errors: one declaration per backend) as tuples of plain values.

    `files` are the shown paths its locations use, in the order the cache entry lists them."""
    index = {path: number for number, path in enumerate(files)}
    position = {id(spec): number for number, (spec, _) in enumerate(linked.declared)}
    memo: dict[Any, Any] = {}

    def same(value: Any) -> Any:
        return memo.setdefault(value, value)

    def where(location: Location) -> tuple[int, int, int]:
        return index[location.path], location.line, location.col

    declared = tuple(
        (
            same(spec.op),
            same(spec.backend),
            same(spec.target),
            same(spec.requires),
            same(tuple((c.device, c.min_arch, c.max_arch, c.archs) for c in spec.capabilities)),
            same(spec.dtypes),
            where(spec.location),
            where(target),
        )
        for spec, target in linked.declared
    )
    ops = tuple(
        (
            info.id,
            same(info.group),
            same(info.description),
            same(info.signature),
            same(info.reference),
            same(info.dtypes),
            same(info.mutates),
            dict(info.tolerance),
            same(info.priority),
            dict(info.platform_priority),
            info.dispatch_arg,
            info.samples_data,
            where(info.location),
            tuple(position[id(spec)] for spec in info.backends.values()),
        )
        for info in linked.ops.values()
    )
    return linked.settings, declared, ops


def from_plain(data: tuple[Any, ...], files: Sequence[str]) -> Linked:
    """The Linked that `to_plain` wrote, its locations in the given shown paths."""
    settings, declared_data, ops_data = data
    capability_sets: dict[tuple[Any, ...], tuple[Capability, ...]] = {}  # a few sets serve many backends
    declared = []
    for op, backend, target, requires, capabilities, dtypes, loc, tloc in declared_data:
        built = capability_sets.get(capabilities)
        if built is None:
            built = capability_sets[capabilities] = tuple(Capability(*cap) for cap in capabilities)
        declared.append(
            (
                KernelSpec(op, backend, target, requires, built, dtypes, Location(files[loc[0]], loc[1], loc[2])),
                Location(files[tloc[0]], tloc[1], tloc[2]),
            )
        )
    ops = {}
    for (
        op_id,
        group,
        description,
        signature,
        reference,
        dtypes,
        mutates,
        tolerance,
        priority,
        platform_priority,
        dispatch_arg,
        samples_data,
        loc,
        backends,
    ) in ops_data:
        specs = [declared[number][0] for number in backends]
        ops[op_id] = OpInfo(
            op_id,
            group,
            description,
            signature,
            reference,
            dtypes,
            mutates,
            MappingProxyType(tolerance),
            priority,
            MappingProxyType(platform_priority),
            dispatch_arg,
            samples_data,
            Location(files[loc[0]], loc[1], loc[2]),
            MappingProxyType({spec.backend: spec for spec in specs}),
        )
    return Linked(settings, ops, declared)
