"""Layers files linked into the typed model: each mapping's classes, forward (declared as a target), ops and
conditions, with duplicate names and unknown ops reported where they are written."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import yaml

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import did_you_mean, listing
from ..model import KernelSpec, LayerClass, LayerCondition, LayerMapping, OpInfo
from ..read.yaml_nodes import children, node_location
from ..validate.mappings_schema import LAYERS_KEY, LayersFile
from ..validate.validator import ValidatedFile

FORWARD_BACKEND = "forward"
PREPARE_BACKEND = "prepare"


def forward_op(name: str) -> str:
    """The `op` of a mapping's forward spec: not an op id (those have no ':'), so never confused with one."""
    return f"layers:{name}"


def link_mappings(
    files: Sequence[ValidatedFile],
    ops: Mapping[str, OpInfo],
    allow_lists: Callable[[ValidatedFile], tuple[tuple[str, ...], ...]],
    diagnostics: Diagnostics,
) -> tuple[LayerMapping, ...]:
    """Every layers file's mappings, in file then declaration order; problems are added to `diagnostics`."""
    mappings: dict[str, LayerMapping] = {}
    for file in files:
        model = file.model
        if not isinstance(model, LayersFile):
            continue
        nodes = children(children(file.parsed.root).get(LAYERS_KEY, (None, None))[1])
        for name, entry in model.layers.items():
            key_node, value_node = nodes[name]
            location = node_location(file.path, key_node)
            first = mappings.get(name)
            if first is not None:
                diagnostics.error(
                    codes.DUPLICATE_LAYER_MAPPING,
                    f"layer mapping '{name}' already declared at {first.location}",
                    location,
                )
                continue
            fields = children(value_node)
            for index, op_id in enumerate(entry.ops):
                if op_id not in ops:
                    diagnostics.error(
                        codes.LAYER_OP_UNKNOWN,
                        f"layer mapping '{name}' names op '{op_id}', which no manifest declares"
                        f"{did_you_mean(op_id, ops)}; available: {listing(ops)}",
                        node_location(file.path, _item(fields["ops"][1], index)),
                    )
            forward = _target_spec(file, name, FORWARD_BACKEND, entry.forward, fields, allow_lists(file))
            prepare = None
            if entry.prepare is not None:
                prepare = _target_spec(file, name, PREPARE_BACKEND, entry.prepare, fields, allow_lists(file))
            classes = tuple(
                LayerClass(target, node_location(file.path, _item(fields["classes"][1], index)))
                for index, target in enumerate(entry.classes)
            )
            when = children(fields["when"][1]) if "when" in fields else {}
            conditions = tuple(
                LayerCondition(attribute, allowed, node_location(file.path, when[attribute][0]))
                for attribute, allowed in entry.when.items()
            )
            mappings[name] = LayerMapping(
                name, entry.description, classes, forward, prepare, entry.ops, conditions, location
            )
    return tuple(mappings.values())


def _target_spec(
    file: ValidatedFile,
    name: str,
    field: str,
    target: str,
    fields: Mapping[str, tuple[yaml.Node, yaml.Node]],
    allow_lists: tuple[tuple[str, ...], ...],
) -> KernelSpec:
    """A mapping's `forward` or `prepare` as a spec: checked, allow-listed and imported like every kernel target."""
    key_node, value_node = fields[field]
    return KernelSpec(
        op=forward_op(name),
        backend=field,
        target=target,
        requires=(),
        capabilities=(),
        dtypes=(),
        location=node_location(file.path, key_node),
        target_location=node_location(file.path, value_node),
        allowed_modules=allow_lists,
    )


def _item(node: yaml.Node | None, index: int) -> yaml.Node | None:
    """The index-th item of a sequence node, or the node itself when it has none."""
    if isinstance(node, yaml.SequenceNode) and index < len(node.value):
        item: yaml.Node = node.value[index]
        return item
    return node
