"""A drop-in for SGLang-style kernel registries: the same lookups over a loaded catalog, answered with specs of
the shape SGLang's own code reads, so that an engine switches by changing one import.

```python
from kcatalog.compat import registry

kernels = registry(kcatalog.load_catalog("catalog/"))  # or registry("catalog/")
kernels.get_backend("layernorm.rms_norm", Backend.TRITON).load()(x, w, 1e-6)

import sglang.kernels.selector as selector
selector.registry = kernels  # SGLang's select_kernel / get_kernel now choose from the catalog
```

What SGLang's selector and fused ops read of a registry (`sglang/kernels/{registry,selector,fused_op}.py`):
`get(op)` (an empty list for an unknown op), each spec's `op`, `backend` (compared with the engine's enum, and
its `.value` in messages), `target`, `capabilities` (`device`, `min_cuda_arch`, `max_cuda_arch`),
`is_available(platform)` and `load()`; misses are `KeyError`s, as SGLang's.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import UnknownBackendError
from .load import LoadKeywords, load_catalog
from .model import Capability, KernelSpec, OpInfo
from .platform import Platform
from .read.files import PathLike
from .registry.catalog import Catalog
from .select.selection import ineligibility

if TYPE_CHECKING:
    from typing_extensions import Unpack


class Name(str):
    """A backend or device name usable where SGLang-style code expects its str-valued enum: `.value` is the
    text, and it equals the text and the enum member of that value (`Name("jit") == KernelBackend.JIT`)."""

    __slots__ = ()

    @property
    def value(self) -> str:
        """The name as plain text, as an enum member's `.value`."""
        return str.__str__(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, enum.Enum):
            other = other.value
        if not isinstance(other, str):
            return NotImplemented
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = str.__hash__


def _name(backend: str | enum.Enum) -> str:
    """A backend given as the registry's enum (its value) or as text."""
    if isinstance(backend, enum.Enum):
        return str(backend.value)
    return str.__str__(backend)


@dataclass(frozen=True)
class RegistryCapability:
    """Where a backend runs, as SGLang's `CapabilityRequirement`: a device, and on CUDA an inclusive window of
    `(major, minor)` arches (None: unbounded); `archs` is kcatalog's exact list of arches, where one is given."""

    device: Name
    min_cuda_arch: tuple[int, int] | None = None
    max_cuda_arch: tuple[int, int] | None = None
    archs: tuple[str, ...] | None = None

    @classmethod
    def of(cls, capability: Capability) -> RegistryCapability:
        """The catalog's capability in this shape."""
        return cls(Name(capability.device), _arch(capability.min_arch), _arch(capability.max_arch), capability.archs)


def _arch(text: str | None) -> tuple[int, int] | None:
    """A CUDA arch as the catalog writes it ('9.0', checked by the schema) as SGLang's (9, 0)."""
    if text is None:
        return None
    major, _, minor = text.partition(".")
    return int(major), int(minor)


@dataclass(frozen=True)
class RegistrySpec:
    """One backend of an op as SGLang's `KernelSpec`: `op`, `backend`, `target` ('module:attr'), `capabilities`
    (any one of them suffices; none: anywhere), `is_available(platform)` and `load()`. `spec` is the catalog's
    own KernelSpec, with everything else the catalog knows of the backend."""

    op: str
    backend: Name
    target: str
    capabilities: frozenset[RegistryCapability]
    spec: KernelSpec = field(repr=False, compare=False)

    @classmethod
    def of(cls, spec: KernelSpec) -> RegistrySpec:
        """The catalog's spec in this shape."""
        capabilities = frozenset(RegistryCapability.of(c) for c in spec.capabilities)
        return cls(spec.op, Name(spec.backend), str(spec.target), capabilities, spec)

    def is_available(self, platform: object) -> bool:
        """Whether the backend can run on `platform`: SGLang's `PlatformInfo` (its `device` and
        `cuda_arch_major`/`cuda_arch_minor`), a kcatalog Platform, or its text ('cuda:9.0'). The catalog's rules
        decide, as its own selection does: also the distributions the backend requires must be installed, and
        an unknown arch satisfies no arch window (SGLang takes it as inside every window)."""
        return ineligibility(self.spec, _platform(platform)) is None

    def load(self) -> Callable[..., Any]:
        """Import the kernel (once) and return it; KernelImportError saying what failed otherwise."""
        return self.spec.load()


