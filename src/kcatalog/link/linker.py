"""Validated files to the typed model: the link stages run in order (settings, ops and their fields, extensions,
priorities, torch ops, policy, layer mappings), each in its own module of link/.

Everything here depends only on the files' contents, so its result can be cached; the checks that
depend on this machine or the caller (targets, allow-list, `require=`, overrides) are in check/.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from .. import codes
from ..diagnostics import Diagnostics
from ..model import NOTHING_BROKEN, BrokenOps, CatalogLayer, LinkedCatalog, OpInfo
from ..validate.schema import Manifest
from ..validate.validator import ValidatedFile
from .backend_specs import backend_specs, declare_fake
from .backward import link_backwards
from .context import LinkContext
from .extensions import link_extensions
from .layer_mappings import link_mappings
from .op_fields import check_op_fields
from .pending import PendingOp
from .policy import check_policy
from .priorities import resolve_priorities
from .settings import link_settings
from .torch_op_checks import check_torch_names, link_torch_op


def link_files(
    files: Sequence[ValidatedFile],
    diagnostics: Diagnostics,
    *,
    settings_found: bool = False,
    layers: Sequence[CatalogLayer] = (),
    broken: BrokenOps = NOTHING_BROKEN,
) -> LinkedCatalog:
    """Link validated files (of `layers`, in order), adding what is wrong to `diagnostics`; the result is complete
    only when none of them is an error. The `broken` ops (validator.ValidatedFiles) are left out, and what names
    them is not reported."""
    start = len(diagnostics)
    context = LinkContext(diagnostics, layers, broken=broken)
    link_settings(context, files, settings_found)
    ops = _link_ops(context, files)
    check_policy(context, files, ops)
    mappings = link_mappings(files, ops, context.broken, context.allow_lists, diagnostics)
    settings = context.settings
    warnings = tuple(d for d in diagnostics.since(start) if not d.is_error)
    declared = (*context.declared, *(t for mapping in mappings for t in (mapping.forward, mapping.prepare) if t))
    return LinkedCatalog(settings, MappingProxyType(ops), declared, warnings, mappings, broken=context.broken)


def _link_ops(context: LinkContext, files: Sequence[ValidatedFile]) -> dict[str, OpInfo]:
    """Every manifest's ops, each checked and then extended, their orders resolved, frozen into the model."""
    manifests = [(f, f.model) for f in files if isinstance(f.model, Manifest)]
    groups: dict[str, str] = {}
    pending_ops: dict[str, PendingOp] = {}
    for file, manifest in manifests:
        for name, op in manifest.ops.items():
            op_path = ("ops", name)
            op_id = f"{manifest.group}.{name}"
            location = file.locations.key(op_path)
            specs = backend_specs(context, file, op_id, op.dtypes, op.backends, op_path)
            fake = declare_fake(context, file, op_id, op, op_path)
            check_op_fields(file, op_id, op, location, op_path, context.diagnostics)
            if op_id in pending_ops:
                earlier = pending_ops[op_id]
                context.diagnostics.error(
                    codes.DUPLICATE_OP,
                    f"op '{op_id}' already declared at {earlier.location}{_across(context, earlier.file, file)}",
                    location,
                )
                continue
            pending = pending_ops[op_id] = PendingOp(file, name, op_id, op, location, specs, fake)
            link_torch_op(pending)
            groups[op_id] = manifest.group
        _check_left_out(context, file, manifest)
    link_extensions(context, manifests, pending_ops)
    # An op whose extension was left out (its backends are not all known), or with a device kind none declares.
    for op_id in context.broken.ops:
        pending_ops.pop(op_id, None)
    for pending in pending_ops.values():  # after extensions, which may add the backends an order names
        resolve_priorities(context, pending)
    link_backwards(context, pending_ops)  # after extensions: the backends they add must be covered too
    check_torch_names(pending_ops)  # their problems are warnings where a policy asks for torch ops (policy.py)
    return {op_id: pending.freeze(groups[op_id], context.layer(pending.file)) for op_id, pending in pending_ops.items()}


def _check_left_out(context: LinkContext, file: ValidatedFile, manifest: Manifest) -> None:
    """The own checks of the sound backends of the ops and extensions left out of the file for their errors (names,
    device kinds, targets), so that those errors show now too; the ops themselves are not linked."""
    for part in file.left_out:
        if not part.backends:  # not an op or extension, or none of its backends is sound
            continue
        kind, name = part.path
        op_id = f"{manifest.group}.{name}" if kind == "ops" else name
        for key, backends in part.backends.items():
            backend_specs(context, file, op_id, None, backends, (kind, name), key=key)


def _across(context: LinkContext, earlier: ValidatedFile, later: ValidatedFile) -> str:
    """Where two definitions come from different layers, both layers' names (for a duplicate's message)."""
    if earlier.layer == later.layer:
        return ""
    return f" by layer '{context.layer(earlier)}'; layer '{context.layer(later)}' declares it again"
