import os


def rms_norm(x, weight):
    return x
