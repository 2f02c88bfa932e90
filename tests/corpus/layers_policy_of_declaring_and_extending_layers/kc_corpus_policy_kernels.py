def rms_norm(x, weight):
    return x


def scale(x):
    return 2 * x
