from kcatalog.kernels.torch.layernorm import *
