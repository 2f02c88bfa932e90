"""One op's own fields checked against each other: its reference against its backends (and the policy), its
signature against `mutates` and `dispatch_arg`, its tolerances against its dtypes, its samples against all three.

Nothing here depends on other ops or files: the linker (link/linker.py) runs it for each op it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import Location, did_you_mean
from ..model import FAKE_REFERENCE, Policy
from ..read.yaml_nodes import children, find_node, node_location
from ..validate.schema import OpDecl
from ..validate.validator import ValidatedFile
from .samples import check_samples
from .signature import signature_params, signature_positional


def check_op_fields(
    file: ValidatedFile,
    op_id: str,
    op: OpDecl,
    location: Location,
    op_node: yaml.Node,
    policy: Policy | None,
    diagnostics: Diagnostics,
) -> None:
    """Add what is wrong with the op's fields (declared in `file` at `location`, its mapping `op_node`)."""
    checks = _OpFields(file, op_id, op, location, op_node, diagnostics)
    checks.reference(policy)
    checks.arguments()
    checks.tolerance()
    checks.samples()


@dataclass
class _OpFields:
    file: ValidatedFile
    op_id: str
    op: OpDecl
    location: Location
    op_node: yaml.Node
    diagnostics: Diagnostics

    def error(self, code: str, message: str, location: Location | None) -> None:
        self.diagnostics.error(code, message, location)

    def error_at(self, file: ValidatedFile, node: yaml.Node | None, code: str, message: str) -> None:
        self.error(code, message, node_location(file.path, node))

    def reference(self, policy: Policy | None) -> None:
        """The reference is one of the op's backends; where the policy requires it, every op names one."""
        file, op_id, op, op_node = self.file, self.op_id, self.op, self.op_node
        if op.reference is None and op.fake == FAKE_REFERENCE:
            self.error(
                codes.REFERENCE_NOT_A_BACKEND,
                f"op '{op_id}' declares 'fake: {FAKE_REFERENCE}' but names no reference backend to run",
                self.location,
            )
        if op.reference is not None and op.reference not in op.backends:
            self.error_at(
                file,
                children(op_node)["reference"][1],
                codes.REFERENCE_NOT_A_BACKEND,
                f"reference backend '{op.reference}' is not a backend of op '{op_id}'"
                f"{did_you_mean(op.reference, op.backends)}; its backends: {', '.join(op.backends)}",
            )
        if op.reference is None and policy is not None and policy.require_reference:
            self.error(
                codes.POLICY_REFERENCE_MISSING,
                f"op '{op_id}' names no reference backend, which the policy requires (require_reference); "
                f"its backends: {', '.join(op.backends)}",
                self.location,
            )

    def samples(self) -> None:
        """Samples must fit the signature, use defined sizes and compare real outputs."""
        file, op_id, op, op_node = self.file, self.op_id, self.op, self.op_node
        if op.samples is None:
            return
        if op.signature is None or op.dtypes is None:
            missing = " and ".join(f for f, v in (("signature", op.signature), ("dtypes", op.dtypes)) if v is None)
            self.error_at(
                file,
                find_node(op_node, ["samples"], key=True),
                codes.SAMPLE_ARGUMENTS,
                f"samples of op '{op_id}' need the op's {missing}, to build and check its arguments",
            )
            return

        def where(path: tuple[str, ...]) -> Location:
            return node_location(file.path, find_node(op_node, ["samples", *path], key=True))

        try:
            check_samples(op_id, op.signature, op.mutates, op.samples, where, self.diagnostics)
        except ValueError:
            return  # an invalid signature is reported by arguments()

    def tolerance(self) -> None:
        """Tolerances may only be given for dtypes the op declares."""
        file, op_id, op, op_node = self.file, self.op_id, self.op, self.op_node
        extra = [dtype for dtype in op.tolerance if op.dtypes is not None and dtype not in op.dtypes]
        if extra and op.dtypes is not None:
            key_node = children(children(op_node)["tolerance"][1])[extra[0]][0]
            self.error(
                codes.DTYPE_NOT_OF_OP,
                f"tolerance of op '{op_id}' lists {', '.join(extra)}, not among the op's dtypes "
                f"({', '.join(op.dtypes)})",
                node_location(file.path, key_node),
            )

    def arguments(self) -> None:
        """The signature must parse; names in `mutates` and `dispatch_arg` must be its parameters (a position,
        one of its positional parameters); an op without a signature dispatches on `dispatch_arg` as given."""
        file, op_id, op, op_node = self.file, self.op_id, self.op, self.op_node
        entries = children(op_node)
        if isinstance(op.dispatch_arg, int) and op.dispatch_arg < 0:
            self.error_at(
                file,
                entries["dispatch_arg"][1],
                codes.INVALID_VALUE,
                f"'dispatch_arg': a position counts from 0, got {op.dispatch_arg}",
            )
            return
        if op.signature is None:
            if op.mutates:
                self.error_at(
                    file,
                    entries["mutates"][1],
                    codes.ARGUMENT_NOT_IN_SIGNATURE,
                    f"mutates names arguments of op '{op_id}', which declares no signature to name them in",
                )
            return
        try:
            params = signature_params(op.signature)
        except ValueError as exc:
            self.error(codes.INVALID_VALUE, f"'signature': {exc}", node_location(file.path, entries["signature"][1]))
            return
        if not params and not op.dispatch_arg:  # an op handle dispatches on a named tensor parameter
            self.error(
                codes.ARGUMENT_NOT_IN_SIGNATURE,
                f"op '{op_id}' has no named parameter to dispatch on in {op.signature!r}; "
                "declare the tensor parameter by name",
                node_location(file.path, entries["signature"][1]),
            )
        named = [("mutates", name) for name in op.mutates]
        if isinstance(op.dispatch_arg, int):
            positional = signature_positional(op.signature)
            if op.dispatch_arg >= len(positional):
                self.error_at(
                    file,
                    entries["dispatch_arg"][1],
                    codes.ARGUMENT_NOT_IN_SIGNATURE,
                    f"dispatch_arg is position {op.dispatch_arg}, but op '{op_id}' takes "
                    f"{len(positional)} positional parameter{'s' * (len(positional) != 1)}",
                )
        elif op.dispatch_arg:
            named.append(("dispatch_arg", op.dispatch_arg))
        for field_name, name in named:
            if name not in params:
                self.error(
                    codes.ARGUMENT_NOT_IN_SIGNATURE,
                    f"{field_name} names '{name}', not a parameter of op '{op_id}'"
                    f"{did_you_mean(name, params)}; parameters: {', '.join(params)}",
                    node_location(file.path, entries[field_name][1]),
                )
