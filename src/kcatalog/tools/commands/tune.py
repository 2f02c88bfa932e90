"""`kcatalog tune`: time every eligible backend per token-count bucket and write a tuned table (tools/tuning.py)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from .common import add_op_arguments, load_ops


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "tune", help="time every eligible backend per token-count bucket; write a tuned table"
    )
    add_op_arguments(
        parser,
        device="cuda",
        dtype_help="dtype (repeatable; default: bfloat16)",
        backend_help="only these candidates (repeatable)",
    )
    parser.add_argument("--buckets", help="token counts to time, e.g. 1,2,4,...,32768 (default: decode and prefill)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where to write <platform>.yaml")
    return parser


def run(options: argparse.Namespace) -> int:
    """Time the candidates, print the choices, write `<out>/<platform>.yaml`."""
    from .. import timing, tuning

    asked = load_ops(options)
    if asked is None:
        return 1
    catalog = asked.catalog
    try:
        buckets = [int(part) for part in options.buckets.split(",")] if options.buckets else None
    except ValueError:
        print(f"error: --buckets {options.buckets!r}: give token counts, e.g. 1,2,4,8", file=sys.stderr)
        return 2
    if buckets is not None and (not buckets or min(buckets) < 1):
        print("error: --buckets: token counts start at 1", file=sys.stderr)
        return 2
    platform = catalog.platform(options.device)
    jobs, notes = tuning.tune_jobs(
        catalog,
        asked.ops,
        platform=platform,
        dtypes=options.dtype or ["bfloat16"],
        buckets=buckets,
        backends=options.backend,
    )
    measured = tuning.measure(jobs, options.device, progress=timing.progress_bar)
    print(tuning.format_table(measured))
    for note in notes:
        print(f"note: {note}")
    if not any(m.best for m in measured):  # a table of no ops would not load: the directory's catalog with it
        print("error: no backend ran; no table written", file=sys.stderr)
        return 1
    out: Path = options.out
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{str(platform).replace(':', '_')}.yaml"
    command = shlex.join(["kcatalog", *sys.argv[1:]])
    path.write_text(tuning.table_text(str(platform), tuning.provenance(options.device, command), measured), "utf-8")
    print(f"wrote {path}")
    return 0 if measured and all(m.best for m in measured) else 1
