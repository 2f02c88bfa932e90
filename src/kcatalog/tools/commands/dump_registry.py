"""`kcatalog dump-registry`: a Python kernel registry as JSON, for import-registry elsewhere (tools/migrate.py)."""

from __future__ import annotations

from ..migrate import add_dump_parser as add_parser
from ..migrate import dump_registry as run

__all__ = ["add_parser", "run"]
