"""Validate: parsed files against the pydantic models of the format, errors mapped to positions."""
