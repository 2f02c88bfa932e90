"""`kcatalog bench`: time each eligible backend on the op's declared shapes."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import (
    add_catalog_arguments,
    catalog_paths,
    dtype,
    load_or_report,
    require_device,
    split_ops,
    write_output,
)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser("bench", help="time each eligible backend on the declared shapes")
    parser.add_argument("items", nargs="*", metavar="OP|PATH", help="op ids or globs (default: every op), PATHs")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--shapes", choices=["decode", "prefill", "all"], default=None, help="default: all on cuda, decode on cpu"
    )
    parser.add_argument("--backend", action="append", default=[], help="only this backend (repeatable)")
    parser.add_argument(
        "--dtype",
        type=dtype,
        action="append",
        default=[],
        help="dtype (repeatable; default: bfloat16 on cuda, float32 on cpu)",
    )
    parser.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw bandwidth against size per backend")
    add_catalog_arguments(parser, positional=None)
    return parser


def run(options: argparse.Namespace) -> int:
    import platform

    from .. import bench
    from ..conformance import select_ops

    require_device(options.device)
    given = split_ops(options.items)
    catalog = load_or_report(catalog_paths(options, given.paths))
    if catalog is None:
        return 1
    shapes = options.shapes or ("all" if options.device == "cuda" else "decode")
    dtypes = options.dtype or (["bfloat16"] if options.device == "cuda" else ["float32"])
    jobs, notes = bench.plan(
        catalog,
        select_ops(catalog, given.ops),
        device=options.device,
        shapes=shapes,
        dtypes=dtypes,
        backends=options.backend,
    )
    copy_gbps = bench.copy_bandwidth(options.device)
    results = bench.run(jobs, options.device, copy_gbps, progress=bench.progress_bar)
    print(bench.format_table(results))
    for note in notes:
        print(f"note: {note}")
    print(f"copy bandwidth: {copy_gbps:.1f} GB/s (bytes read + written)")
    device_name = _device_name(options.device) or platform.processor() or platform.machine()
    if options.json:
        document = {
            "device": device_name,
            "copy_gbps": copy_gbps,
            "shapes": shapes,
            "dtypes": dtypes,
            "results": [r.as_dict() for r in results],
            "notes": notes,
        }
        write_output(options.json, json.dumps(document, indent=2) + "\n")
        print(f"wrote {options.json}")
    if options.plot:
        bench.plot(results, copy_gbps, options.plot, f"kcatalog bench on {device_name} ({', '.join(dtypes)})")
        print(f"wrote {options.plot}")
    return 1 if any(r.error for r in results) or not results else 0


def _device_name(device: str) -> str | None:
    if device != "cuda":
        return None
    import torch

    return torch.cuda.get_device_name()
