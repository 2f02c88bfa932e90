"""torch.compile of the rotary-embedding reference (backend `torch_compile`), compiled on first call."""

from __future__ import annotations

from kcatalog.kernels.compiled._lazy import lazy_compile
from kcatalog.kernels.torch import attention as _ref

rotary_embedding = lazy_compile(_ref.rotary_embedding)
