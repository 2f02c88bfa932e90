"""torch.compile of the elementwise references, compiled lazily on first call (dynamic=False)."""

from __future__ import annotations

from kcatalog.kernels.compiled._lazy import lazy_compile
from kcatalog.kernels.torch import elementwise as _ref

softmax = lazy_compile(_ref.softmax)

__all__ = ["softmax"]
