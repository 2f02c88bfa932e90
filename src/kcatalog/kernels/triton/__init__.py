"""Triton kernels: one fused kernel per op."""
