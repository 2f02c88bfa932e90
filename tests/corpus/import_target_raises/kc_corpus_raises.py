raise RuntimeError("no GPU driver")


def rms_norm(x, weight):
    return x
