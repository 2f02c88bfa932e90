def rms_norm(x, weight):
    return x
