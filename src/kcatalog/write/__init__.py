"""Writing files: YAML text from plain data through one emitter (yaml_text.py), and files replaced whole or not
at all (atomic.py). Below every stage that writes (runtime plans, migrate, cache, tools); above read/, whose
loader decides what a plain scalar means."""
