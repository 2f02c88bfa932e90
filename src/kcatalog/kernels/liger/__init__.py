"""Wrappers over Liger-Kernel's Triton kernels."""
