"""The `kcatalog` command line: argv in, exit code out (0 clean, 1 diagnostics, 2 usage or internal error)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import CatalogError
from ..load import check_catalog
from ..platform import Platform
from ..read.files import shipped_catalog_dir
from ..registry.catalog import Catalog
from ..validate.jsonschema import shipped_schema_dir, stale_schemas, write_schemas
from . import migrate
from .report import REPORTERS, concise, plural, text_table


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kcatalog", description="Validate, list and explain a kernel catalog.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def catalog_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "paths",
            nargs="*",
            metavar="PATH",
            help="catalog directories or files (default: the catalog shipped with kcatalog)",
        )

    def catalog_option(p: argparse.ArgumentParser) -> None:
        shown = "catalog directory or file (repeatable; default: the shipped catalog)"
        p.add_argument("--catalog", action="append", default=None, metavar="PATH", help=shown)

    validate = sub.add_parser("validate", help="check catalog files and report every problem")
    catalog_args(validate)
    validate.add_argument("--output-format", choices=sorted(REPORTERS), default="concise")
    validate.add_argument("--exit-zero", action="store_true", help="exit 0 even when errors are found")
    validate.add_argument("--no-targets", action="store_true", help="skip the static checks of import targets")
    validate.add_argument(
        "--import",
        dest="import_targets",
        action="store_true",
        help="deeper check: import every target (runs kernel modules' code) and compare "
        "its parameters with the op's signature",
    )
    validate.add_argument("--plan", metavar="FILE", help="also check this plan against the catalog")
    validate.add_argument(
        "--allow-module",
        action="append",
        default=None,
        metavar="PREFIX",
        help="only allow targets under this module prefix (repeatable)",
    )

    list_ = sub.add_parser("list", help="show the op x backend coverage matrix")
    catalog_args(list_)
    list_.add_argument("--output-format", choices=["text", "json"], default="text")

    explain = sub.add_parser("explain", help="which backend runs an op on a platform, and why not the others")
    explain.add_argument("op", nargs="?", help="op id, e.g. layernorm.rms_norm")
    explain.add_argument("--all", action="store_true", help="explain every op")
    explain.add_argument("--platform", help="e.g. cuda:9.0, hip:gfx942, cpu (default: this machine)")
    explain.add_argument("--dtype", help="the call's dtype, e.g. bfloat16")
    explain.add_argument("--tokens", type=int, help="the call's leading dimension: picks a tuned table's bucket")
    explain.add_argument(
        "--torch-ops",
        action="store_true",
        help="also show each op as a torch op: its schema, its fake, and what each device type binds",
    )
    catalog_option(explain)
    explain.add_argument("--output-format", choices=["text", "json"], default="text")

    test = sub.add_parser("test", help="check every eligible backend against the reference on declared samples")
    test.add_argument("ops", nargs="*", metavar="OP", help="op ids or globs (default: every op)")
    test.add_argument("--backend", action="append", default=[], help="only this backend (repeatable)")
    test.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    test.add_argument("--dtype", action="append", default=[], help="only this dtype (repeatable)")
    test.add_argument("--seed", type=int, default=None, help="base seed of the inputs (default: random, printed)")
    test.add_argument("--interpret", action="store_true", help="run Triton kernels on the CPU (TRITON_INTERPRET=1)")
    catalog_option(test)
    test.add_argument("--output-format", choices=["concise", "json"], default="concise")

    bench = sub.add_parser("bench", help="time each eligible backend on the declared shapes")
    bench.add_argument("ops", nargs="*", metavar="OP", help="op ids or globs (default: every op)")
    bench.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    bench.add_argument(
        "--shapes", choices=["decode", "prefill", "all"], default=None, help="default: all on cuda, decode on cpu"
    )
    bench.add_argument("--backend", action="append", default=[], help="only this backend (repeatable)")
    bench.add_argument(
        "--dtype", action="append", default=[], help="dtype (repeatable; default: bfloat16 on cuda, float32 on cpu)"
    )
    bench.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    bench.add_argument("--plot", metavar="FILE.png", help="draw bandwidth against size per backend")
    catalog_option(bench)

    tune = sub.add_parser("tune", help="time every eligible backend per token-count bucket; write a tuned table")
    tune.add_argument("ops", nargs="*", metavar="OP", help="op ids or globs (default: every op)")
    tune.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    tune.add_argument("--dtype", action="append", default=[], help="dtype (repeatable; default: bfloat16)")
    tune.add_argument("--buckets", help="token counts to time, e.g. 1,2,4,...,32768 (default: decode and prefill)")
    tune.add_argument("--backend", action="append", default=[], help="only these candidates (repeatable)")
    tune.add_argument("--out", type=Path, required=True, metavar="DIR", help="where to write <platform>.yaml")
    catalog_option(tune)

    plan = sub.add_parser("plan", help="write the resolved selection of every op as a plan, or --check one")
    plan.add_argument("--platform", help="e.g. cuda:9.0 (default: this machine)")
    plan.add_argument("--dtype", action="append", default=[], help="only this dtype (repeatable)")
    plan.add_argument("--tuned", action="append", default=[], metavar="DIR", help="tuned tables to add (repeatable)")
    plan.add_argument("--out", type=Path, metavar="FILE", help="write the plan here (default: print it)")
    plan.add_argument("--check", type=Path, metavar="PLAN", help="exit 1 when this machine would choose otherwise")
    catalog_option(plan)

    cache = sub.add_parser("cache", help="where load_catalog() caches validated catalogs, or --clear it")
    cache.add_argument("--clear", action="store_true", help="remove every entry")

    schema = sub.add_parser("schema", help="write the JSON Schemas generated from the models, or check them")
    schema.add_argument("--check", action="store_true", help="exit 1 if the committed schemas are stale")
    schema.add_argument("--dir", type=Path, default=None, help="schema directory (default: the shipped schemas/)")
    migrate.add_parsers(sub)  # import-registry, dump-registry
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting, so tests can call it."""
    try:
        options = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage error
        return int(exc.code or 0) if exc.code in (0, None) else 2
    # Library warnings (fallbacks, ignored overrides) reach the user through the command's own output.
    logging.getLogger("kcatalog").addHandler(logging.NullHandler())
    try:
        return COMMANDS[options.command](options)
    except BrokenPipeError:  # e.g. `kcatalog test | head`: the reader left; say nothing more
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return 1
    except CatalogError as exc:
        return _fail(options, str(exc), 1)
    except Exception as exc:  # never a traceback: name the failure and exit 2
        return _fail(options, f"internal error: {type(exc).__name__}: {exc}", 2)


