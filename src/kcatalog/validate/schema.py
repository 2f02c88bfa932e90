"""The catalog format as pydantic models: group manifests and the catalog settings file."""

from __future__ import annotations

import re
from typing import Annotated, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictFloat,
    StrictInt,
    WithJsonSchema,
    model_validator,
)

from ..errors import did_you_mean
from ..platform import DEVICES

FORMAT_VERSION = 1
FAKE_REFERENCE = "reference"  # `fake: reference`: the op's reference backend, run on fake (meta) tensors

DType = Literal[
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
]

NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
# Backend names are matched exactly, case included: registries name them as they like ('KDA', 'torch_npu').
BACKEND_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
OP_ID_PATTERN = r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$"
SIGNATURE_PATTERN = r"^\(.*\)( -> .+)?$"
ARCH_PATTERN = r"^[A-Za-z0-9_.:+-]+$"  # an exact architecture: 'gfx942', '9.0'
PLATFORM_PATTERN = r"^[a-z][a-z0-9_]*(:[A-Za-z0-9_.+-]+)?$"  # a device kind, and its arch: 'cuda:9.0', 'cpu'
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# Whole-string matches (fullmatch): '$' would also match before a final newline, '\d' any Unicode digit.
_TARGET = re.compile(rf"{_IDENT}(\.{_IDENT})*:{_IDENT}(\.{_IDENT})*")
_CUDA_ARCH = re.compile(r"[0-9]{1,2}\.[0-9]")
TARGET_RE, CUDA_ARCH_RE = _TARGET, _CUDA_ARCH  # what the registry importer (migrate/) may write

Name = Annotated[str, Field(pattern=NAME_PATTERN, description="lower_snake_case name")]
OpId = Annotated[str, Field(pattern=OP_ID_PATTERN, description="'<group>.<name>'")]
PriorityName = Annotated[str, Field(pattern=NAME_PATTERN, description="the name of a list in the settings' priorities")]
BackendName = Annotated[str, Field(pattern=BACKEND_PATTERN, description="backend name, matched exactly (case too)")]
Device = Annotated[
    # The built-in kinds (platform.DEVICES) or those the settings declare: checked when linking (KC215).
    str, Field(pattern=NAME_PATTERN, description="device kind: cuda, hip, cpu, npu, xpu, mps, musa, or declared")
]


def _check_target(value: str) -> str:
    if not _TARGET.fullmatch(value):
        raise ValueError(f"target {value!r} is not 'package.module:attr' (attr may be dotted: 'mod:Class.method')")
    return value


def _arch_text(value: object) -> object:
    # YAML reads 9.0 as a float; arch windows are text so "10.3" and 8.9 mean what they say.
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _arch_key(arch: str) -> tuple[int, ...]:
    return tuple(int(part) for part in arch.split("."))


def _check_cuda_arch(value: str) -> str:
    if not _CUDA_ARCH.fullmatch(value):
        raise ValueError(f"arch {value!r} is not a CUDA compute capability 'major.minor' such as '8.0' or '9.0'")
    return value


def cuda_only_window(device: str) -> str:
    """Why a capability of another device kind than cuda may not name an arch window."""
    return f"min_arch and max_arch apply to cuda only; for {device}, list exact architectures in 'archs'"


Target = Annotated[
    str,
    AfterValidator(_check_target),
    Field(description="import target 'package.module:attr'", examples=["kcatalog.kernels.torch.layernorm:rms_norm"]),
]


def _check_fake(value: str) -> str:
    if value != FAKE_REFERENCE and not _TARGET.fullmatch(value):
        raise ValueError(
            f"fake {value!r} is neither '{FAKE_REFERENCE}' nor a target 'package.module:attr' "
            "(attr may be dotted: 'mod:Class.method')"
        )
    return value


