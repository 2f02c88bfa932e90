"""The op being linked (PendingOp): the mutable form the op stages fill in, frozen into the model's OpInfo."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from ..errors import Diagnostic, Location
from ..model import Backward, Importable, KernelSpec, KeyDim, OpInfo, Parameters
from ..validate.schema import FAKE_REFERENCE, OpDecl
from ..validate.validator import ValidatedFile
from .signature import dispatch_of, read_parameters
from .table_key import resolve_table_key


@dataclass
class PendingOp:
    """An op while its files are linked: its backends grow with extensions, then it is frozen into OpInfo."""

    file: ValidatedFile
    name: str
    op_id: str
    op: OpDecl
    location: Location
    specs: dict[str, KernelSpec] = field(default_factory=dict)
    fake: Importable | None = None  # a fake given as a target (declare_fake)
    torch_schema: str | None = None
    torch_problems: list[Diagnostic] = field(default_factory=list)
    # The op's orders with names of the settings' priority lists resolved (see link/priorities.py).
    priority: tuple[str, ...] | None = None
    platform_priority: dict[str, tuple[str, ...]] = field(default_factory=dict)
    backward: Backward | None = None  # its `backward:`, once linked and checked (link/backward.py)

    def freeze(self, group: str, layer: str) -> OpInfo:
        op = self.op
        parameters = None if op.signature is None else _parameters(op.signature)
        dispatch = dispatch_of(parameters, op.dispatch_arg)
        table_key: tuple[KeyDim, ...] = ()
        if op.table_key is not None and parameters is not None:  # what cannot be resolved op_fields reports (KC236)
            table_key = resolve_table_key(self.op_id, op.table_key, op.samples, parameters, dispatch.name).dims
        return OpInfo(
            id=self.op_id,
            group=group,
            description=op.description,
            signature=op.signature,
            reference=op.reference,
            dtypes=op.dtypes,
            mutates=op.mutates,
            tolerance=MappingProxyType({dtype: value for dtype, value in op.tolerance.items()}),
            priority=self.priority,
            platform_priority=MappingProxyType(self.platform_priority),
            dispatch_arg=op.dispatch_arg,
            samples_json=None if op.samples is None else op.samples.model_dump_json(),
            location=self.location,
            backends=MappingProxyType(dict(self.specs)),
            parameters=parameters,
            dispatch=dispatch,
            fake=self.fake,
            fake_reference=op.fake == FAKE_REFERENCE,
            torch_schema=self.torch_schema,
            torch_problems=tuple(self.torch_problems),
            layer=layer,
            table_key=table_key,
            backward=self.backward,
        )


def _parameters(signature: str) -> Parameters | None:
    """The signature's parameters; None where it does not parse (op_fields has reported why: KC103)."""
    try:
        return read_parameters(signature)
    except ValueError:
        return None
