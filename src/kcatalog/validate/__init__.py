"""Stage 2, validate: parsed files against the pydantic models of the format, errors mapped to positions."""
