"""`kcatalog plan`: write the resolved selection of every op as a plan, or `--check` one (runtime/planning.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import (
    add_catalog_arguments,
    catalog_paths,
    command_line,
    dtype,
    load_or_report,
    platform_of_catalog,
    write_output,
)

if TYPE_CHECKING:
    from ...platform import Platform
    from ...registry.catalog import Catalog


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "plan", help="write the resolved selection of every op as a plan, or --check one"
    )
    add_catalog_arguments(parser)
    parser.add_argument("--platform", help="e.g. cuda:9.0 (default: this machine)")
    parser.add_argument(
        "--dtype",
        type=dtype,
        action="append",
        default=[],
        help="only this dtype (repeatable); with --check: compare these (default: the dtypes the plan covers)",
    )
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the plan here (default: print it)")
    parser.add_argument(
        "--check",
        type=Path,
        metavar="PLAN",
        help="exit 1 when this machine would choose otherwise, for the dtypes the plan covers",
    )
    return parser


def run(options: argparse.Namespace) -> int:
    """Write the plan, or compare one with this machine (exit 1 listing the ops that differ)."""
    from ...runtime.planning import plan_text, resolve_plan
    from ..schema_refs import schema_comment

    catalog = load_or_report(catalog_paths(options))
    if catalog is None:
        return 1
    platform = platform_of_catalog(catalog, options.platform) if options.platform else catalog.platform()
    if options.check is not None:
        return _check(options, catalog, platform)
    resolved = resolve_plan(catalog.runtime, platform, options.dtype, here=_runs_here(platform, catalog.platform()))
    text = plan_text(resolved, command_line(options), comments=[schema_comment("plan.v1.json", options.out)])
    for note in resolved.notes:
        print(f"note: {note}", file=sys.stderr)
    if options.out is None:
        print(text, end="")
    else:
        write_output(options.out, text)
        print(f"wrote {options.out} ({len(resolved.choices)} ops on {resolved.platform}, digest {resolved.digest})")
    return 0


def _runs_here(platform: Platform, detected: Platform) -> bool:
    """Whether backends for `platform` run on this machine: its CPU, or its device at its arch (or none named)."""
    return platform.device == "cpu" or (platform.device == detected.device and platform.arch in (None, detected.arch))


def _check(options: argparse.Namespace, catalog: Catalog, platform: Platform) -> int:
    from ...diagnostics import Diagnostics
    from ...errors import CatalogError
    from ...link.locked_plan import read_plan
    from ...runtime.planning import differences, locked_choices, resolve_plan

    found = Diagnostics()
    locked = read_plan(
        options.check,
        {op: catalog.info(op) for op in catalog},
        catalog.digest,
        strict=False,
        diagnostics=found,
        devices=catalog.devices,
    )
    for diagnostic in found:
        print(diagnostic, file=sys.stderr)
    if locked is None:
        raise CatalogError(f"cannot read plan '{options.check}'")
    if str(platform) != locked.platform:
        lines = [f"plan is for {locked.platform}; this machine is {platform}"]
        left_out = None
    else:
        covered = sorted({dtype for _, dtype, _ in locked.entries})
        compared = options.dtype or covered  # asked, else what the plan was made for (`plan --dtype ...`)
        pinned = {op: {d: c for d, c in by.items() if d in compared} for op, by in locked_choices(locked).items()}
        here = _runs_here(platform, catalog.platform())
        lines = differences(pinned, resolve_plan(catalog.runtime, platform, compared, here=here))
        declared = {dtype for op in catalog for dtype in catalog.info(op).dtypes or ()}
        rest = sorted(declared - set(compared))
        why = f"the plan covers {', '.join(covered)} only"
        if options.dtype:
            why = f"--dtype asked for {', '.join(compared)}"
        left_out = f"not compared: {', '.join(rest)} ({why})" if rest else None
    for line in lines:
        print(line)
    if left_out is not None:
        print(left_out)
    print(f"{len(lines)} difference{'s' * (len(lines) != 1)} from {options.check}" if lines else "Plan holds.")
    return 1 if lines else 0
