"""torch.compile of the gated-activation references (backend `torch_compile`), compiled on first call."""

from __future__ import annotations

from kcatalog.kernels.compiled._lazy import lazy_compile
from kcatalog.kernels.torch import activation as _ref

silu_and_mul = lazy_compile(_ref.silu_and_mul)
gelu_and_mul = lazy_compile(_ref.gelu_and_mul)
