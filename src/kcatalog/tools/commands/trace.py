"""`kcatalog trace show FILE...`: what a traced process ran (catalog.trace(path), KCATALOG_TRACE), several files
(ranks) merged: per op, platform, dtype and backend, the calls by leading dimension, the shapes that ran untuned,
the fallbacks and what decided."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "trace",
        help="print a trace written by catalog.trace(path) or KCATALOG_TRACE (several files: merged)",
        description="`kcatalog trace show FILE...` prints what the traced processes ran, the files merged: per "
        "op, platform, dtype and backend, the calls at each leading dimension of the dispatch argument (* where "
        "no tuned bucket covered it), what decided, and the fallbacks.",
    )
    parser.add_argument("action", choices=["show"], help="what to do with the trace: show it")
    parser.add_argument("files", nargs="+", metavar="FILE", help="trace files (JSON); several are merged")
    parser.add_argument("--output-format", choices=["text", "json"], default="text")
    parser.add_argument(
        "--shapes", type=int, default=8, metavar="N", help="leading dimensions shown per entry (default: 8; 0: all)"
    )
    return parser


def run(options: argparse.Namespace) -> int:
    from ..traces import read_traces, show

    record = read_traces(options.files)
    if options.output_format == "json":
        print(json.dumps(record.as_dict(), indent=2, ensure_ascii=False))
        return 0
    print(show(record, options.shapes or None))
    return 0
