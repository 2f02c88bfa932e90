def rms_norm2(x, weight):
    return x
