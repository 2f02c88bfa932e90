class Norm:
    """A model layer class, as a layers file names it."""

    def forward(self, x):
        return x


def norm_forward(module, ops, x):
    return ops["norm.rms_norm"](x, module.weight)
