"""An op's own backend orders (`priority`, `platform_priority`) resolved against its backends and the settings'
named priority lists, once extensions have added their backends."""

from __future__ import annotations

from .. import codes
from ..errors import did_you_mean
from ..platform import contending
from .context import LinkContext
from .pending import PendingOp


def resolve_priorities(context: LinkContext, pending: PendingOp) -> None:
    """An op's own orders must name its backends; a name of a settings list stands for that list, which
    may name backends the op lacks (selection ranks only the op's own)."""
    op, op_id, name, backends = pending.op, pending.op_id, pending.name, list(pending.specs)
    pending.priority = _priority_list(
        context, pending, op.priority, ("ops", name, "priority"), f"priority of op '{op_id}'", backends
    )
    for device, order in op.platform_priority.items():
        context.check_device(device, pending.file.locations.key(("ops", name, "platform_priority", device)))
        resolved = _priority_list(
            context,
            pending,
            order,
            ("ops", name, "platform_priority", device),
            f"{device} priority of op '{op_id}'",
            backends,
        )
        if resolved is not None:
            pending.platform_priority[device] = resolved
    _check_ranked(context, pending)


def _check_ranked(context: LinkContext, pending: PendingOp) -> None:
    """A warning where an op has backends that priority may choose and that can run on one platform, and no order
    ranks them (its own, or the settings'): declaration order decides, as in a registry migrated without one."""
    settings = context.settings
    if settings is None or settings.priority or settings.platform_priority:
        return
    if pending.priority or pending.platform_priority:
        return
    rivals = contending({name: spec.capabilities for name, spec in pending.specs.items() if spec.auto})
    if rivals:
        context.diagnostics.warning(
            codes.UNORDERED_BACKENDS,
            f"op '{pending.op_id}' has backends {', '.join(rivals)} that can run on one platform and no priority "
            "ranks them (neither its own nor the settings'): the first declared that can run is chosen",
            pending.location,
        )


def _priority_list(
    context: LinkContext,
    pending: PendingOp,
    order: tuple[str, ...] | str | None,
    path: tuple[str, ...],
    what: str,
    backends: list[str],
) -> tuple[str, ...] | None:
    if order is None or not isinstance(order, str):
        if order is not None:
            context.check_names(order, pending.file, path, what, allowed=backends)
        return order
    named = context.settings.priorities if context.settings is not None else {}
    if order not in named and context.settings is not None:
        context.diagnostics.error(
            codes.UNKNOWN_PRIORITY_LIST,
            f"{what} names priority list '{order}', which the settings do not declare"
            f"{did_you_mean(order, named)}; declared: {', '.join(named) or 'none'}",
            pending.file.locations.value(path),
        )
    return named.get(order)
