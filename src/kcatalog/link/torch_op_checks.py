"""The ops as torch.library ops, without torch: each op's schema, and why it cannot become a torch op (no
signature, a type no schema has, no fake, a torch name two ops share), kept on the op (KC212-KC214)."""

from __future__ import annotations

from collections.abc import Mapping

from .. import codes
from ..errors import Diagnostic, Severity
from ..validate.schema import FAKE_REFERENCE
from .pending import PendingOp
from .signature import signature_params
from .torch_schema import torch_op_name, torch_schema


def link_torch_op(pending: PendingOp) -> None:
    """The op's torch.library schema, its fake target (declared, so that its target is checked like every
    other), and why it cannot become a torch op (kept on the op; warnings where the policy asks)."""
    op, op_id, file = pending.op, pending.op_id, pending.file
    if op.signature is None:
        pending.torch_problems.append(
            Diagnostic(
                codes.TORCH_SCHEMA_UNSUPPORTED,
                f"op '{op_id}' cannot be a torch op: it declares no signature to derive a schema from",
                pending.location,
                Severity.WARNING,
            )
        )
        return
    try:
        params = signature_params(op.signature)
    except ValueError:
        return  # reported by check_arguments
    if any(name not in params for name in op.mutates):
        return  # reported by check_arguments
    try:
        schema = torch_schema(op.signature, op.mutates)
    except ValueError as exc:
        pending.torch_problems.append(
            Diagnostic(
                codes.TORCH_SCHEMA_UNSUPPORTED,
                f"op '{op_id}' cannot be a torch op: {exc}",
                file.locations.value(("ops", pending.name, "signature")),
                Severity.WARNING,
            )
        )
        return
    pending.torch_schema = schema.schema
    if op.fake is None and not schema.returns_nothing:
        returns = schema.schema.rpartition(" -> ")[2]
        pending.torch_problems.append(
            Diagnostic(
                codes.TORCH_FAKE_MISSING,
                f"op '{op_id}' returns {returns} but declares no fake implementation, so torch.compile "
                f"cannot trace it as a torch op; declare 'fake: {FAKE_REFERENCE}' where its torch reference "
                "runs on meta tensors, or 'fake: package.module:attr'",
                pending.location,
                Severity.WARNING,
            )
        )


def check_torch_names(pending_ops: Mapping[str, PendingOp]) -> None:
    """Two ops whose ids differ only in where the dot is ('a_b.c', 'a.b_c') would be one torch op."""
    first: dict[str, str] = {}
    for op_id, pending in pending_ops.items():
        name = torch_op_name(op_id)
        other = first.setdefault(name, op_id)
        if other != op_id:
            pending.torch_problems.append(
                Diagnostic(
                    codes.TORCH_NAME_COLLISION,
                    f"op '{op_id}' and op '{other}' (declared at {pending_ops[other].location}) "
                    f"would both be torch op '{name}'",
                    pending.location,
                    Severity.WARNING,
                )
            )
