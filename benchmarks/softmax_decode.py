#!/usr/bin/env python3
"""Softmax over vocabulary-wide rows at decode sizes, on a GPU: the Triton kernel's split-row path against its
one-program-per-row loop, ATen and torch.compile, and the split path's block size and warps.

Run on a CUDA machine from the repository root (``PYTHONPATH=src``)::

    python3 benchmarks/softmax_decode.py [--out DIR]

Every variant is first checked against float64 softmax (relative error ‖y − ref‖ / ‖ref‖ within the
manifest's bf16 tolerance), then timed as kernels_gpu.py times decode: N calls on rotating inputs captured
in one CUDA graph, median of 50 replays, per call. Results: DIR/softmax_decode.{json,txt}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels_gpu import environment, import_kcatalog, time_graph  # noqa: E402

IMPORT_ERROR = import_kcatalog()
if IMPORT_ERROR:
    raise SystemExit(f"error: {IMPORT_ERROR}")

from kcatalog.kernels.triton import elementwise as triton_ew  # noqa: E402

ROWS = (1, 4, 16, 64, 128, 256)
WIDTHS = (32768, 128256, 151936)  # the shipped decode size; Llama 3's and Qwen 2's vocabularies
SPLITS = [(block, warps) for block in (2048, 4096, 8192) for warps in (4, 8)]
COMPILE_ROWS = (1, 64)  # torch.compile recompiles per shape: timed at two
INPUT_SETS = 8
TOLERANCE = 1e-2  # the manifest's bfloat16 softmax tolerance
ALWAYS = 1 << 20  # split_rows_per_sm that splits every row count here


def variants() -> dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], dict[str, Any]]]:
    """name -> (function, softmax tunables it runs under: triton_ew.TUNING.override(**these))."""
    found: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], dict[str, Any]]] = {
        "triton (shipped)": (triton_ew.softmax, {}),
        "triton loop": (triton_ew.softmax, {"split_rows_per_sm": 0}),
    }
    for block, warps in SPLITS:
        found[f"triton split {block}/{warps}w"] = (
            triton_ew.softmax,
            {"split_rows_per_sm": ALWAYS, "split_block": block, "split_warps": warps},
        )
    found["aten"] = (lambda x: torch.softmax(x, dim=-1), {})
    found["torch.compile"] = (torch.compile(lambda x: torch.softmax(x, dim=-1), dynamic=False), {})
    return found


def relative_error(out: torch.Tensor, x: torch.Tensor) -> float:
    ref = torch.softmax(x.double(), dim=-1)
    return float((out.double() - ref).norm() / ref.norm())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    out_dir = parser.parse_args().out
    torch.manual_seed(0)
    device = torch.device("cuda")
    rows_out: list[dict[str, Any]] = []
    for width in WIDTHS:
        for rows in ROWS:
            sets = [{"x": (torch.randn(rows, width, device=device) * 4).bfloat16()} for _ in range(INPUT_SETS)]
            for name, (fn, values) in variants().items():
                if name == "torch.compile" and rows not in COMPILE_ROWS:
                    continue
                with triton_ew.TUNING.override(**values):
                    error = relative_error(fn(sets[0]["x"]), sets[0]["x"])
                    us = time_graph(fn, sets) * 1e3
                rows_out.append(
                    {
                        "width": width,
                        "rows": rows,
                        "variant": name,
                        "us": us,
                        "rel_error": error,
                        "ok": error <= TOLERANCE,
                    }
                )
                print(f"{width:>7} {rows:>4} {name:<24} {us:8.2f} us  err {error:.1e}", flush=True)
    lines = [f"{'width':>7} {'rows':>4}  " + "  ".join(f"{name:>22}" for name in variants())]
    for width in WIDTHS:
        for rows in ROWS:
            found = {r["variant"]: r for r in rows_out if r["width"] == width and r["rows"] == rows}
            cells = [f"{found[name]['us']:>19.2f} us" if name in found else f"{'-':>22}" for name in variants()]
            lines.append(f"{width:>7} {rows:>4}  " + "  ".join(cells))
    failed = [r for r in rows_out if not r["ok"]]
    lines.append(
        f"\n{len(rows_out) - len(failed)} of {len(rows_out)} checks within {TOLERANCE}; "
        f"worst relative error {max(r['rel_error'] for r in rows_out):.1e}"
    )
    shipped = {(r["width"], r["rows"]): r["us"] for r in rows_out if r["variant"] == "triton (shipped)"}
    loop = {(r["width"], r["rows"]): r["us"] for r in rows_out if r["variant"] == "triton loop"}
    lines.append(
        "shipped / loop, geometric mean over shapes: "
        f"{statistics.geometric_mean([shipped[k] / loop[k] for k in shipped]):.2f}"
    )
    text = "\n".join(lines)
    print(text)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "softmax_decode.txt").write_text(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}\n\n{text}\n"
    )
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "environment": environment(device)}
    (out_dir / "softmax_decode.json").write_text(json.dumps({**meta, "results": rows_out}, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
