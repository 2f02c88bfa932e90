"""Stage 5, registry: the immutable Catalog a load produces, its lookups and lazy imports."""
