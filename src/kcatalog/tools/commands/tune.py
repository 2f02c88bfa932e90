"""`kcatalog tune`: time every eligible backend per token-count bucket and write a tuned table (tools/tuning.py),
rewritten as each bucket finishes, so that Ctrl-C keeps what was measured and `--resume` goes on from it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..formats import plural
from .common import INTERRUPTED, UsageError, add_op_arguments, command_line, load_ops, write_output

if TYPE_CHECKING:
    from ...platform import Platform
    from ...registry.catalog import Catalog
    from ..timing import Job
    from ..tuning import KeptTable, Measured, Provenance


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
    shapes = parser.add_mutually_exclusive_group()
    shapes.add_argument("--buckets", help="token counts to time, e.g. 1,2,4,...,32768 (default: decode and prefill)")
    shapes.add_argument(
        "--from-trace",
        action="append",
        default=[],
        metavar="FILE",
        help="time exactly the shapes (op, dtype, token count) that ran untuned on this device in the trace "
        "(repeatable: merged); ops and --dtype narrow them",
    )
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="where to write <platform>.yaml (after each bucket)"
    )
    again = parser.add_mutually_exclusive_group()
    again.add_argument(
        "--resume", action="store_true", help="go on from the table in DIR: time only the buckets it lacks"
    )
    again.add_argument("--force", action="store_true", help="replace the table in DIR, timing every bucket again")
    return parser


class _Table:
    """The table being written: the buckets kept from an earlier run and those measured since, the file rewritten
    whole after each bucket that some backend ran in (a table of no ops would not load)."""

    def __init__(self, path: Path, platform: str, provenance: Provenance, kept: KeptTable | None) -> None:
        self.path = path
        self.platform = platform
        self.provenance = provenance
        self.kept = list(kept.measured) if kept else []
        self.new: list[Measured] = []
        self.saved = 0  # the buckets in the file as last written by this run (0: not written)

    @property
    def measured(self) -> list[Measured]:
        return sorted([*self.kept, *self.new], key=lambda m: (m.op, m.dtype, m.tokens))

    def add(self, bucket: Measured) -> None:
        from ..tuning import table_text

        self.new.append(bucket)
        measured = self.measured
        if any(m.best for m in measured):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_output(self.path, table_text(self.platform, self.provenance, measured, written_to=self.path))
            self.saved = sum(1 for m in measured if m.best)


def run(options: argparse.Namespace) -> int:
    """Time the candidates, writing `<out>/<platform>.yaml` as each bucket finishes; print the choices."""
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
    path: Path = options.out / f"{str(platform).replace(':', '_')}.yaml"
    provenance = tuning.provenance(options.device, command_line(options))
    kept = _kept(path, options, str(platform), provenance.device)
    if options.from_trace:
        jobs, notes = _trace_jobs(options, catalog, asked.ops, platform)
        if not jobs:
            for note in notes:
                print(f"note: {note}")
            print(f"the trace ran no shape untuned on {platform} that can be timed: nothing to tune")
            return 0
    else:
        jobs, notes = tuning.tune_jobs(
            catalog,
            asked.ops,
            platform=platform,
            dtypes=options.dtype or ["bfloat16"],
            buckets=buckets,
            backends=options.backend,
        )
    done = {(m.op, m.dtype, m.tokens) for m in kept.measured} if kept else set()
    todo = [job for job in jobs if tuning.bucket_of(job) not in done]
    if kept:
        kept_buckets = plural(len(kept.measured), "bucket")
        print(f"resuming from {path}: {kept_buckets} kept, {len(todo)} of {len(jobs)} jobs to time")
    table = _Table(path, str(platform), provenance, kept)
    try:
        tuning.measure(todo, options.device, progress=timing.progress_bar, finished=table.add)
    except KeyboardInterrupt:
        if table.saved:
            print(f"\nerror: interrupted; {path} keeps the {plural(table.saved, 'bucket')} measured", file=sys.stderr)
            print(f"go on with: {command_line(options, drop=['--force'], add=['--resume'])}", file=sys.stderr)
        else:
            print("\nerror: interrupted before a bucket finished; nothing written", file=sys.stderr)
        return INTERRUPTED
    measured = table.measured
    print(tuning.format_table(measured))
    for note in notes:
        print(f"note: {note}")
    if not any(m.best for m in measured):
        print("error: no backend ran; no table written", file=sys.stderr)
        return 1
    print(f"wrote {path}" if table.saved else f"{path} already holds every bucket; nothing timed")
    return 0 if all(m.best for m in measured) else 1


def _trace_jobs(
    options: argparse.Namespace, catalog: Catalog, ops: list[str], platform: Platform
) -> tuple[list[Job], list[str]]:
    """The jobs of the shapes the trace ran untuned on this platform (tools/traces.py), and what it left out."""
    from ..traces import jobs_from_trace, read_traces

    record = read_traces(options.from_trace)
    found = jobs_from_trace(catalog, record, ops, platform=platform, dtypes=options.dtype, backends=options.backend)
    shapes = sum(len(tokens) for tokens in found.wanted.values())
    if found.jobs:
        jobs = plural(len(found.jobs), "job")
        print(f"from the trace: {plural(shapes, 'shape')} that ran untuned on {platform}, {jobs}")
    return found.jobs, found.notes


def _kept(path: Path, options: argparse.Namespace, platform: str, device: str) -> KeptTable | None:
    """The table to go on from (--resume), or None; a UsageError where one is there and neither --resume nor
    --force says what to do with it, or it cannot be gone on from."""
    from ...diagnostics import Diagnostics
    from ..tuning import read_kept

    if not path.exists():
        return None
    if options.force:
        return None
    if not options.resume:
        raise UsageError(f"{path} exists: --resume times only the buckets it lacks, --force replaces it")
    found = Diagnostics()
    kept = read_kept(path, found)
    if kept is None:
        for diagnostic in found:
            print(diagnostic, file=sys.stderr)
        raise UsageError(f"cannot resume from {path}")
    if kept.platform != platform or kept.device != device:
        raise UsageError(
            f"cannot resume from {path}: measured on {kept.device} ({kept.platform}), this is {device} ({platform})"
        )
    return kept
