"""A drop-in for SGLang-style kernel registries: the same lookups over a loaded catalog, so that an engine
switches by changing one import.

```python
from kcatalog.compat import registry

kernels = registry(kcatalog.load_catalog("catalog/"))  # or registry("catalog/")
kernels.get_backend("layernorm.rms_norm", Backend.TRITON).load()(x, w, 1e-6)
```
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .errors import UnknownBackendError
from .load import LoadKeywords, load_catalog
from .model import KernelSpec
from .read.files import PathLike
from .registry.catalog import Catalog

if TYPE_CHECKING:
    from typing_extensions import Unpack


def _name(backend: str | enum.Enum) -> str:
    """A backend given as the registry's enum (its value) or as text."""
    if isinstance(backend, enum.Enum):
        return str(backend.value)
    return backend


class CatalogRegistry:
    """The registry API engines call (`get`, `get_backend`, `has`, `ops`, `all_specs`; `spec.load()` imports the
    kernel), answered from a catalog. Misses raise `KeyError`s (UnknownOpError, UnknownBackendError) that list
    what exists and where the op is declared."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def __repr__(self) -> str:
        return f"<CatalogRegistry over {self.catalog!r}>"

    def __contains__(self, op: object) -> bool:
        return op in self.catalog

    def get(self, op: str) -> list[KernelSpec]:
        """Every backend spec of the op, in declaration order."""
        return self.catalog.specs(op)

    def get_backend(self, op: str, backend: str | enum.Enum) -> KernelSpec:
        """The op's spec for one backend, named by text or by the registry's enum; UnknownBackendError (a KeyError)
        listing the op's backends."""
        info = self.catalog.info(op)
        name = _name(backend)
        spec = info.backends.get(name)
        if spec is None:
            raise UnknownBackendError(op, name, list(info.backends), info.location)
        return spec

    def has(self, op: str, backend: str | enum.Enum | None = None) -> bool:
        """Whether the op exists (and, given a backend, whether it has that backend)."""
        info = self.catalog.ops_by_id.get(op)
        return info is not None and (backend is None or _name(backend) in info.backends)

    def ops(self) -> list[str]:
        """Every op id, sorted."""
        return self.catalog.ops()

    def all_specs(self) -> list[KernelSpec]:
        """Every spec of every op."""
        return self.catalog.specs()


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
