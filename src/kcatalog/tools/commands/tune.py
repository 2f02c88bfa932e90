"""`kcatalog tune`: time every eligible backend per token-count bucket and write a tuned table (tools/tuning.py),
rewritten as each bucket finishes, so that Ctrl-C keeps what was measured and `--resume` goes on from it; or check a
table's choices on this machine (`--check`, tools/tune_check.py) and rewrite those that flipped (`--update`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..formats import plural
from .common import INTERRUPTED, UsageError, add_op_arguments, command_line, load_ops, shape_sizes, write_output

if TYPE_CHECKING:
    from ...platform import Platform
    from ...registry.catalog import Catalog
    from ..timing import Job
    from ..tune_check import Verdict
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
        "--shape",
        type=shape_sizes,
        metavar="K=V,...",
        help="sizes to time at, e.g. E=128,H=2048,I=768,K=8 (over the samples' sizes that have these names): for an "
        "op keyed by its shape (table_key), the key measured",
    )
    parser.add_argument("--out", type=Path, metavar="DIR", help="where to write <platform>.yaml (after each bucket)")
    again = parser.add_mutually_exclusive_group()
    again.add_argument(
        "--resume", action="store_true", help="go on from the table in DIR: time only the buckets it lacks"
    )
    again.add_argument("--force", action="store_true", help="replace the table in DIR, timing every bucket again")
    checking = parser.add_mutually_exclusive_group()
    checking.add_argument(
        "--check",
        type=Path,
        metavar="TABLE",
        help="time each bucket's winner and runner-up again, in interleaved rounds; exit 1 listing the buckets "
        "whose choice flipped (the runner-up faster in every round, by more than 3%% at the median)",
    )
    checking.add_argument(
        "--update",
        type=Path,
        metavar="TABLE",
        help="as --check, then measure the flipped buckets again and rewrite only those (and the kernel digests "
        "of the backends timed again in every bucket)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds per bucket for --check and --update (default: 5)"
    )
    return parser


class _Table:
    """The table being written: the buckets kept from an earlier run and those measured since, the file rewritten
    whole after each bucket that some backend ran in (a table of no ops would not load)."""

    def __init__(
        self,
        path: Path,
        platform: str,
        provenance: Provenance,
        kept: KeptTable | None,
        kernels: Mapping[tuple[str, str], str],
    ) -> None:
        self.path = path
        self.platform = platform
        self.provenance = provenance
        self.kernels = kernels  # the kernel source digests the timings depend on, by op and backend
        self.kept = list(kept.measured) if kept else []
        self.new: list[Measured] = []
        self.saved = 0  # the buckets in the file as last written by this run (0: not written)

    @property
    def measured(self) -> list[Measured]:
        return sorted([*self.kept, *self.new], key=lambda m: m.slot)

    def add(self, bucket: Measured) -> None:
        from ..tuning import table_text

        self.new.append(bucket)
        measured = self.measured
        if any(m.best for m in measured):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            text = table_text(self.platform, self.provenance, measured, written_to=self.path, kernels=self.kernels)
            write_output(self.path, text)
            self.saved = sum(1 for m in measured if m.best)


def run(options: argparse.Namespace) -> int:
    """Time the candidates, writing `<out>/<platform>.yaml` as each bucket finishes; print the choices. With
    --check or --update, check a table instead (and rewrite what flipped)."""
    from .. import timing, tuning

    table_given = options.check or options.update
    if table_given is None and options.out is None:
        raise UsageError("give --out DIR (where to write the table), or --check/--update TABLE")
    if table_given is not None and (options.out is not None or options.resume or options.force):
        raise UsageError("--check and --update work on the TABLE given: no --out, --resume or --force")
    if options.from_trace and options.shape:
        raise UsageError("--from-trace times the shapes the trace ran: no --shape")
    if table_given is not None and (options.from_trace or options.buckets):
        raise UsageError("--check and --update time the TABLE's own buckets: no --from-trace or --buckets")
    if options.rounds < 1:
        raise UsageError("--rounds: at least 1")
    asked = load_ops(options)
    if asked is None:
        return 1
    catalog = asked.catalog
    if table_given is not None:
        return _check(options, table_given, catalog, asked.ops)
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
    command = command_line(options)
    provenance = tuning.provenance(options.device, command, tuning.required(catalog, asked.ops))
    kernels = tuning.kernel_digests(catalog, asked.ops)
    kept = _kept(path, options, str(platform), provenance.device, kernels)
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
            shape=options.shape,
        )
    done = {m.slot for m in kept.measured} if kept else set()
    todo = [job for job in jobs if tuning.bucket_of(job) not in done]
    if kept:
        kept_buckets = plural(len(kept.measured), "bucket")
        print(f"resuming from {path}: {kept_buckets} kept, {len(todo)} of {len(jobs)} jobs to time")
    table = _Table(path, str(platform), provenance, kept, kernels)
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


def _kept(
    path: Path, options: argparse.Namespace, platform: str, device: str, kernels: Mapping[tuple[str, str], str]
) -> KeptTable | None:
    """The table to go on from (--resume), or None; a UsageError where one is there and neither --resume nor
    --force says what to do with it, or it cannot be gone on from (another device, other kernels)."""
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
    changed = sorted({f"{op} [{b}]" for (op, b), d in kept.kernels.items() if kernels.get((op, b), d) != d})
    if changed:
        raise UsageError(
            f"cannot resume from {path}: the kernel source of {', '.join(changed)} changed since it was measured; "
            "--force measures every bucket again"
        )
    return kept


def _check(options: argparse.Namespace, path: Path, catalog: Catalog, asked: list[str]) -> int:
    """`--check TABLE` (exit 1 listing the buckets whose choice flipped, or that could not be checked) and
    `--update TABLE` (then measure those flipped again and rewrite them)."""
    from ...diagnostics import Diagnostics
    from .. import timing, tune_check, tuning
    from ..formats import text_table
    from .common import split_ops

    found = Diagnostics()
    kept = tuning.read_kept(path, found)
    if kept is None:
        for diagnostic in found:
            print(diagnostic, file=sys.stderr)
        raise UsageError(f"cannot check {path}: not a table `kcatalog tune` wrote")
    platform = catalog.platform(options.device)
    if kept.platform != str(platform):
        raise UsageError(f"{path} is for {kept.platform}; --device {options.device} is {platform} here")
    here = platform.environment().device
    if options.update and kept.device != here:
        raise UsageError(f"cannot update {path}: measured on {kept.device}, this is {here}; tune it again with --out")
    ops = asked if split_ops(options.items).ops else None  # the ops asked, else every op of the table
    notes: list[str] = []
    verdicts = tune_check.check(
        catalog, kept, platform, options.device, ops=ops, backends=options.backend, rounds=options.rounds,
        progress=timing.progress_bar, notes=notes,
    )  # fmt: skip
    rows = [["op", "dtype", "T", "bucket", "table's", "runner-up", "table's / runner-up's time, per round", "verdict"]]
    for v in verdicts:
        ratios = f"{min(v.ratios):.3f}..{max(v.ratios):.3f}" if v.ratios else "-"
        verdict = "flipped" if v.flipped else "holds" if v.ratios else v.problem or "nothing to compare"
        low, high = v.span
        span = f"[{low}, {'∞' if high is None else high}]"
        row = [v.bucket.op, v.bucket.dtype, str(v.bucket.tokens), span, v.bucket.choice or "-", v.runner_up or "-"]
        rows.append([*row, ratios, verdict])
    print(f"{path}: measured on {kept.device}; checked on {here} ({platform}), {plural(options.rounds, 'round')} "
          "per bucket, interleaved")  # fmt: skip
    print(text_table(rows))
    for note in notes:
        print(f"note: {note}")
    flipped = [v for v in verdicts if v.flipped]
    failed = [v for v in verdicts if v.problem]
    for v in flipped:
        assert v.runner_up is not None and v.medians_us is not None
        winner = v.bucket.choice or "-"
        print(
            f"flipped: {v.label}: {v.runner_up} {v.medians_us[v.runner_up]:.2f} µs beats {winner} "
            f"{v.medians_us[winner]:.2f} µs in every round ({min(v.ratios):.3f}x to {max(v.ratios):.3f}x)"
        )
    for v in failed:
        print(f"not checked: {v.label}: {v.problem}")
    if options.update:
        return _update(options, path, catalog, kept, verdicts, flipped)
    if flipped or failed:
        what = [plural(len(flipped), "bucket") + " flipped"] if flipped else []
        what += [f"{len(failed)} not checked"] if failed else []
        print(f"{', '.join(what)}; `kcatalog tune --update {path}` measures the flipped ones again")
        return 1
    print("No choice flipped.")
    return 0


def _update(
    options: argparse.Namespace,
    path: Path,
    catalog: Catalog,
    kept: KeptTable,
    verdicts: list[Verdict],
    flipped: list[Verdict],
) -> int:
    """Measure the flipped buckets again (every candidate), bring the digests of the backends timed again in every
    bucket of an op up to date, and rewrite the table if anything changed."""
    from .. import timing, tune_check, tuning

    platform = catalog.platform(options.device)
    again: list[Measured] = []
    for v in flipped:
        notes: list[str] = []
        named = sorted(tune_check.candidates(catalog.info(v.bucket.op), options.backend))
        jobs = tune_check.bucket_jobs(catalog, v.bucket, platform, named, notes)
        measured = tuning.measure(jobs, options.device, progress=timing.progress_bar)
        again += [m for m in measured if m.best is not None]
    ops = sorted({v.bucket.op for v in verdicts})
    now = tuning.kernel_digests(catalog, ops)
    kernels = dict(kept.kernels)
    kernels.update({key: now[key] for key in tune_check.retimed(verdicts, again) if key in now})
    replaced = {m.slot: m for m in again}
    measured = [replaced.get(m.slot, m) for m in kept.measured]
    if not again and kernels == dict(kept.kernels):
        print(f"{path}: nothing to update")
        return 1 if any(v.problem for v in verdicts) else 0
    provenance = tuning.provenance(options.device, command_line(options), tuning.required(catalog, ops))
    write_output(path, tuning.table_text(kept.platform, provenance, measured, written_to=path, kernels=kernels))
    refreshed = sum(1 for key, d in kernels.items() if kept.kernels.get(key) != d)
    print(f"wrote {path}: {plural(len(again), 'bucket')} measured again, {plural(refreshed, 'kernel digest')} updated")
    return 1 if any(v.problem for v in verdicts) else 0
