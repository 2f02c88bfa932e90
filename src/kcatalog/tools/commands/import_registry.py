"""`kcatalog import-registry`: a Python kernel registry (or its JSON dump) into catalog files (tools/migrate.py)."""

from __future__ import annotations

from ..migrate import add_import_parser as add_parser
from ..migrate import import_registry as run

__all__ = ["add_parser", "run"]
