from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kcatalog.kernels.torch.layernorm import rms_norm