Fake = Annotated[
    str,
    AfterValidator(_check_fake),
    Field(
        description="the op's fake (meta) implementation for torch.compile: 'reference' runs the op's torch "
        "reference on the fake tensors (declare it where the reference is meta-safe), or a target "
        "'package.module:attr' taking the op's arguments; ops that return nothing need none",
        examples=["reference", "my_kernels.fakes:rms_norm"],
    ),
]
CudaArch = Annotated[str, BeforeValidator(_arch_text), AfterValidator(_check_cuda_arch)]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CapabilityDecl(_Strict):
    """Where a backend runs: a device kind and, optionally, an architecture window."""

    device: Device
    min_arch: CudaArch | None = Field(None, description="lowest CUDA compute capability, inclusive (cuda only)")
    max_arch: CudaArch | None = Field(None, description="highest CUDA compute capability, inclusive (cuda only)")
    archs: tuple[Annotated[str, Field(pattern=ARCH_PATTERN)], ...] | None = Field(
        None, min_length=1, description="exact architectures, e.g. ROCm gfx names [gfx942, gfx950]"
    )

    @property
    def has_arch_window(self) -> bool:
        """Whether it names min_arch or max_arch, which apply to cuda only."""
        return self.min_arch is not None or self.max_arch is not None

    @model_validator(mode="after")
    def _arch_window_is_cuda_only(self) -> CapabilityDecl:
        # A kind not built in is checked when linking, once the settings' `devices` are known: a misspelt
        # 'cdua' is an unknown device (KC215, with its hint), not a reason to list architectures.
        if self.device in DEVICES and self.device != "cuda" and self.has_arch_window:
            raise ValueError(cuda_only_window(self.device))
        if self.min_arch and self.max_arch and _arch_key(self.min_arch) > _arch_key(self.max_arch):
            raise ValueError(f"min_arch {self.min_arch} is above max_arch {self.max_arch}, so no cuda device matches")
        return self


def _promise(value: object) -> bool | tuple[str, ...]:
    # One message for every wrong value: a union's would name each member it tried ('bool': ..., 'tuple': ...).
    if isinstance(value, bool):
        return value
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(
            f"should be true, false or a list of device kinds such as [cpu, cuda], got {type(value).__name__} {shown}"
        )
    for item in value:
        if not re.fullmatch(NAME_PATTERN, item):
            raise ValueError(f"device kind {item!r} should be a lower_snake_case name{did_you_mean(item, DEVICES)}")
    return tuple(value)


# A backend's promise: true (on every device it runs on), false (or []), or the device kinds it holds on; each
# device kind is checked when linking, against the built-in and declared ones (KC215).
PromiseDecl = Annotated[
    Union[bool, tuple[str, ...]],
    PlainValidator(_promise),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "boolean"},
                {"type": "array", "items": {"type": "string", "pattern": NAME_PATTERN}, "description": "device kinds"},
            ]
        }
    ),
]


class BackendDecl(_Strict):
    """One implementation of an op."""

    target: Target
    requires: tuple[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")], ...] = Field(
        (), description="distributions that must be installed (found, never imported, when selecting)"
    )
    capabilities: tuple[CapabilityDecl, ...] = Field((), description="where it runs, any of these; empty: anywhere")
    dtypes: tuple[DType, ...] | None = Field(
        None, min_length=1, description="dtypes it supports; default (left out): all of the op's"
    )
    traceable: bool = Field(
        False,
        description="torch.compile may trace into it (torch ops, and Triton launches through "
        "kcatalog.kernels.tracing.launch), so Inductor sees its kernels; default: opaque to the graph",
    )
    eligible: Target | None = Field(
        None,
        description="a per-call gate 'package.module:attr' called with the op's arguments, once per distinct "
        "argument shape (cached): True when this backend can take the call, else False or the reason as text "
        "(e.g. 'head_dim 512 > 256')",
    )
    description: str | None = None
    auto: StrictBool | None = Field(
        None, description="false: never chosen by priority, only when named; default: the settings' value"
    )
    deterministic: PromiseDecl | None = Field(
        None,
        description="it promises deterministic outputs: repeated runs on the same inputs are bitwise equal; true "
        "(wherever it runs), or the device kinds it holds on; `kcatalog test` checks it. Implied by batch_invariant",
    )
    batch_invariant: PromiseDecl = Field(
        False,
        description="it promises batch-invariant outputs: each row's output (along the dispatch argument's leading "
        "dimension) is bitwise equal whether the row is computed alone or inside a larger batch, and repeated runs "
        "are bitwise equal; true (wherever it runs), or the device kinds it holds on; `kcatalog test` checks it",
    )

    @model_validator(mode="after")
    def _batch_invariant_is_deterministic(self) -> BackendDecl:
        if self.deterministic is False and self.batch_invariant is not False:
            raise ValueError(
                "batch_invariant implies deterministic: a row computed alone and inside a batch can only be bitwise "
                "equal if repeated runs are; drop 'deterministic: false'"
            )
        return self


