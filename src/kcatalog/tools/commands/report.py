"""`kcatalog report --html FILE`: the support matrix, policy and layers as one self-contained HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import add_catalog_arguments, catalog_paths, load_or_report, platform_of_catalog, write_output


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "report", help="write the op x backend x platform support matrix as one HTML page"
    )
    add_catalog_arguments(parser)
    parser.add_argument("--html", required=True, metavar="FILE", help="the page to write")
    parser.add_argument(
        "--link-base",
        metavar="URL",
        help="link manifest lines under this URL, e.g. https://github.com/org/repo/blob/main/ (each file's path "
        "relative to the working directory appended); default: relative to the page, for a page kept beside the files",
    )
    parser.add_argument(
        "--platform",
        action="append",
        default=[],
        help="a column group (repeatable; default: the platforms the policies require, else cpu; with --trace, "
        "the trace's platforms too)",
    )
    parser.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="FILE",
        help="colour the matrix by what ran in this trace (repeatable: merged); see `kcatalog trace show`",
    )
    return parser


def run(options: argparse.Namespace) -> int:
    from ..html_report import Links, render

    catalog = load_or_report(catalog_paths(options))
    if catalog is None:
        return 1
    usage = None
    texts = list(options.platform or catalog.settings.required_platforms or ("cpu",))
    if options.trace:
        from ..traces import read_traces
        from ..traces import usage as usage_of

        record = read_traces(options.trace)
        usage = usage_of(record)
        if not options.platform:  # the columns where something ran
            texts += [e.platform for e in record.entries if e.platform not in texts]
    platforms = [platform_of_catalog(catalog, text) for text in dict.fromkeys(texts)]
    links = Links(Path(options.html).parent, options.link_base)
    write_output(options.html, render(catalog, platforms, links, usage=usage))
    print(f"wrote {options.html} ({len(catalog)} ops x {len(platforms)} platforms)")
    return 0
