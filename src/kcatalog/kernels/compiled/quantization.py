"""torch.compile of the quantization reference (backend `torch_compile`), compiled on first call."""

from __future__ import annotations

from kcatalog.kernels.compiled._lazy import lazy_compile
from kcatalog.kernels.torch import quantization as _ref

per_token_quant_fp8 = lazy_compile(_ref.per_token_quant_fp8)