SizeValue = Union[StrictBool, StrictInt, StrictFloat, str]
Dim = Union[StrictInt, Annotated[str, Field(pattern=r"^[A-Za-z0-9_+*/() -]+$")]]


class TensorArgDecl(_Strict):
    """A tensor argument built for tests and benchmarks: uniform random values of a shape and dtype."""

    shape: tuple[Dim, ...] = Field(description="sizes: numbers, size names, or expressions such as '2*H'")
    dtype: DType | None = Field(None, description="default: the dtype under test")
    range: tuple[Union[StrictInt, StrictFloat, str], Union[StrictInt, StrictFloat, str]] = Field(
        (-1.0, 1.0), description="[low, high): floats uniform, integers uniform in [low, high)"
    )


ArgValue = Annotated[
    Union[TensorArgDecl, StrictBool, StrictInt, StrictFloat, str, None], Field(union_mode="left_to_right")
]


SizeName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class SamplesDecl(_Strict):
    """How to build an op's inputs and which outputs to compare: the basis of `kcatalog test` and `bench`."""

    sizes: dict[SizeName, tuple[SizeValue, ...]] = Field(
        default_factory=dict, description="size name -> values; tests take every combination"
    )
    args: dict[str, ArgValue] = Field(
        description="argument -> tensor spec, or a plain value; '$NAME' stands for a size's value"
    )
    compare: tuple[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.*]+$")], ...] = Field(
        ("return",),
        description="outputs checked against the reference: 'return', 'return.0', a mutated "
        "argument, or a product such as 'return.0*return.1' (compared in float64)",
    )
    decode: dict[str, tuple[SizeValue, ...]] = Field(
        default_factory=dict, description="sizes for `kcatalog bench --shapes decode` (over `sizes`)"
    )
    prefill: dict[str, tuple[SizeValue, ...]] = Field(
        default_factory=dict, description="sizes for `kcatalog bench --shapes prefill` (over `sizes`)"
    )


OpRef = Annotated[
    str,
    Field(
        pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)?$",
        description="an op's name in this group, or its id '<group>.<name>'",
    ),
]
SAVED_OUTPUT_PATTERN = r"^return\.(0|[1-9][0-9]*)$"
PARAMETER_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class BackwardDecl(_Strict):
    """The op that computes an op's gradients (its `backward:`): an op of its own, with its own backends, samples
    and conformance. By convention it takes one Tensor per differentiable output of the forward op (the gradient of
    that output), then the forward op's parameters that `inputs` names (all of them where it is left out), then
    one Tensor per `outputs` entry, then one per `saves` entry; and it returns one Tensor per `grads` entry, in
    that order. Autograd keeps for backward only what the backward op takes."""

    op: OpRef = Field(description="the backward op: a name in this group, or a qualified id")
    grads: tuple[Annotated[str, Field(pattern=PARAMETER_NAME_PATTERN)], ...] = Field(
        min_length=1,
        description="the forward op's Tensor parameters that get a gradient, in the order the backward op returns "
        "them; the others get none",
    )
    inputs: tuple[Annotated[str, Field(pattern=PARAMETER_NAME_PATTERN)], ...] | None = Field(
        None,
        description="the forward op's parameters handed to the backward op after the gradients, in that order; "
        "left out: all of them, in the signature's order. A Tensor not named is not kept for backward",
    )
    outputs: tuple[Annotated[str, Field(pattern=SAVED_OUTPUT_PATTERN)], ...] = Field(
        (),
        description="forward outputs ('return.0', 'return.1', ...) handed to the backward op after the inputs, kept "
        "for backward in their place (say, a sum the backward would recompute from two inputs); they stay "
        "differentiable: the backward op takes their gradients too",
    )
    saves: tuple[Annotated[str, Field(pattern=SAVED_OUTPUT_PATTERN)], ...] = Field(
        (),
        description="forward outputs ('return.0', 'return.1', ...) handed to the backward op after the inputs and "
        "`outputs`; they are not differentiable, so the backward op takes no gradient for them",
    )


