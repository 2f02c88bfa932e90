"""Migrating a Python kernel registry into catalog files: read it (source), convert it (convert), write it (write)."""
