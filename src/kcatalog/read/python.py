"""ast.parse for the link stage, behind the one lock every parse in kcatalog shares (pyresolve/parsing.py)."""

from __future__ import annotations

from ..pyresolve import parse, parse_expression

__all__ = ["parse", "parse_expression"]
