"""The `kcatalog tune` and `kcatalog plan` commands: options in, files and a report out, an exit code back."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..platform import Platform
    from ..registry.catalog import Catalog


def _command() -> str:
    return shlex.join(["kcatalog", *sys.argv[1:]])


def run_tune(options: argparse.Namespace, catalog: Catalog | None) -> int:
    """Time the candidates, print the choices, write `<out>/<platform>.yaml`."""
    if catalog is None:
        return 1
    from . import bench, tune
    from .conformance import select_ops
    from .inputs import platform_of

    try:
        buckets = [int(part) for part in options.buckets.split(",")] if options.buckets else None
    except ValueError:
        print(f"error: --buckets {options.buckets!r}: give token counts, e.g. 1,2,4,8", file=sys.stderr)
        return 2
    if buckets is not None and (not buckets or min(buckets) < 1):
        print("error: --buckets: token counts start at 1", file=sys.stderr)
        return 2
    platform = platform_of(catalog, options.device)
    jobs, notes = tune.tune_jobs(
        catalog,
        select_ops(catalog, options.ops),
        platform=platform,
        dtypes=options.dtype or ["bfloat16"],
        buckets=buckets,
        backends=options.backend,
    )
    measured = tune.measure(jobs, options.device, progress=bench.progress_bar)
    print(tune.format_table(measured))
    for note in notes:
        print(f"note: {note}")
    out: Path = options.out
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{str(platform).replace(':', '_')}.yaml"
    path.write_text(tune.table_text(str(platform), tune.provenance(options.device, _command()), measured), "utf-8")
    print(f"wrote {path}")
    return 0 if measured and all(m.best for m in measured) else 1


def run_plan(options: argparse.Namespace, catalog: Catalog | None, platform: Platform | None) -> int:
    """Write the plan, or compare one with this machine (exit 1 listing the ops that differ)."""
    if catalog is None:
        return 1
    from ..select.plan import differences, locked_choices, plan_text, resolve_plan

    if options.check is not None:
        from ..errors import CatalogError
        from ..link.plan import read_plan

        found: list = []  # type: ignore[type-arg]
        locked = read_plan(
            options.check, {op: catalog.info(op) for op in catalog}, catalog.digest, strict=False, diagnostics=found
        )
        for diagnostic in found:
            print(diagnostic, file=sys.stderr)
        if locked is None:
            raise CatalogError(f"cannot read plan '{options.check}'")
        here = resolve_plan(catalog, platform or catalog.platform(), options.dtype)
        lines = (
            differences(locked_choices(locked), here) if str(platform or catalog.platform()) == locked.platform else []
        )
        if str(here.platform) != locked.platform:
            lines.insert(0, f"plan is for {locked.platform}; this machine is {here.platform}")
        for line in lines:
            print(line)
        print(f"{len(lines)} difference{'s' * (len(lines) != 1)} from {options.check}" if lines else "Plan holds.")
        return 1 if lines else 0
    resolved = resolve_plan(catalog, platform or catalog.platform(), options.dtype)
    text = plan_text(resolved, _command())
    for note in resolved.notes:
        print(f"note: {note}", file=sys.stderr)
    if options.out is None:
        print(text, end="")
    else:
        options.out.write_text(text, encoding="utf-8")
        print(f"wrote {options.out} ({len(resolved.choices)} ops on {resolved.platform}, digest {resolved.digest})")
    return 0
