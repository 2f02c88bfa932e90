"""Parsing a module without its function bodies, where that is known to give the same top-level bindings."""

from __future__ import annotations

import ast


def skeleton(source: bytes, filename: str) -> ast.Module | None:
    """The module's AST with function bodies left out, or None: parse it whole."""
    return None
