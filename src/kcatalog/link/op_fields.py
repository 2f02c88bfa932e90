"""One op's own fields checked against each other: its reference against its backends, its
signature against `mutates` and `dispatch_arg`, its tolerances against its dtypes, its samples against all three.

Nothing here depends on other ops or files: the linker (link/linker.py) runs it for each op it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import Location, did_you_mean
from ..validate.schema import FAKE_REFERENCE, OpDecl
from ..validate.validator import ValidatedFile
from .samples import check_samples
from .signature import dispatch_of, read_parameters, signature_params, signature_positional
from .table_key import resolve_table_key


def check_op_fields(
    file: ValidatedFile,
    op_id: str,
    op: OpDecl,
    location: Location,
    op_path: tuple[str, ...],
    diagnostics: Diagnostics,
) -> None:
    """Add what is wrong with the op's fields (declared in `file` at `location`, its mapping at `op_path`)."""
    checks = _OpFields(file, op_id, op, location, op_path, diagnostics)
    checks.reference()
    checks.arguments()
    checks.tolerance()
    checks.samples()
    checks.table_key()


@dataclass
class _OpFields:
    file: ValidatedFile
    op_id: str
    op: OpDecl
    location: Location
    op_path: tuple[str, ...]
    diagnostics: Diagnostics

    def error(self, code: str, message: str, location: Location | None) -> None:
        self.diagnostics.error(code, message, location)

    def key(self, *path: str) -> Location:
        """Where a key of the op's mapping (or below it) is written."""
        return self.file.locations.key((*self.op_path, *path))

    def value(self, *path: str | int) -> Location:
        """Where a value of the op's mapping (or below it) starts."""
        return self.file.locations.value((*self.op_path, *path))

    def reference(self) -> None:
        """The reference is one of the op's backends (whether the op must name one is the policy's: policy.py)."""
        op_id, op = self.op_id, self.op
        if op.reference is None and op.fake == FAKE_REFERENCE:
            self.error(
                codes.REFERENCE_NOT_A_BACKEND,
                f"op '{op_id}' declares 'fake: {FAKE_REFERENCE}' but names no reference backend to run",
                self.location,
            )
        if op.reference is not None and op.reference not in op.backends:
            self.error(
                codes.REFERENCE_NOT_A_BACKEND,
                f"reference backend '{op.reference}' is not a backend of op '{op_id}'"
                f"{did_you_mean(op.reference, op.backends)}; its backends: {', '.join(op.backends)}",
                self.value("reference"),
            )

    def samples(self) -> None:
        """Samples must fit the signature, use defined sizes and compare real outputs."""
        op_id, op = self.op_id, self.op
        if op.samples is None:
            return
        if op.signature is None or op.dtypes is None:
            missing = " and ".join(f for f, v in (("signature", op.signature), ("dtypes", op.dtypes)) if v is None)
            self.error(
                codes.SAMPLE_ARGUMENTS,
                f"samples of op '{op_id}' need the op's {missing}, to build and check its arguments",
                self.key("samples"),
            )
            return

        def where(path: tuple[str, ...]) -> Location:
            return self.key("samples", *path)

        try:
            check_samples(op_id, op.signature, op.mutates, op.samples, where, self.diagnostics)
        except ValueError:
            return  # an invalid signature is reported by arguments()

    def table_key(self) -> None:
        """Each size of the table key must be read from a call: a dimension of a tensor argument of the samples."""
        op_id, op = self.op_id, self.op
        if op.table_key is None:
            return
        if op.signature is None:
            message = f"table_key of op '{op_id}' needs the op's signature, to read its sizes from a call's arguments"
            self.error(codes.TABLE_KEY, message, self.key("table_key"))
            return
        try:
            parameters = read_parameters(op.signature)
        except ValueError:
            return  # an invalid signature is reported by arguments()
        dispatch = dispatch_of(parameters, op.dispatch_arg).name
        for problem in resolve_table_key(op_id, op.table_key, op.samples, parameters, dispatch).problems:
            self.error(codes.TABLE_KEY, problem.message, self.value("table_key", problem.index))

    def tolerance(self) -> None:
        """Tolerances may only be given for dtypes the op declares."""
        op_id, op = self.op_id, self.op
        extra = [dtype for dtype in op.tolerance if op.dtypes is not None and dtype not in op.dtypes]
        if extra and op.dtypes is not None:
            self.error(
                codes.DTYPE_NOT_OF_OP,
                f"tolerance of op '{op_id}' lists {', '.join(extra)}, not among the op's dtypes "
                f"({', '.join(op.dtypes)})",
                self.key("tolerance", extra[0]),
            )

    def arguments(self) -> None:
        """The signature must parse; names in `mutates` and `dispatch_arg` must be its parameters (a position,
        one of its positional parameters); an op without a signature dispatches on `dispatch_arg` as given."""
        op_id, op = self.op_id, self.op
        if isinstance(op.dispatch_arg, int) and op.dispatch_arg < 0:
            self.error(
                codes.INVALID_VALUE,
                f"'dispatch_arg': a position counts from 0, got {op.dispatch_arg}",
                self.value("dispatch_arg"),
            )
            return
        if op.signature is None:
            if op.mutates:
                self.error(
                    codes.ARGUMENT_NOT_IN_SIGNATURE,
                    f"mutates names arguments of op '{op_id}', which declares no signature to name them in",
                    self.value("mutates"),
                )
            return
        try:
            params = signature_params(op.signature)
        except ValueError as exc:
            self.error(codes.INVALID_VALUE, f"'signature': {exc}", self.value("signature"))
            return
        if not params and not op.dispatch_arg:  # an op handle dispatches on a named tensor parameter
            self.error(
                codes.ARGUMENT_NOT_IN_SIGNATURE,
                f"op '{op_id}' has no named parameter to dispatch on in {op.signature!r}; "
                "declare the tensor parameter by name",
                self.value("signature"),
            )
        named = [("mutates", name) for name in op.mutates]
        if isinstance(op.dispatch_arg, int):
            positional = signature_positional(op.signature)
            if op.dispatch_arg >= len(positional):
                self.error(
                    codes.ARGUMENT_NOT_IN_SIGNATURE,
                    f"dispatch_arg is position {op.dispatch_arg}, but op '{op_id}' takes "
                    f"{len(positional)} positional parameter{'s' * (len(positional) != 1)}",
                    self.value("dispatch_arg"),
                )
        elif op.dispatch_arg:
            named.append(("dispatch_arg", op.dispatch_arg))
        for field_name, name in named:
            if name not in params:
                self.error(
                    codes.ARGUMENT_NOT_IN_SIGNATURE,
                    f"{field_name} names '{name}', not a parameter of op '{op_id}'"
                    f"{did_you_mean(name, params)}; parameters: {', '.join(params)}",
                    self.value(field_name),
                )