def _fail(options: argparse.Namespace, message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    if getattr(options, "output_format", None) == "json":  # JSON output stays valid JSON, also on failure
        print(json.dumps({"error": message}))
    return code


def _validate(options: argparse.Namespace) -> int:
    _, diagnostics = check_catalog(
        options.paths or None,
        check_targets=not options.no_targets,
        allowed_modules=options.allow_module,
        import_targets=options.import_targets,
        plan=options.plan,
    )
    print(REPORTERS[options.output_format](diagnostics))
    failed = any(d.is_error for d in diagnostics)
    return 0 if options.exit_zero or not failed else 1


def _load_or_report(paths: Sequence[str] | None) -> Catalog | None:
    catalog, diagnostics = check_catalog(paths or None)
    if catalog is None:
        print(concise(diagnostics), file=sys.stderr)
    return catalog


def _list(options: argparse.Namespace) -> int:
    catalog = _load_or_report(options.paths)
    if catalog is None:
        return 1
    backends = [b for b in catalog.backends if any(catalog.has(op, b) for op in catalog)]
    if options.output_format == "json":
        ops = {
            op: {
                "description": catalog.info(op).description,
                "reference": catalog.info(op).reference,
                "location": str(catalog.info(op).location),
                "backends": {
                    spec.backend: {
                        "target": spec.target,
                        "requires": list(spec.requires),
                        "capabilities": [
                            {k: v for k, v in dataclasses.asdict(c).items() if v is not None} for c in spec.capabilities
                        ],
                        "dtypes": None if spec.dtypes is None else list(spec.dtypes),
                    }
                    for spec in catalog.get(op)
                },
            }
            for op in catalog
        }
        print(json.dumps({"backends": backends, "ops": ops}, indent=2))
        return 0
    rows = [["op", *backends]]
    for op in catalog:
        info = catalog.info(op)
        rows.append([op, *("ref" if b == info.reference else "yes" if b in info.backends else "-" for b in backends)])
    print(text_table(rows))
    print(f"{plural(len(catalog), 'op')}, {plural(len(catalog.all_specs()), 'backend spec')}")
    return 0


def _explain(options: argparse.Namespace) -> int:
    if bool(options.op) == options.all:
        print("error: give one op, or --all", file=sys.stderr)
        return 2
    catalog = _load_or_report(options.catalog)
    if catalog is None:
        return 1
    try:  # after loading: the catalog's settings may declare more device kinds
        platform = Platform.parse(options.platform, catalog.devices) if options.platform else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ops = catalog.ops() if options.all else [options.op]
    selections = [catalog.select(op, platform, options.dtype, tokens=options.tokens) for op in ops]
    torch_ops = {}
    if options.torch_ops:
        from ..select.torch_ops import describe

        torch_ops = {op: describe(catalog, op, platform=platform) for op in ops}
    if options.output_format == "json":
        entries: list[dict[str, Any]] = [
            {
                "op": s.op,
                "platform": str(s.platform),
                "chosen": s.chosen.backend if s.chosen else None,
                "target": s.chosen.target if s.chosen else None,
                "decided_by": s.decided_by,
                "notes": list(s.notes),
                "order": list(s.order),
                "rejected": [{"backend": r.backend, "reason": r.reason} for r in s.rejected],
            }
            for s in selections
        ]
        for entry in entries if torch_ops else ():
            entry["torch_op"] = torch_ops[str(entry["op"])].as_dict()
        print(json.dumps(entries, indent=2))
    else:
        for s in selections:
            chosen = f"{s.chosen.backend} ({s.chosen.target}), by {s.decided_by}" if s.chosen else "nothing eligible"
            print(f"{s.op} on {s.platform}: {chosen}")
            for note in s.notes:
                print(f"  note: {note}")
            for r in s.rejected:
                print(f"  {r.backend}: {r.reason}")
            for spec in catalog.get(s.op):
                if spec.eligible:
                    print(f"  {spec.backend}: gated per call by {spec.eligible} (asked once per argument shape)")
            table = catalog.tuned(s.op, s.platform, options.dtype) if options.tokens is None else None
            if table is not None:
                buckets = ", ".join(f"{b.span} {b.backend}" for b in table.buckets)
                print(f"  tuned table for {table.platform} {table.dtype}: {buckets} (--tokens N picks one)")
            for line in torch_ops[s.op].lines() if torch_ops else ():
                print(line)
    return 0 if all(s.chosen for s in selections) else 1


def _test(options: argparse.Namespace) -> int:
    from . import conformance

    if options.interpret:
        if options.device != "cpu":
            print("error: --interpret runs Triton kernels on the CPU; use it with --device cpu", file=sys.stderr)
            return 2
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton
    catalog = _load_or_report(options.catalog)
    if catalog is None:
        return 1
    seed = options.seed if options.seed is not None else int.from_bytes(os.urandom(4), "little")
    ops = conformance.select_ops(catalog, options.ops)
    cases, notes = conformance.plan(
        catalog,
        ops,
        device=options.device,
        backends=options.backend,
        dtypes=options.dtype,
        base_seed=seed,
        interpret=options.interpret,
    )
    results = list(conformance.run(cases, catalog, options.device))
    failed = [r for r in results if not r.passed]
    if options.output_format == "json":
        print(
            json.dumps(
                {
                    "seed": seed,
                    "results": [r.as_dict() for r in results],
                    "notes": notes,
                    "summary": {"checks": len(results), "failed": len(failed)},
                },
                indent=2,
            )
        )
    else:
        print(f"seed {seed}")
        if results:
            print(conformance.format_table(results))
        for note in notes:
            print(f"note: {note}")
        for r in failed:
            print(
                conformance.failure_line(
                    r, seed, catalogs=options.catalog or (), device=options.device, interpret=options.interpret
                )
            )
        print(f"{plural(len(results), 'check')}, {len(failed)} failed.")
    return 1 if failed or not results else 0


def _bench(options: argparse.Namespace) -> int:
    import platform

    from . import bench
    from .conformance import select_ops

    catalog = _load_or_report(options.catalog)
    if catalog is None:
        return 1
    shapes = options.shapes or ("all" if options.device == "cuda" else "decode")
    dtypes = options.dtype or (["bfloat16"] if options.device == "cuda" else ["float32"])
    jobs, notes = bench.plan(
        catalog,
        select_ops(catalog, options.ops),
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
        Path(options.json).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
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


def _cache(options: argparse.Namespace) -> int:
    from ..cache import store as cache

    chosen = cache.default_dir()
    directory = chosen.path
    if directory is None:
        print(f"cache: off: {chosen.why_off}")
        return 0
    if options.clear:
        cleared = cache.clear(directory)
        if cleared.refused:
            print(f"error: not cleared: {cleared.refused}", file=sys.stderr)
            return 1
        print(f"removed {_entries(cleared.removed)} from {directory}")
        return 0
    found = cache.entries(directory)
    size = sum(path.stat().st_size for path in found)
    print(f"cache: {directory} ({_entries(len(found))}, {size / 1024:.0f} KiB)")
    return 0


def _entries(count: int) -> str:
    return f"{count} {'entry' if count == 1 else 'entries'}"


def _schema(options: argparse.Namespace) -> int:
    directory = options.dir or shipped_schema_dir()
    if options.check:
        stale = stale_schemas(directory)
        for name in stale:
            print(f"{directory / name}: stale or missing; run `kcatalog schema` to regenerate", file=sys.stderr)
        if not stale:
            print("Schemas are up to date.")
        return 1 if stale else 0
    for path in write_schemas(directory):
        print(f"wrote {path}")
    return 0


def _tune(options: argparse.Namespace) -> int:
    from .tune_command import run_tune

    return run_tune(options, _load_or_report(options.catalog))


def _plan(options: argparse.Namespace) -> int:
    from .tune_command import run_plan

    try:
        platform = Platform.parse(options.platform) if options.platform else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_plan(options, _load_or_report([*(options.catalog or [shipped_catalog_dir()]), *options.tuned]), platform)


COMMANDS = {
    "validate": _validate,
    "list": _list,
    "explain": _explain,
    "test": _test,
    "bench": _bench,
    "tune": _tune,
    "plan": _plan,
    "cache": _cache,
    "schema": _schema,
    **migrate.COMMANDS,
}
