from os import system


def rms_norm(x, weight):
    return x
