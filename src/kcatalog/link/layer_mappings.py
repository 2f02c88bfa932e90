"""Layers files linked into the typed model: each mapping's classes, forward (declared as a target), ops and
conditions, with duplicate names and unknown ops reported where they are written."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import did_you_mean, listing
from ..model import BrokenOps, LayerClass, LayerCondition, LayerMapping, Mode, OpInfo, Target, TargetRole
from ..validate.mappings_schema import LAYERS_KEY, LayersFile
from ..validate.validator import ValidatedFile
from .context import declared_at


def link_mappings(
    files: Sequence[ValidatedFile],
    ops: Mapping[str, OpInfo],
    broken: BrokenOps,
    allow_lists: Callable[[ValidatedFile], tuple[tuple[str, ...], ...]],
    diagnostics: Diagnostics,
) -> tuple[LayerMapping, ...]:
    """Every layers file's mappings, in file then declaration order; problems are added to `diagnostics` (an op
    among the `broken` is not one: its own errors are reported where it is declared)."""
    mappings: dict[str, LayerMapping] = {}
    for file in files:
        model = file.model
        if not isinstance(model, LayersFile):
            continue
        at = file.locations
        for name, entry in model.layers.items():
            path = (LAYERS_KEY, name)
            location = at.key(path)
            first = mappings.get(name)
            if first is not None:
                diagnostics.error(
                    codes.DUPLICATE_LAYER_MAPPING,
                    f"layer mapping '{name}' already declared at {first.location}",
                    location,
                )
                continue
            for index, op_id in enumerate(entry.ops):
                if op_id not in ops and not broken.covers(op_id):
                    diagnostics.error(
                        codes.LAYER_OP_UNKNOWN,
                        f"layer mapping '{name}' names op '{op_id}', which no manifest declares"
                        f"{did_you_mean(op_id, ops)}; available: {listing(ops)}",
                        at.value((*path, "ops", index)),
                    )
                elif Mode.TRAINING in entry.modes and op_id in ops and ops[op_id].backward is None:
                    diagnostics.error(
                        codes.LAYER_OP_NO_BACKWARD,
                        f"layer mapping '{name}' is declared for training, but its op '{op_id}' declares no "
                        f"backward: no gradient would flow through it (declare the op's `backward:`, or leave "
                        f"'training' out of the mapping's modes)",
                        at.value((*path, "ops", index)),
                    )
            forward = declared_at(file, (*path, "forward"), entry.forward, TargetRole.FORWARD, name, allow_lists(file))
            prepare = None
            if entry.prepare is not None:
                prepare = declared_at(
                    file, (*path, "prepare"), entry.prepare, TargetRole.PREPARE, name, allow_lists(file)
                )
            classes = tuple(
                LayerClass(Target.parse(target), at.value((*path, "classes", index)))
                for index, target in enumerate(entry.classes)
            )
            conditions = tuple(
                LayerCondition(attribute, allowed, at.key((*path, "when", attribute)))
                for attribute, allowed in entry.when.items()
            )
            mappings[name] = LayerMapping(
                name,
                entry.description,
                classes,
                forward,
                prepare,
                entry.ops,
                conditions,
                location,
                tuple(dict.fromkeys(Mode(mode) for mode in entry.modes)),
            )
    return tuple(mappings.values())
