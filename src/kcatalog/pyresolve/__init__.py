"""The static Python resolver: modules located without running them (no import hook is called, no package
`__init__` runs), what a module binds indexed from its source, and 'module:attr' targets followed through
re-exports, star imports, submodules and class bases. Nothing is imported.

This is its front; the stages use nothing else of it:
- `locate` a module: a Located, holding its ModuleLocation (or where the search stopped);
- check targets with a `TargetChecker` (`check`, or `resolve` for a Resolution);
- `current_fingerprint` of a module: equal to the Fingerprint a check recorded while what it read is unchanged;
- `find_spec` (a ModuleSpec without a loader) and `digest` (the hex blake2b that fingerprints use);
- `kernel_source` of a target (`kernel_sources` of several): the digest of its module and of the modules of its
  package it imports, for tuned tables (a KernelSource, with the fingerprints of what it read);
- `parse` and `parse_expression`: ast.parse behind the one lock every parse in kcatalog shares;
- `IndexStore`: what a caller implements to keep module indexes between checks (index_record.py).

It imports none of kcatalog's stages (only codes, errors and model). TargetChecker and Resolution load with
their first use: a load whose recorded checks still hold indexes no module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .finder import current_fingerprint, find_spec, locate
from .fingerprints import Fingerprint, digest
from .locations import Located, ModuleLocation
from .parsing import parse, parse_expression
from .sources import KernelSource, kernel_source, kernel_sources

if TYPE_CHECKING:
    from .index_record import IndexStore
    from .targets import Resolution, TargetChecker

_TARGETS = ("IndexStore", "Resolution", "TargetChecker")


def __getattr__(name: str) -> object:
    if name in _TARGETS:  # the index, the skeleton parser and the rest: only a fresh check of targets needs them
        from . import index_record, targets

        return getattr(index_record if name == "IndexStore" else targets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Fingerprint",
    "IndexStore",
    "KernelSource",
    "Located",
    "ModuleLocation",
    "Resolution",
    "TargetChecker",
    "current_fingerprint",
    "digest",
    "find_spec",
    "kernel_source",
    "kernel_sources",
    "locate",
    "parse",
    "parse_expression",
]
