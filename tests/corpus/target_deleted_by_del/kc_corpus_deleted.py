def rms_norm(x, weight):
    return x


del rms_norm
