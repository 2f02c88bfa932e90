class Norm:
    """A model layer class, as a layers file names it."""

    def forward(self, x):
        return x


def make_norm():
    """A function: a layers file that names it as a class maps no layer of any model."""
    return Norm()


def norm_forward(module, ops, x):
    return ops["norm.rms_norm"](x, module.weight)
