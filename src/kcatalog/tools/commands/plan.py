"""`kcatalog plan`: write the resolved selection of every op as a plan, or `--check` one (tools/tune_command.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import add_catalog_arguments, catalog_paths, dtype, load_or_report, platform_of_catalog


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "plan", help="write the resolved selection of every op as a plan, or --check one"
    )
    add_catalog_arguments(parser)
    parser.add_argument("--platform", help="e.g. cuda:9.0 (default: this machine)")
    parser.add_argument("--dtype", type=dtype, action="append", default=[], help="only this dtype (repeatable)")
    parser.add_argument("--tuned", action="append", default=[], metavar="DIR", help="tuned tables to add (repeatable)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the plan here (default: print it)")
    parser.add_argument("--check", type=Path, metavar="PLAN", help="exit 1 when this machine would choose otherwise")
    return parser


def run(options: argparse.Namespace) -> int:
    from ..tune_command import run_plan

    paths = catalog_paths(options)
    if options.tuned:  # tuned tables on top of the given layers (default: the shipped catalog)
        paths = [*(paths or ["shipped"]), *options.tuned]
    catalog = load_or_report(paths)
    if catalog is None:
        return 1
    platform = platform_of_catalog(catalog, options.platform) if options.platform else None
    return run_plan(options, catalog, platform)