def _platform(platform: object) -> Platform:
    """A kcatalog Platform from one of kcatalog's or from SGLang's `PlatformInfo`."""
    if isinstance(platform, Platform):
        return platform
    if isinstance(platform, str):
        return Platform.parse(platform)
    device = getattr(platform, "device", None)
    if device is None:
        device = getattr(platform, "device_type", None)
    if isinstance(device, enum.Enum):
        device = device.value
    if not isinstance(device, str):
        raise TypeError(f"{platform!r} is not a platform: it has no device (or device_type) name")
    major = getattr(platform, "cuda_arch_major", None)
    if device != "cuda" or major is None:
        return Platform(device)
    return Platform(device, f"{major}.{getattr(platform, 'cuda_arch_minor', None) or 0}")


class CatalogRegistry:
    """The registry API engines call (`get`, `get_backend`, `has`, `ops`, `all_specs`; `spec.load()` imports the
    kernel), answered from a catalog with RegistrySpecs. `get` of an unknown op is an empty list, as in SGLang;
    `get_backend` misses raise `KeyError`s (UnknownOpError, UnknownBackendError) that list what exists and where
    the op is declared."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._specs: dict[str, tuple[RegistrySpec, ...]] = {}  # by op id, made on first lookup

    def __repr__(self) -> str:
        return f"<CatalogRegistry over {self.catalog!r}>"

    def __contains__(self, op: object) -> bool:
        return op in self.catalog

    def _of(self, info: OpInfo) -> tuple[RegistrySpec, ...]:
        specs = self._specs.get(info.id)
        if specs is None:
            specs = self._specs[info.id] = tuple(map(RegistrySpec.of, info.backends.values()))
        return specs

    def get(self, op: str) -> list[RegistrySpec]:
        """Every backend spec of the op, in declaration order; an empty list if the catalog has no such op."""
        info = self.catalog.ops_by_id.get(op)
        return [] if info is None else list(self._of(info))

    def get_backend(self, op: str, backend: str | enum.Enum) -> RegistrySpec:
        """The op's spec for one backend, named by text or by the registry's enum; UnknownOpError, or
        UnknownBackendError listing the op's backends (both KeyErrors)."""
        info = self.catalog.info(op)
        name = _name(backend)
        for spec in self._of(info):
            if spec.backend == name:
                return spec
        raise UnknownBackendError(op, name, list(info.backends), info.location)

    def has(self, op: str, backend: str | enum.Enum | None = None) -> bool:
        """Whether the op exists (and, given a backend, whether it has that backend)."""
        info = self.catalog.ops_by_id.get(op)
        return info is not None and (backend is None or _name(backend) in info.backends)

    def ops(self) -> list[str]:
        """Every op id, sorted."""
        return self.catalog.ops()

    def all_specs(self) -> list[RegistrySpec]:
        """Every spec of every op (ops sorted, each op's in declaration order)."""
        return [spec for op in self.catalog.ops() for spec in self._of(self.catalog.info(op))]


def registry(
    catalog: Catalog | PathLike | Iterable[PathLike] | None = None, **keywords: Unpack[LoadKeywords]
) -> CatalogRegistry:
    """The registry API over `catalog`: a loaded Catalog, or the paths to load (default: the shipped catalog,
    with `load_catalog`'s keywords)."""
    if isinstance(catalog, Catalog):
        if keywords:
            raise TypeError("load keywords apply to paths, not to a Catalog already loaded")
        return CatalogRegistry(catalog)
    return CatalogRegistry(load_catalog(catalog, **keywords))
