class Kernels:
    """Kernels as methods: targets name them 'module:Kernels.method'."""

    @staticmethod
    def rms_norm(x, weight):
        return x

    scale = 1.0


def plain(x):
    return x