class OpDecl(_Strict):
    """An operation and its implementations."""

    description: str | None = None
    signature: str | None = Field(
        None,
        pattern=SIGNATURE_PATTERN,
        description="Python-style signature, e.g. '(x: Tensor, eps: float = 1e-6) -> Tensor'; "
        "left out: the op takes any arguments and its handle forwards them as given",
    )
    reference: BackendName | None = Field(
        None, description="the backend other backends are checked against (required by a require_reference rule)"
    )
    dtypes: tuple[DType, ...] | None = Field(None, min_length=1, description="left out: any dtype")
    mutates: tuple[str, ...] = Field((), description="arguments the op changes in place")
    tolerance: dict[DType, Annotated[float, Field(gt=0, lt=1)]] = Field(
        default_factory=dict, description="per dtype, the largest relative error ‖out−ref‖/‖ref‖ allowed"
    )
    priority: tuple[BackendName, ...] | PriorityName | None = Field(
        None, description="this op's backend order, best first, or the name of a list in the settings' priorities"
    )
    platform_priority: dict[Device, tuple[BackendName, ...] | PriorityName] = Field(
        default_factory=dict, description="this op's backend order per device kind, best first (or a list's name)"
    )
    dispatch_arg: str | StrictInt | None = Field(
        None,
        description="argument whose device and dtype select the backend in op handles: a parameter name or a "
        "position (default: the first)",
    )
    samples: SamplesDecl | None = Field(None, description="test and benchmark inputs for this op")
    table_key: tuple[SizeName, ...] | None = Field(
        None,
        min_length=1,
        description="sizes that key its tuned tables and plans beside the token count (e.g. [E, H, I, K] for "
        "experts, hidden, intermediate, top-k): names of dimensions of its samples' tensor arguments, read from "
        "each call's arguments; left out: one table per platform and dtype",
    )
    fake: Fake | None = None
    backward: BackwardDecl | None = Field(
        None,
        description="the op that computes this op's gradients: torch autograd runs it through the registered torch "
        "ops (Catalog.register_torch_ops); left out: the op has no gradient",
    )
    backends: dict[BackendName, BackendDecl] = Field(min_length=1)


class OpExtensionDecl(_Strict):
    """More backends for an op declared in another manifest or layer (e.g. a vendor's package), or backends that
    replace the op's backends of the same names."""

    backends: dict[BackendName, BackendDecl] = Field(
        default_factory=dict, min_length=1, description="backends added to the op"
    )
    replaces: dict[BackendName, BackendDecl] = Field(
        default_factory=dict,
        min_length=1,
        description="backends that replace the op's backends of these names (declared in another layer, say)",
    )

    @model_validator(mode="after")
    def _adds_or_replaces(self) -> OpExtensionDecl:
        if not self.backends and not self.replaces:
            raise ValueError("an extension adds 'backends', 'replaces' some, or both")
        return self


class Manifest(_Strict):
    """One op group: a file under catalog/."""

    kcatalog: Literal[1] = Field(description="format version")
    group: Name
    description: str | None = None
    ops: dict[Name, OpDecl] = Field(default_factory=dict)
    extends: dict[OpId, OpExtensionDecl] = Field(
        default_factory=dict, description="backends added to other groups' ops"
    )


