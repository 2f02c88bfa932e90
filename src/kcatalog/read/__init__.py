"""Stage 1, read: finding catalog files, reading their text, parsing YAML with positions."""
