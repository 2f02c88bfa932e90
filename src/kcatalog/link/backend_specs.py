"""One op's targets as kernel specs: its backends (or an extension's backends or replacements) checked against
the known backends, the op's dtypes and the device kinds, and declared with their eligibility gates and the op's
fake target, so that every target is checked statically."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import yaml

from .. import codes
from ..errors import did_you_mean
from ..model import FAKE_REFERENCE, Capability, KernelSpec
from ..read.yaml_nodes import children, find_node, node_location
from ..validate.schema import BackendDecl, OpDecl
from ..validate.validator import ValidatedFile
from .context import LinkContext


def backend_specs(
    context: LinkContext,
    file: ValidatedFile,
    op_id: str,
    op_dtypes: tuple[str, ...] | None,
    backends: Mapping[str, BackendDecl],
    op_node: yaml.Node,
    *,
    key: str = "backends",
) -> dict[str, KernelSpec]:
    """The specs of `backends`, written under `key` in `op_node`; each, and its gate, is added to the declared."""
    specs: dict[str, KernelSpec] = {}
    backend_nodes = children(children(op_node).get(key, (None, None))[1])
    for name, backend in backends.items():
        key_node, value_node = backend_nodes[name]
        location = node_location(file.path, key_node)
        if context.settings is not None and name not in context.known:
            context.diagnostics.error(
                codes.UNKNOWN_BACKEND,
                f"unknown backend '{name}' in op '{op_id}'{did_you_mean(name, context.known)}; "
                f"known: {', '.join(context.known)}",
                location,
            )
        extra = [d for d in backend.dtypes or () if op_dtypes is not None and d not in op_dtypes]
        if extra and op_dtypes is not None:
            context.error_at(
                file,
                children(value_node)["dtypes"][1],
                codes.DTYPE_NOT_OF_OP,
                f"backend '{name}' of op '{op_id}' lists {', '.join(extra)}, not among the op's "
                f"dtypes ({', '.join(op_dtypes)})",
            )
        for index, capability in enumerate(backend.capabilities):
            context.check_device(capability.device, file, find_node(value_node, ["capabilities", index, "device"]))
        info = context.settings.backends.get(name) if context.settings is not None else None
        specs[name] = KernelSpec(
            op=op_id,
            backend=name,
            target=backend.target,
            requires=backend.requires,
            capabilities=tuple(Capability(c.device, c.min_arch, c.max_arch, c.archs) for c in backend.capabilities),
            dtypes=backend.dtypes or op_dtypes,
            location=location,
            target_location=node_location(file.path, children(value_node)["target"][1]),
            allowed_modules=context.allow_lists(file),
            auto=backend.auto if backend.auto is not None else info is None or info.auto,
            layer=context.layer(file),
            traceable=backend.traceable,
            eligible=backend.eligible,
        )
        context.declared.append(specs[name])
        if backend.eligible is not None:  # the gate's target is checked statically like every target
            gate_key, gate_value = children(value_node)["eligible"]
            context.declared.append(
                dataclasses.replace(
                    specs[name],
                    backend=f"{name} (eligible)",
                    target=backend.eligible,
                    location=node_location(file.path, gate_key),
                    target_location=node_location(file.path, gate_value),
                    eligible=None,
                )
            )
    return specs


def declare_fake(context: LinkContext, file: ValidatedFile, op_id: str, op: OpDecl, op_node: yaml.Node) -> None:
    """A fake given as a target is declared with the backends, so that it is checked as every target is."""
    if op.fake is None or op.fake == FAKE_REFERENCE:
        return
    key_node, value_node = children(op_node)["fake"]
    context.declared.append(
        KernelSpec(
            op=op_id,
            backend="fake",
            target=op.fake,
            requires=(),
            capabilities=(),
            dtypes=op.dtypes,
            location=node_location(file.path, key_node),
            target_location=node_location(file.path, value_node),
            allowed_modules=context.allow_lists(file),
            layer=context.layer(file),
        )
    )
