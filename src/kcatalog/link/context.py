"""What the link stages share: the merged settings and the names ops are checked against (known backends,
device kinds, each layer's allow-list and policies), where diagnostics go, and the targets declared so far."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import Location, did_you_mean
from ..model import (
    NOTHING_BROKEN,
    BrokenOps,
    CatalogLayer,
    CatalogSettings,
    Declared,
    Importable,
    LayerPolicy,
    Target,
    TargetRole,
)
from ..platform import DEVICES
from ..validate.validator import ValidatedFile
from .merged_settings import layer_name


@dataclass
class LinkContext:
    """Collects diagnostics while assembling ops from validated files; link/settings.py fills in the settings."""

    diagnostics: Diagnostics  # where every link stage writes what it finds
    layers: Sequence[CatalogLayer] = ()
    settings: CatalogSettings | None = None  # every layer's settings merged (link/merged_settings.py)
    known: tuple[str, ...] = ()
    devices: tuple[str, ...] = DEVICES  # the built-in device kinds, and those the settings declare
    # each layer's, for its own files' specs
    layer_allow_lists: Mapping[int, tuple[str, ...] | None] = field(default_factory=dict)
    policies: Mapping[int, LayerPolicy] = field(default_factory=dict)  # each layer's rules (link/policy.py)
    declared: list[Declared] = field(default_factory=list)
    # The ops declared but left out for their schema errors: named elsewhere, they are no unknown op.
    broken: BrokenOps = NOTHING_BROKEN

    def left_out(self, op_id: str) -> None:
        """Leave the op out as broken, like one with a schema error: its own error is reported where it is written,
        and nothing naming it (a tuned table, a layer mapping, the policy) reports it a second time."""
        if op_id not in self.broken.ops:
            self.broken = dataclasses.replace(self.broken, ops=(*self.broken.ops, op_id))

    def allow_lists(self, file: ValidatedFile) -> tuple[tuple[str, ...], ...]:
        """The allow-lists a target declared in `file` must satisfy: its own layer's, if it has one."""
        prefixes = self.layer_allow_lists.get(file.layer)
        return () if prefixes is None else (prefixes,)

    def layer(self, file: ValidatedFile) -> str:
        return layer_name(self.layers, file.layer)

    def check_names(
        self,
        names: Sequence[str],
        file: ValidatedFile,
        path: Sequence[str],
        what: str,
        allowed: Sequence[str] | None = None,
    ) -> None:
        """Every name must be a known backend (or one of `allowed`); the error points at the list item."""
        allowed = self.known if allowed is None else allowed
        for index, name in enumerate(names):
            if name in allowed:
                continue
            if allowed is not self.known and name in self.known:
                message = f"backend '{name}' in {what} is not a backend of the op; its backends: {', '.join(allowed)}"
            else:
                message = (
                    f"unknown backend '{name}' in {what}{did_you_mean(name, allowed)}; known: {', '.join(allowed)}"
                )
            self.diagnostics.error(codes.UNKNOWN_BACKEND, message, file.locations.value((*path, index)))

    def check_device(self, device: str, location: Location) -> bool:
        """Whether a device kind is built in or declared in the settings' `devices`; if not, the error points at
        `location`."""
        if device in self.devices:
            return True
        self.diagnostics.error(
            codes.UNKNOWN_DEVICE,
            f"unknown device '{device}'{did_you_mean(device, self.devices)}; known: {', '.join(self.devices)} "
            "(declare more under 'devices' in the catalog settings)",
            location,
        )
        return False


def declared_at(
    file: ValidatedFile,
    path: tuple[str | int, ...],
    target: str,
    role: TargetRole,
    owner: str,
    allow_lists: tuple[tuple[str, ...], ...],
    *,
    layer: str = "",
    backend: str = "",
) -> Importable:
    """The target written at `path` in the file (a gate, a fake, a layer forward), to be checked and imported under
    `allow_lists` as every kernel target is."""
    at = file.locations
    return Importable(Target.parse(target), role, owner, at.key(path), at.value(path), allow_lists, layer, backend)
