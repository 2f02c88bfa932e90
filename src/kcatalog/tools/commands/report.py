"""`kcatalog report --html FILE`: the support matrix, policy and layers as one self-contained HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ...platform import Platform
from .common import UsageError, add_catalog_arguments, catalog_paths, load_or_report


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "report", help="write the op x backend x platform support matrix as one HTML page"
    )
    add_catalog_arguments(parser)
    parser.add_argument("--html", required=True, metavar="FILE", help="the page to write")
    parser.add_argument(
        "--platform",
        action="append",
        default=[],
        help="a column group (repeatable; default: the policy's required platforms, else cpu)",
    )
    return parser


def run(options: argparse.Namespace) -> int:
    from ..html_report import render

    try:
        platforms = [Platform.parse(text) for text in options.platform]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    catalog = load_or_report(catalog_paths(options))
    if catalog is None:
        return 1
    if not platforms:
        platforms = [Platform.parse(text) for text in catalog.settings.policy.required_platforms or ("cpu",)]
    Path(options.html).write_text(render(catalog, platforms), encoding="utf-8")
    print(f"wrote {options.html} ({len(catalog)} ops x {len(platforms)} platforms)")
    return 0
