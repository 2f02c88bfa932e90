"""ast.parse for every caller in kcatalog, behind one lock.

CPython 3.11's AST constructor keeps its recursion depth in interpreter-wide state, so parses
racing in several threads can fail with "SystemError: AST constructor recursion depth mismatch"
(seen here with 16 threads loading catalogs at once). Parsing is a small part of a load.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """ast.parse of a module, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode="exec")


def parse_expression(source: str) -> ast.Expression:
    """ast.parse of one expression, one thread at a time."""
    with _LOCK:
        return ast.parse(source, mode="eval")
