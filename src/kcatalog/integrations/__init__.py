"""Catalog kernels inside applications' models: layer mappings applied to module instances (kernelize)."""
