"""Suite-wide setup: Triton kernels run under the interpreter unless a GPU run asks otherwise."""

import os

# Must be set before any Triton kernel is decorated: triton.jit reads it at definition time.
if os.environ.get("KCATALOG_TEST_DEVICE", "cpu") == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")
