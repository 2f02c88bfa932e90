"""torch.compile of the normalisation references, compiled lazily on first call (dynamic=False)."""

from __future__ import annotations

from kcatalog.kernels.compiled._lazy import lazy_compile
from kcatalog.kernels.torch import layernorm as _ref

rms_norm = lazy_compile(_ref.rms_norm)
fused_add_rms_norm = lazy_compile(_ref.fused_add_rms_norm)
layer_norm = lazy_compile(_ref.layer_norm)

__all__ = ["rms_norm", "fused_add_rms_norm", "layer_norm"]
