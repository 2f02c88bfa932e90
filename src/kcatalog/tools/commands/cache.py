"""`kcatalog cache`: where load_catalog() caches validated catalogs, how much, or `--clear` it (with the module
indexes the target checks keep there)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "cache", help="where load_catalog() caches validated catalogs, or --clear it"
    )
    parser.add_argument("--clear", action="store_true", help="remove every entry, and the module indexes")
    return parser


def run(options: argparse.Namespace) -> int:
    from ...cache import store as cache

    chosen = cache.default_dir()
    directory = chosen.path
    if directory is None:
        print(f"cache: off: {chosen.why_off}")
        return 0
    if options.clear:
        from ...cache import module_indexes

        cleared = cache.clear(directory)
        if cleared.refused:
            print(f"error: not cleared: {cleared.refused}", file=sys.stderr)
            return 1
        indexes = module_indexes.clear(directory)
        also = f" and {indexes} module index{'es' if indexes != 1 else ''}" if indexes else ""
        print(f"removed {_entries(cleared.removed)}{also} from {directory}")
        return 0
    found = cache.entries(directory)
    size = sum(path.stat().st_size for path in found)
    print(f"cache: {directory} ({_entries(len(found))}, {size / 1024:.0f} KiB)")
    return 0


def _entries(count: int) -> str:
    return f"{count} {'entry' if count == 1 else 'entries'}"
