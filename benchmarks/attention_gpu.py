"""attention.prefill and attention.decode on the GPU, in one command (about 4 minutes on an H200):

1. `kcatalog test --device cuda` for both ops in bfloat16 and float16: every backend against the float32 reference
   on the declared samples (causal, sliding window, GQA, a KV cache longer than the query); calls a backend's gate
   refuses (flash with a mask, say) are reported as skipped;
2. every backend on calls with masks (bool with padding and a fully masked row, and additive), which the samples
   cannot declare, against the reference;
3. `kcatalog tune` of both ops at Llama-8B shapes (32 query heads, 8 key heads, D=128, bfloat16; prefill T in
   {128, 512, 2048, 4096, 8192} at batch 1, decode batch {1, 16, 64, 256} against 4096 cached keys): the tuned
   table fragment for catalog/tuned/cuda_9.0.yaml, in tune's own format;
4. `kcatalog tune --check` of that table: each bucket's winner and runner-up again, in interleaved rounds (medians).

Usage: python benchmarks/attention_gpu.py OUT [--backend NAME ...]; writes OUT/attention_test.json,
OUT/attention_masks.json, OUT/tuned/cuda_9.0.yaml, OUT/tune.txt and OUT/tune_check.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

OPS = ["attention.prefill", "attention.decode"]
BACKENDS = ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math", "flex"]  # the reference is never fastest


def kcatalog(out: Path, name: str, *args: str, timeout: int) -> int:
    """Run the CLI, its output into OUT/<name>; returns its exit status."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kcatalog", *args], capture_output=True, text=True, timeout=timeout, env=os.environ
        )
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, text = 124, f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {timeout} s"
    (out / name).write_text(text if isinstance(text, str) else text.decode())
    print(f"kcatalog {' '.join(args)}: exit {code} in {time.perf_counter() - started:.0f} s -> {out / name}")
    return code


def masked_checks(backends: list[str], device: str = "cuda") -> list[dict[str, object]]:
    """Each backend of both ops on masked calls, against the reference (what the declared samples cannot hold)."""
    import torch

    import kcatalog
    from kcatalog.runtime.gates import gate_reasons

    catalog = kcatalog.load_catalog()
    found = []
    for op, queries, keys in (
        ("attention.prefill", 64, 64),
        ("attention.decode", 1, 300),
        ("attention.decode", 5, 300),
    ):
        generator = torch.Generator().manual_seed(0)
        q = torch.randn(2 * queries, 32, 128, generator=generator)
        k, v = (torch.randn(2, 8, keys, 128, generator=generator) for _ in range(2))
        padding = torch.ones(2, 1, queries, keys, dtype=torch.bool)
        padding[1, :, :, :7] = False
        if queries > 1:
            padding[1, :, 0, :] = False  # a query that sees no key: zeros
        for mask_kind, mask in (("bool", padding), ("additive", torch.where(padding, 0.0, float("-inf")))):
            expected = catalog.kernel(op, "torch")(q, k, v, mask, None, True, 0).double()
            for backend in backends:
                args = [t.to(device, torch.bfloat16) for t in (q, k, v)]
                cuda_mask = mask.to(device) if mask.dtype == torch.bool else mask.to(device, torch.bfloat16)
                row: dict[str, object] = {"op": op, "backend": backend, "T": queries, "S": keys, "mask": mask_kind}
                refused = gate_reasons(catalog.info(op), (*args, cuda_mask, None, True, 0), {})
                if backend in refused:
                    row["skipped"] = refused[backend]
                else:
                    try:
                        got = catalog.kernel(op, backend)(*args, cuda_mask, None, True, 0).double().cpu()
                        row["relative_error"] = float((got - expected).norm() / expected.norm())
                        row["passed"] = row["relative_error"] <= catalog.info(op).tolerance["bfloat16"]
                    except Exception as exc:  # one backend's failure must not end the run
                        row["error"] = f"{type(exc).__name__}: {exc}"
                found.append(row)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--backend", action="append", help=f"backends to tune (default: {', '.join(BACKENDS)})")
    options = parser.parse_args(argv)
    out: Path = options.out
    out.mkdir(parents=True, exist_ok=True)
    backends = options.backend or BACKENDS
    started = time.perf_counter()
    dtypes = ["--dtype", "bfloat16", "--dtype", "float16"]
    failed = kcatalog(out, "attention_test.json", "test", *OPS, "--device", "cuda", *dtypes, "--seed", "0",
                      "--output-format", "json", timeout=120)  # fmt: skip
    rows = masked_checks(backends)
    (out / "attention_masks.json").write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if r.get("passed") is False or "error" in r]
    print(f"masked calls: {len(rows)} checks, {len(bad)} failed -> {out / 'attention_masks.json'}")
    named = [arg for backend in backends for arg in ("--backend", backend)]
    tuned = out / "tuned"
    tune = ["tune", *OPS, "--device", "cuda", "--dtype", "bfloat16", *named]
    kcatalog(out, "tune.txt", *tune, "--out", str(tuned), "--force", timeout=240)
    table = tuned / "cuda_9.0.yaml"
    if table.exists():
        kcatalog(out, "tune_check.txt", *tune, "--check", str(table), "--rounds", "5", timeout=120)
    print(f"done in {time.perf_counter() - started:.0f} s")
    return 1 if failed or bad or not table.exists() else 0


if __name__ == "__main__":
    raise SystemExit(main())
