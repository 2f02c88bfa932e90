"""The trace file (`catalog.trace(path)`, KCATALOG_TRACE) as a pydantic model: what `kcatalog trace show`,
`report --trace` and `tune --from-trace` read, and schemas/trace.v1.json."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, StrictInt, StrictStr, model_validator

from .schema import BackendName, OpId, _Strict
from .tables import Platform, Tokens

Count = Annotated[StrictInt, Field(ge=1)]


class TraceShapeDecl(_Strict):
    """The calls at one leading dimension of the dispatch argument."""

    tokens: Union[Annotated[StrictInt, Field(ge=0)], None] = Field(
        description="the dispatch argument's leading dimension; null: a 0-dimensional tensor"
    )
    calls: Count
    bucket: Union[tuple[Tokens, Union[Tokens, None]], None] = Field(
        description="[low, high] of the tuned bucket that covered it; null: no tuned table covered it (untuned)"
    )


class FallbackDecl(_Strict):
    """A backend ranked above the one that ran which could not run the call."""

    backend: BackendName
    kind: Literal["import failed", "gate"]
    reason: StrictStr


class TraceEntryDecl(_Strict):
    """One op on one platform and dtype, run by one backend, decided one way, recorded one way."""

    op: OpId
    platform: Platform
    dtype: StrictStr = Field(description="torch's name of the dispatch argument's dtype: float32, bfloat16, ...")
    backend: BackendName
    via: Literal["handle", "torch op", "compiled", "cuda graph capture"] = Field(
        description="how the calls were counted: each eager call of an op handle; each call or compiled run of the "
        "torch op; each time torch.compile traced the backend into a graph; each call while a CUDA graph was captured"
    )
    decided_by: StrictStr = Field(description="what chose the backend, as `kcatalog explain` says it")
    fallbacks: tuple[FallbackDecl, ...] = ()
    calls: Count = Field(description="every call of the entry: the sum over its shapes")
    shapes: tuple[TraceShapeDecl, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _calls_add_up(self) -> TraceEntryDecl:
        total = sum(shape.calls for shape in self.shapes)
        if total != self.calls:
            raise ValueError(f"calls is {self.calls}, its shapes' calls add up to {total}")
        return self


class TraceProcessDecl(_Strict):
    """A process whose calls the trace holds."""

    pid: StrictInt
    rank: Union[StrictInt, None] = Field(description="the RANK environment variable, where it was set")
    started: StrictStr
    ended: StrictStr


class TraceBodyDecl(_Strict):
    """What ran, in one process or merged from several."""

    processes: tuple[TraceProcessDecl, ...] = ()
    catalogs: tuple[StrictStr, ...] = Field((), description="the content digests of the catalogs traced")
    notes: tuple[StrictStr, ...] = Field((), description="what the counts of entries not recorded by a handle mean")
    entries: tuple[TraceEntryDecl, ...]


class TraceFile(_Strict):
    """A trace: per op, platform, dtype and backend, the calls at each leading dimension of the dispatch argument,
    the fallbacks with their reasons, and the tuned bucket that covered each shape (written by `catalog.trace(path)`
    and KCATALOG_TRACE, as JSON; several processes writing one file merge into it)."""

    kcatalog: Literal[1] = Field(description="format version")
    trace: TraceBodyDecl
