"""Choosing a backend: eligibility on a platform, priority order, and the reasons for the rest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._platform import is_installed
from .errors import NoEligibleBackendError

if TYPE_CHECKING:
    from ._catalog import Catalog, KernelSpec, OpInfo
    from ._platform import Platform


@dataclass(frozen=True)
class Rejected:
    """A backend that will not run, and why."""

    backend: str
    reason: str


@dataclass(frozen=True)
class Selection:
    """The chosen spec for an op on a platform (None if nothing is eligible), the order tried, the rest."""

    op: str
    platform: Platform
    chosen: KernelSpec | None
    order: tuple[str, ...]
    rejected: tuple[Rejected, ...]

    def require(self) -> KernelSpec:
        """The chosen spec, or NoEligibleBackendError listing every backend's reason."""
        if self.chosen is None:
            raise NoEligibleBackendError(self.op, str(self.platform), [(r.backend, r.reason) for r in self.rejected])
        return self.chosen


def ineligibility(spec: KernelSpec, platform: Platform, dtype: str | None = None) -> str | None:
    """Why the spec cannot run on the platform for this dtype, or None when it can."""
    reason = platform.mismatch(spec.capabilities)
    if reason is not None:
        return reason
    missing = [dist for dist in spec.requires if not is_installed(dist)]
    if missing:
        return f"needs {', '.join(missing)}, not installed"
    if dtype is not None and dtype not in spec.dtypes:
        return f"does not support {dtype} (supports {', '.join(spec.dtypes)})"
    return None


def priority_order(catalog: Catalog, info: OpInfo, platform: Platform) -> tuple[str, ...]:
    """The op's backends, best first: per-platform order, else per-op order, else the catalog default."""
    settings = catalog.settings
    preferred = settings.platform_priority.get(platform.device) or info.priority or settings.priority
    ranked = [name for name in preferred if name in info.backends]
    return tuple(ranked + [name for name in info.backends if name not in ranked])


def select(catalog: Catalog, info: OpInfo, platform: Platform, dtype: str | None) -> Selection:
    """Walk the priority order and take the first eligible backend; record why each other one lost."""
    order = priority_order(catalog, info, platform)
    chosen = None
    rejected = []
    for name in order:
        spec = info.backends[name]
        reason = ineligibility(spec, platform, dtype)
        if reason is None and chosen is None:
            chosen = spec
        elif reason is not None:
            rejected.append(Rejected(name, reason))
        else:
            rejected.append(Rejected(name, f"lower priority than {chosen.backend}"))
    return Selection(info.id, platform, chosen, order, tuple(rejected))
