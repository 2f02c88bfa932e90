"""`kcatalog bench`: time each eligible backend on the op's declared shapes."""

from __future__ import annotations

import argparse
import json
import platform
from typing import Any

from .common import add_op_arguments, load_ops, require_module, write_output


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser("bench", help="time each eligible backend on the declared shapes")
    add_op_arguments(
        parser,
        device="cpu",
        dtype_help="dtype (repeatable; default: bfloat16 on cuda, float32 on cpu)",
        backend_help="only this backend (repeatable)",
    )
    parser.add_argument(
        "--shapes", choices=["decode", "prefill", "all"], default=None, help="default: all on cuda, decode on cpu"
    )
    parser.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw bandwidth against size per backend")
    return parser


def run(options: argparse.Namespace) -> int:
    from .. import timing  # torch and the samples' machinery: only a bench needs them

    if options.plot:  # before timing anything, not after
        require_module("matplotlib", "--plot", "pip install 'kcatalog[plot]'")
    asked = load_ops(options)
    if asked is None:
        return 1
    shapes = options.shapes or ("all" if options.device == "cuda" else "decode")
    dtypes = options.dtype or (["bfloat16"] if options.device == "cuda" else ["float32"])
    jobs, notes = timing.plan(
        asked.catalog,
        asked.ops,
        device=options.device,
        shapes=shapes,
        dtypes=dtypes,
        backends=options.backend,
    )
    copy_gbps = timing.copy_bandwidth(options.device)
    results = timing.run(jobs, options.device, copy_gbps, progress=timing.progress_bar)
    print(timing.format_table(results))
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
        timing.plot(results, copy_gbps, options.plot, f"kcatalog bench on {device_name} ({', '.join(dtypes)})")
        print(f"wrote {options.plot}")
    return 1 if any(r.error for r in results) or not results else 0


def _device_name(device: str) -> str | None:
    if device != "cuda":
        return None
    import torch

    return torch.cuda.get_device_name()
