"""Ops as instances of a class with one forward per backend, made at the module's top level."""


class RMSNormOp:
    def forward_native(self, x, weight):
        return x

    def forward_triton(self, x, weight):
        return x


def register(op):
    return op


RMS_NORM = RMSNormOp()
REGISTERED = register(RMSNormOp())
