"""One op's targets as kernel specs: its backends (or an extension's backends or replacements) checked against
the known backends, the op's dtypes and the device kinds, and declared with their eligibility gates and the op's
fake target, so that every target is checked statically."""

from __future__ import annotations

from collections.abc import Mapping

from .. import codes
from ..errors import did_you_mean
from ..model import Capability, Importable, KernelSpec, Promise, Promised, Target, TargetRole
from ..platform import DEVICES
from ..validate.schema import FAKE_REFERENCE, BackendDecl, OpDecl, cuda_only_window
from ..validate.validator import ValidatedFile
from .context import LinkContext, declared_at


def backend_specs(
    context: LinkContext,
    file: ValidatedFile,
    op_id: str,
    op_dtypes: tuple[str, ...] | None,
    backends: Mapping[str, BackendDecl],
    op_path: tuple[str, ...],
    *,
    key: str = "backends",
) -> dict[str, KernelSpec]:
    """The specs of `backends`, written under `key` in the op at `op_path` in the file; each, and its gate, is
    added to the declared."""
    specs: dict[str, KernelSpec] = {}
    at = file.locations
    for name, backend in backends.items():
        path = (*op_path, key, name)
        location = at.key(path)
        if context.settings is not None and name not in context.known:
            context.diagnostics.error(
                codes.UNKNOWN_BACKEND,
                f"unknown backend '{name}' in op '{op_id}'{did_you_mean(name, context.known)}; "
                f"known: {', '.join(context.known)}",
                location,
            )
        extra = [d for d in backend.dtypes or () if op_dtypes is not None and d not in op_dtypes]
        if extra and op_dtypes is not None:
            context.diagnostics.error(
                codes.DTYPE_NOT_OF_OP,
                f"backend '{name}' of op '{op_id}' lists {', '.join(extra)}, not among the op's "
                f"dtypes ({', '.join(op_dtypes)})",
                at.value((*path, "dtypes")),
            )
        for index, capability in enumerate(backend.capabilities):
            known = context.check_device(capability.device, at.value((*path, "capabilities", index, "device")))
            if not known:  # it would run nowhere: what names it (a tuned table, the policy) would only say so again
                context.left_out(op_id)
            elif capability.device not in DEVICES and capability.has_arch_window:  # a declared kind
                context.diagnostics.error(
                    codes.INVALID_VALUE,
                    f"'capabilities'[{index}]: {cuda_only_window(capability.device)}",
                    at.value((*path, "capabilities", index)),
                )
        info = context.settings.backends.get(name) if context.settings is not None else None
        lists, layer = context.allow_lists(file), context.layer(file)
        gate = None
        if backend.eligible is not None:  # the gate's target is checked statically like every target
            gate = declared_at(
                file, (*path, "eligible"), backend.eligible, TargetRole.GATE, op_id, lists, layer=layer, backend=name
            )
        specs[name] = KernelSpec(
            op=op_id,
            backend=name,
            target=Target.parse(backend.target),
            requires=backend.requires,
            capabilities=tuple(Capability(c.device, c.min_arch, c.max_arch, c.archs) for c in backend.capabilities),
            dtypes=backend.dtypes or op_dtypes,
            location=location,
            target_location=at.value((*path, "target")),
            allowed_modules=context.allow_lists(file),
            auto=backend.auto if backend.auto is not None else info is None or info.auto,
            layer=context.layer(file),
            traceable=backend.traceable,
            gate=gate,
            promises=_promises(context, file, path, backend),
        )
        context.declared.append(specs[name])
        if gate is not None:
            context.declared.append(gate)
    return specs


def _promises(
    context: LinkContext, file: ValidatedFile, path: tuple[str, ...], backend: BackendDecl
) -> tuple[Promised, ...]:
    """What the backend promises, strongest first, each on the device kinds it names (checked: KC215)."""
    found = []
    for promise, declared in (
        (Promise.BATCH_INVARIANT, backend.batch_invariant),
        (Promise.DETERMINISTIC, backend.deterministic),
    ):
        if declared is None or declared is False:
            continue
        devices = None if declared is True else declared
        for index, device in enumerate(devices or ()):
            context.check_device(device, file.locations.value((*path, promise.value, index)))
        found.append(Promised(promise, devices))
    return tuple(found)


def declare_fake(
    context: LinkContext, file: ValidatedFile, op_id: str, op: OpDecl, op_path: tuple[str, ...]
) -> Importable | None:
    """A fake given as a target, declared with the backends so that it is checked as every target is."""
    if op.fake is None or op.fake == FAKE_REFERENCE:
        return None
    lists, layer = context.allow_lists(file), context.layer(file)
    fake = declared_at(file, (*op_path, "fake"), op.fake, TargetRole.FAKE, op_id, lists, layer=layer)
    context.declared.append(fake)
    return fake
