"""`kcatalog tune`: time every eligible backend per token-count bucket and write a tuned table (tools/tune.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import add_catalog_arguments, catalog_paths, dtype, load_or_report, require_device, split_ops


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "tune", help="time every eligible backend per token-count bucket; write a tuned table"
    )
    parser.add_argument("items", nargs="*", metavar="OP|PATH", help="op ids or globs (default: every op), then PATHs")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument(
        "--dtype", type=dtype, action="append", default=[], help="dtype (repeatable; default: bfloat16)"
    )
    parser.add_argument("--buckets", help="token counts to time, e.g. 1,2,4,...,32768 (default: decode and prefill)")
    parser.add_argument("--backend", action="append", default=[], help="only these candidates (repeatable)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where to write <platform>.yaml")
    add_catalog_arguments(parser, positional=None)
    return parser


def run(options: argparse.Namespace) -> int:
    from ..tune_command import run_tune

    require_device(options.device)
    given = split_ops(options.items)
    options.ops = given.ops
    return run_tune(options, load_or_report(catalog_paths(options, given.paths)))
