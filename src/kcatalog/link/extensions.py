"""Extensions merged into the ops they extend: every file's added backends first, then its `replaces`, so that
an added backend may be replaced too; a backend is declared once and replaced at most once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import codes
from ..errors import did_you_mean
from ..model import KernelSpec
from ..validate.schema import Manifest
from ..validate.validator import ValidatedFile
from .backend_specs import backend_specs
from .context import LinkContext
from .pending import PendingOp


def link_extensions(
    context: LinkContext, manifests: Sequence[tuple[ValidatedFile, Manifest]], pending_ops: Mapping[str, PendingOp]
) -> None:
    """Every manifest's extensions merged into the ops of `pending_ops` they extend."""
    replaced: dict[tuple[str, str], KernelSpec] = {}  # (op, backend) -> the spec that replaced it
    for replacing in (False, True):  # every added backend first, so that one may be replaced too
        for file, manifest in manifests:
            _extend(context, file, manifest, pending_ops, replaced, replacing=replacing)


def _extend(
    context: LinkContext,
    file: ValidatedFile,
    manifest: Manifest,
    pending_ops: Mapping[str, PendingOp],
    replaced: dict[tuple[str, str], KernelSpec],
    *,
    replacing: bool,
) -> None:
    """An extension's added backends (or, `replacing`, its replacements) merged into the op it extends."""
    for op_id, extension in manifest.extends.items():
        pending = pending_ops.get(op_id)
        if pending is None:
            if replacing:
                continue
            if context.broken.covers(op_id):  # its own errors are reported: check only the backends given here
                for key, given in (("backends", extension.backends), ("replaces", extension.replaces)):
                    backend_specs(context, file, op_id, None, given, ("extends", op_id), key=key)
            else:
                context.diagnostics.error(
                    codes.EXTENDS_UNKNOWN_OP,
                    f"extends op '{op_id}', which no manifest declares{did_you_mean(op_id, pending_ops)}",
                    file.locations.key(("extends", op_id)),
                )
            continue
        given = extension.replaces if replacing else extension.backends
        key = "replaces" if replacing else "backends"
        added = backend_specs(context, file, op_id, pending.op.dtypes, given, ("extends", op_id), key=key)
        specs = pending.specs
        for name, spec in added.items():
            if replacing:
                _replace(context, pending, spec, replaced)
            elif name in specs:
                earlier = specs[name]
                across = (
                    f" by layer '{earlier.layer}'; layer '{spec.layer}' lists it under 'replaces' to swap it"
                    if earlier.layer != spec.layer
                    else ""
                )
                context.diagnostics.error(
                    codes.DUPLICATE_BACKEND,
                    f"backend '{name}' of op '{op_id}' already declared at {earlier.location}{across}",
                    spec.location,
                )
            else:
                specs[name] = spec


def _replace(
    context: LinkContext, pending: PendingOp, spec: KernelSpec, replaced: dict[tuple[str, str], KernelSpec]
) -> None:
    """`spec` takes the place of the op's backend of its name; one backend is replaced at most once."""
    op_id, name, specs = pending.op_id, spec.backend, pending.specs
    if name not in specs:
        context.diagnostics.error(
            codes.REPLACES_UNKNOWN_BACKEND,
            f"replaces backend '{name}' of op '{op_id}', which the op does not have"
            f"{did_you_mean(name, specs)}; its backends: {', '.join(specs)}",
            spec.location,
        )
        return
    earlier = replaced.get((op_id, name))
    if earlier is not None:
        context.diagnostics.error(
            codes.DUPLICATE_BACKEND,
            f"backend '{name}' of op '{op_id}' already replaced at {earlier.location}"
            + (
                f" by layer '{earlier.layer}'; layer '{spec.layer}' replaces it again"
                if earlier.layer != spec.layer
                else ""
            ),
            spec.location,
        )
        return
    replaced[(op_id, name)] = specs[name] = spec