class PolicyDecl(_Strict):
    """Rules each op they govern must satisfy: under `policy`, the ops this layer declares (and, for backends and
    platforms, those it extends); under `require_of_all`, every op the catalog loads, from any layer."""

    required_backends: tuple[BackendName, ...] = Field((), description="backends each op must have")
    required_platforms: tuple[Annotated[str, Field(pattern=PLATFORM_PATTERN)], ...] = Field(
        (), description="platforms ('cpu', 'cuda:9.0', 'hip:gfx942') each op must have an eligible backend on"
    )
    torch_ops: StrictBool = Field(
        False,
        description="each op should become a torch.library op (Catalog.register_torch_ops): a signature "
        "torch.library can express, and a fake implementation where it returns something; "
        "warnings at load, since most applications never register torch ops",
    )
    require_reference: StrictBool = Field(
        False, description="each op must name its reference backend (`kcatalog test` checks the others against it)"
    )


class KnownBackendDecl(_Strict):
    """A backend the catalog knows about."""

    description: str | None = None
    auto: StrictBool = Field(
        True,
        description="false: never chosen by priority (e.g. a compiling backend), only by backend=, an override "
        "or a plan",
    )


class TunedSettingsDecl(_Strict):
    """How the catalog treats its tuned tables."""

    stale: Literal["use", "ignore", "error"] = Field(
        "ignore",
        description="an entry measured on other kernel source, another GPU or other torch, triton or backend package "
        "versions than those here: 'use' it all the same (a warning says so), 'ignore' it (priority decides; the "
        "default) or fail with an 'error'; the last layer that says decides for the catalog",
    )


class Settings(_Strict):
    """A layer's settings file, kcatalog.yaml: known backends, default priority, policies, and the modules the
    targets of that layer's files may name."""

    kcatalog: Literal[1] = Field(description="format version")
    backends: dict[BackendName, KnownBackendDecl] = Field(
        default_factory=dict, min_length=1, description="backends this layer declares (a layer may declare none)"
    )
    priority: tuple[BackendName, ...] = Field(
        (),
        description="default backend order, best first; a later layer's list places its own backends among "
        "those of earlier layers (after the one it names before them), without reordering those",
    )
    platform_priority: dict[Device, tuple[BackendName, ...]] = Field(
        default_factory=dict, description="backend order per device kind, overriding the default"
    )
    priorities: dict[PriorityName, tuple[BackendName, ...]] = Field(
        default_factory=dict,
        description="named backend orders that ops refer to by name ('priority: nvidia_first'); they may name "
        "backends an op lacks",
    )
    devices: tuple[Device, ...] = Field(
        (), description="device kinds beyond the built-in ones (cuda, hip, cpu, npu, xpu, mps, musa)"
    )
    policy: PolicyDecl = Field(
        default_factory=PolicyDecl,
        description="rules for the ops this layer declares (backends and platforms: also the ops it extends); "
        "other layers' ops are not bound by them",
    )
    require_of_all: PolicyDecl = Field(
        default_factory=PolicyDecl,
        description="rules for every op the catalog loads, whichever layer declares it: what an application "
        "requires of all it runs (e.g. required_platforms: ['cuda:9.0'])",
    )
    tuned: TunedSettingsDecl = Field(
        default_factory=TunedSettingsDecl, description="how stale tuned entries are treated ({stale: ignore})"
    )
    deterministic: StrictBool = Field(
        False,
        description="select only backends that promise deterministic outputs (their manifests' `deterministic` or "
        "`batch_invariant`), for every op the catalog loads: an op none of whose backends promises it fails to "
        "resolve, naming why for each; as KCATALOG_DETERMINISTIC=1 or use(deterministic=True)",
    )
    batch_invariant: StrictBool = Field(
        False,
        description="select only backends that promise batch-invariant outputs (their manifests' "
        "`batch_invariant`), for every op the catalog loads; as KCATALOG_DETERMINISTIC=batch_invariant or "
        "use(batch_invariant=True)",
    )
    allowed_modules: tuple[Annotated[str, Field(pattern=rf"^{_IDENT}(\.{_IDENT})*$")], ...] | None = Field(
        None,
        description="module prefixes the targets declared in this layer's files may name (e.g. [kcatalog.kernels]); "
        "unset: any module",
    )
