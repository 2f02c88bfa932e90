"""Kernels shipped with kcatalog, one module per backend and op group."""
