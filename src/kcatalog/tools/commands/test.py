"""`kcatalog test`: every eligible backend checked against the op's reference on its declared samples, every
promise a backend makes of its outputs here (deterministic, batch_invariant) checked on the same samples, and the
gradients of every op with a backward (tools/gradients.py)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ...errors import printable
from ..formats import plural
from .common import UsageError, add_op_arguments, load_ops, require_module


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "test",
        help="check every eligible backend against the reference on declared samples, and the promises backends make",
    )
    add_op_arguments(
        parser, device="cpu", dtype_help="only this dtype (repeatable)", backend_help="only this backend (repeatable)"
    )
    parser.add_argument("--seed", type=int, default=None, help="base seed of the inputs (default: random, printed)")
    parser.add_argument("--interpret", action="store_true", help="run Triton kernels on the CPU (TRITON_INTERPRET=1)")
    parser.add_argument("--output-format", choices=["concise", "json"], default="concise")
    return parser


def run(options: argparse.Namespace) -> int:
    from .. import conformance, gradients, promises

    if options.interpret:
        if options.device != "cpu":
            raise UsageError("--interpret runs Triton kernels on the CPU; use it with --device cpu")
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton
        require_module("triton", "--interpret", "pip install 'kcatalog[triton]'")
    asked = load_ops(options)
    if asked is None:
        return 1
    catalog, ops, paths = asked.catalog, asked.ops, asked.paths
    seed = options.seed if options.seed is not None else int.from_bytes(os.urandom(4), "little")
    cases, notes = conformance.plan(
        catalog,
        ops,
        device=options.device,
        backends=options.backend,
        dtypes=options.dtype,
        base_seed=seed,
        interpret=options.interpret,
    )
    promise_cases, promise_notes = promises.plan_promises(
        catalog,
        ops,
        device=options.device,
        backends=options.backend,
        dtypes=options.dtype,
        base_seed=seed,
        interpret=options.interpret,
    )
    notes += promise_notes
    gradient_cases, gradient_notes = gradients.plan_gradients(
        catalog,
        ops,
        device=options.device,
        backends=options.backend,
        dtypes=options.dtype,
        base_seed=seed,
        interpret=options.interpret,
    )
    notes += gradient_notes
    results = list(conformance.run(cases, catalog, options.device))
    kept = list(promises.run_promises(promise_cases, options.device))
    grads = list(gradients.run_gradients(gradient_cases, catalog, options.device))
    failed = [r for r in results if not r.passed]
    broken = [r for r in kept if not r.passed]
    wrong = [r for r in grads if not r.passed]
    checks, failures = len(results) + len(kept) + len(grads), len(failed) + len(broken) + len(wrong)
    if options.output_format == "json":
        summary = {"checks": checks, "failed": failures}
        document = {
            "seed": seed,
            "results": [r.as_dict() for r in results],
            "promises": [r.as_dict() for r in kept],
            "gradients": [r.as_dict() for r in grads],
            "notes": notes,
            "summary": summary,
        }
        print(json.dumps(document, indent=2))
    else:
        print(f"seed {seed}")
        if results:
            print(conformance.format_table(results))
        if kept:
            print(promises.format_promises(kept))
        if grads:
            print(gradients.format_gradients(grads))
        for note in notes:
            print(printable(f"note: {note}"))
        where = {"catalogs": paths or (), "device": options.device, "interpret": options.interpret}
        for r in failed:
            print(printable(conformance.failure_line(r, seed, **where)))  # it quotes what the kernel raised
        for p in broken:
            print(printable(promises.promise_failure_line(p, seed, **where)))
        for g in wrong:
            print(printable(gradients.gradient_failure_line(g, seed)))
        skipped = sum(r.skipped for r in results)
        refused = f", {skipped} refused by a backend's gate (skipped)" if skipped else ""
        print(f"{plural(checks, 'check')}, {failures} failed{refused}.")
    return 1 if failures or not checks else 0
