"""Thin wrappers over fused ATen ops (torch.nn.functional)."""
