"""Wrappers over implementations that transformers ships (its experts functions)."""
