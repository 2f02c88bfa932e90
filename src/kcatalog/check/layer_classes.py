"""Which problems of a layer class's static check are not reported: a class whose package is not installed here."""

from __future__ import annotations

import sys

from .. import codes
from ..errors import Diagnostic
from ..pyresolve import locate

# Not installed (KC303), or not found on sys.path while some third-party import hook is present (KC304: e.g.
# transformers installs one once imported, which would otherwise make every absent package "unverifiable").
_ABSENT = frozenset({codes.TARGET_UNAVAILABLE, codes.TARGET_UNVERIFIABLE})


def unavailable_class(target: str, problem: Diagnostic, absent: dict[str, bool]) -> bool:
    """Whether `problem` only says the class's top-level package is not installed here.

    Such a class is unavailable, not wrong: no model of it can exist in this process, so kernelize has nothing
    to match and the load has nothing to warn about. Looked up on sys.path by kcatalog's own walk, as targets are
    (pyresolve/finder.py: no finder or import hook is asked, nothing is imported), once per package and load
    (`absent` holds the answers: a warm load must not scan sys.path for each of a package's classes)."""
    if problem.code not in _ABSENT:
        return False
    top = target.partition(":")[0].partition(".")[0]
    if top not in absent:
        absent[top] = top not in sys.modules and locate(top).location is None
    return absent[top]
