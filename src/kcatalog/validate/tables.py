"""The file formats of measured and locked selection, as pydantic models: tuned tables (a catalog file whose
top level is `tuned:`) and plans (`plan:`, given to load_catalog(plan=...), never part of a catalog)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Discriminator, Field, StrictInt, Tag, model_validator

from .schema import PLATFORM_PATTERN, BackendName, DType, OpId, SizeName, _Strict

# A device kind known to the catalog, checked when linking (it may declare more kinds than the built-in ones).
Platform = Annotated[str, Field(pattern=PLATFORM_PATTERN, description="'cuda:9.0', 'hip:gfx942', 'cpu'")]
Tokens = Annotated[int, Field(ge=1, strict=True)]  # strict: neither `true` nor "8" is a token count
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{16,64}$")]
Distribution = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


class BucketDecl(_Strict):
    """One bucket of token counts (the dispatch argument's leading dimension) and the backend chosen there."""

    tokens: tuple[Tokens, Union[Tokens, None]] = Field(
        description="[low, high], inclusive; high null: no upper bound", examples=[[17, 64], [8193, None]]
    )
    backend: BackendName
    at: StrictInt | None = Field(None, description="the token count measured for this bucket")
    medians_us: dict[BackendName, Annotated[float, Field(gt=0, strict=True)]] = Field(
        default_factory=dict, description="every candidate's median time in microseconds (geometric mean over shapes)"
    )
    shapes: tuple[str, ...] = Field((), description="the shapes measured, e.g. 'T=64 H=4096'")

    @model_validator(mode="after")
    def _low_not_above_high(self) -> BucketDecl:
        low, high = self.tokens
        if high is not None and low > high:
            raise ValueError(f"bucket [{low}, {high}] is empty: low is above high")
        return self


# An op's table key as an entry gives it: each size its `table_key` names, and its value.
KeyDecl = Annotated[
    dict[SizeName, Annotated[int, Field(ge=1, strict=True)]],
    Field(min_length=1, description="the sizes of the op's table_key, e.g. {E: 128, H: 2048, I: 768, K: 8}"),
]


class KeyedBucketsDecl(_Strict):
    """The buckets of one key of an op keyed by its shape (`table_key:`): measured for these sizes."""

    key: KeyDecl
    buckets: tuple[BucketDecl, ...] = Field(min_length=1)


def _keyed(value: object) -> bool:
    """Whether a dtype's list holds keyed entries ({key: ..., ...}) rather than buckets: told apart by shape, so
    that a mistake in one is reported as one, not also as "not the other"."""
    first = value[0] if isinstance(value, (list, tuple)) and value else None
    return isinstance(first, dict) and "key" in first


def _tuned_kind(value: object) -> str:
    return "keyed" if _keyed(value) else "buckets"


# One op and dtype of a tuned table: its buckets, or for an op keyed by its shape, one list of buckets per key.
TunedEntry = Annotated[
    Union[
        Annotated[tuple[BucketDecl, ...], Tag("buckets")],
        Annotated[tuple[KeyedBucketsDecl, ...], Tag("keyed")],
    ],
    Discriminator(_tuned_kind),
]


class ProvenanceDecl(_Strict):
    """Where and how a table was measured."""

    device: str = Field(description="the GPU's name, e.g. 'NVIDIA H200' ('cpu' on the CPU)")
    capability: str | None = Field(None, description="the device's architecture as measured, e.g. '9.0'")
    sms: StrictInt | None = Field(None, ge=1, description="the GPU's streaming multiprocessors (compute units on ROCm)")
    driver: str | None = None
    torch: str | None = None
    triton: str | None = None
    packages: dict[Distribution, str] = Field(
        default_factory=dict, description="the versions of the other distributions the timed backends require"
    )
    kcatalog: str | None = None
    date: str | None = None
    command: str | None = None


class TunedTableBodyDecl(_Strict):
    """One platform's measured selection: op -> dtype -> buckets, best backend per bucket."""

    platform: Platform
    provenance: ProvenanceDecl
    kernels: dict[OpId, dict[BackendName, Digest]] = Field(
        default_factory=dict,
        description="each timed backend's kernel source digest as measured (its target's module and the modules of "
        "its package that it imports): an entry whose digest differs here is stale; a table without any is not "
        "compared",
    )
    ops: dict[OpId, dict[DType, TunedEntry]] = Field(min_length=1)


class TunedTable(_Strict):
    """A tuned table file (tuned/*.yaml in a catalog directory)."""

    kcatalog: Literal[1] = Field(description="format version")
    tuned: TunedTableBodyDecl


class KeyedPlanDecl(_Strict):
    """What a plan pins for one key of an op keyed by its shape: one backend, or buckets."""

    key: KeyDecl
    backend: BackendName | None = None
    buckets: tuple[BucketDecl, ...] = ()

    @model_validator(mode="after")
    def _backend_or_buckets(self) -> KeyedPlanDecl:
        if (self.backend is None) == (not self.buckets):
            raise ValueError("a keyed plan entry gives 'backend' or 'buckets', one of the two")
        return self


def _entry_kind(value: object) -> str:
    if not isinstance(value, (list, tuple)):
        return "backend"
    return "keyed" if _keyed(value) else "buckets"


# One op and dtype of a plan: a backend for every call, buckets, or (an op keyed by its shape) one of those per key;
# told apart by shape, so that a mistake in a
# bucket is reported as one, not also as "not a backend name".
PlanEntry = Annotated[
    Union[
        Annotated[BackendName, Tag("backend")],
        Annotated[tuple[BucketDecl, ...], Tag("buckets")],
        Annotated[tuple[KeyedPlanDecl, ...], Tag("keyed")],
    ],
    Discriminator(_entry_kind),
]


class PlanBodyDecl(_Strict):
    """The fully resolved selection of a catalog on one platform: op -> dtype -> one backend, or buckets."""

    platform: Platform
    digest: str = Field(pattern=r"^[0-9a-f]{16,64}$", description="content digest of the catalog it was made from")
    kcatalog: str | None = Field(None, description="the kcatalog version that wrote it")
    command: str | None = None
    ops: dict[OpId, dict[DType, PlanEntry]] = Field(min_length=1)


class Plan(_Strict):
    """A plan file: load_catalog(plan='plan.yaml') pins it, `kcatalog plan --check` compares it with this machine."""

    kcatalog: Literal[1] = Field(description="format version")
    plan: PlanBodyDecl
