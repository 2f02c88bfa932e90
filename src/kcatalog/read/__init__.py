"""Read: finding catalog files, reading their text, parsing YAML with positions."""
