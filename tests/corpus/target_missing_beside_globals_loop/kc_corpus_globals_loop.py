"""Kernels wrapped for debugging by a loop that can only replace names the module already binds."""

import os


def rms_norm(x, weight):
    return x


def wrap(kernel, name):
    return kernel


if os.environ.get("KC_CORPUS_DEBUG"):
    for _name in ("rms_norm", "fused_add_rms_norm"):
        if _name in globals():
            globals()[_name] = wrap(globals()[_name], _name)
