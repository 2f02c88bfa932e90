def rms_norm(x, w, eps):
    return x
