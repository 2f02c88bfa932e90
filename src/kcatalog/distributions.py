"""Installed distributions, found from their metadata on sys.path alone: no finder on sys.meta_path is asked.

`importlib.metadata.distribution()` and `entry_points()` ask every finder on sys.meta_path for its
`find_distributions`, and a third-party finder (an editable install's, a lazy loader) can run code when asked.
The standard path-based search they fall back on (`MetadataPathFinder`: `*.dist-info` and `*.egg-info` in
directories and zip archives on sys.path, read with os.listdir and zipfile) is what is used here, directly.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.metadata import Distribution

_SEPARATORS = re.compile(r"[-_.]+")


@dataclass(frozen=True, order=True)
class EntryPoint:
    """One entry point of an installed distribution: its distribution's name, its own name and its value."""

    distribution: str
    name: str
    value: str
    version: str | None = None  # the distribution's, for messages that say which to fix or uninstall


def _search(name: str | None) -> Iterator[Distribution]:
    """The distributions (of that name, or all) on sys.path, in path order."""
    from importlib.metadata import DistributionFinder, MetadataPathFinder  # tens of ms: only when asked

    paths = [entry for entry in list(sys.path) if type(entry) is str]
    return iter(MetadataPathFinder.find_distributions(DistributionFinder.Context(name=name, path=paths)))


def installed(distribution: str) -> bool:
    """Whether a distribution of that name (compared as PEP 503 normalizes names) is installed."""
    return next(iter(_search(distribution)), None) is not None


def version(distribution: str) -> str | None:
    """The installed version of a distribution (the first of that name on sys.path), or None where none is."""
    found = next(iter(_search(distribution)), None)
    return (found.version or None) if found is not None else None


def entry_points(group: str) -> list[EntryPoint]:
    """Every entry point of the group, of the first distribution of each name on sys.path (as importlib.metadata
    takes them), in path order."""
    seen: set[str] = set()
    found = []
    for dist in _search(None):
        # Named by its metadata directory, as importlib.metadata dedupes them: reading every METADATA would cost
        # tens of milliseconds a load.
        normalized = getattr(dist, "_normalized_name", None) or _SEPARATORS.sub("_", dist.name or "").lower()
        if normalized in seen:  # shadowed by one earlier on sys.path
            continue
        seen.add(normalized)
        for entry in dist.entry_points.select(group=group):
            found.append(EntryPoint(dist.name, entry.name, entry.value, dist.version or None))
    return found
