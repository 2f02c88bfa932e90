"""`kcatalog tune --check TABLE`: whether each bucket's choice still holds on this machine. Each bucket's winner and
runner-up are timed again at the shapes the table recorded, in interleaved rounds (tools/timing.py); the choice has
flipped when the runner-up is faster in every round, the rounds' spread being the measured noise, and by more than
a tie (`TIE`: either choice is right). `--update`
measures the flipped buckets again, every candidate, and rewrites only those (tools/commands/tune.py)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .inputs import describe
from .timing import Job, interleaved, prepare
from .tuning import Bucket, KeptTable, Measured, bucket_edges, bucket_of, tune_jobs

if TYPE_CHECKING:
    from ..model import OpInfo
    from ..platform import Platform
    from ..registry.catalog import Catalog

ROUNDS = 5  # a tie flips in every round once in 2**5 = 32 buckets; a real flip of a few percent flips in all five
# Below this the two are tied, whatever the rounds say: a table of 44 buckets has near-ties (ATen and Triton within
# 1-2% at one bucket), and one of 32 such would flip in all five rounds by chance.
TIE = 0.03


@dataclass(frozen=True)
class Verdict:
    """One bucket of the table checked: its winner against its runner-up, round by round (the winner's time over
    the runner-up's, geometric mean over the bucket's shapes), or why it could not be checked."""

    bucket: Measured  # as the table has it
    span: tuple[int, int | None]  # its token counts, [low, high]
    runner_up: str | None  # None: the table timed no other candidate, so nothing can flip
    ratios: tuple[float, ...] = ()
    medians_us: Mapping[str, float] | None = None  # the two, median over the rounds
    problem: str = ""  # why it was not checked: a backend that cannot run or failed here

    @property
    def flipped(self) -> bool:
        """Whether the runner-up was faster in every round (beyond the noise the rounds measured), by more than a
        tie at the median."""
        return bool(self.ratios) and min(self.ratios) > 1.0 and statistics.median(self.ratios) > 1.0 + TIE

    @property
    def label(self) -> str:
        """'layernorm.rms_norm bfloat16 T∈[513, 8192]' ('moe.experts bfloat16 E=8 T∈[1, 2]' keyed)."""
        low, high = self.span
        key = "".join(f" {n}={v}" for n, v in self.bucket.key)
        return f"{self.bucket.op} {self.bucket.dtype}{key} T∈[{low}, {'∞' if high is None else high}]"


def spans(measured: Sequence[Measured]) -> dict[Bucket, tuple[int, int | None]]:
    """Each bucket's token counts, as table_text cuts them from the token counts measured (per op, dtype, key)."""
    found: dict[Bucket, tuple[int, int | None]] = {}
    for group in dict.fromkeys(m.group for m in measured):
        counts = sorted(m.tokens for m in measured if m.group == group)
        found.update({(*group, t): span for t, span in zip(counts, bucket_edges(counts))})
    return found


def candidates(info: OpInfo, named: Sequence[str]) -> set[str]:
    """The backends a table may choose without being told: `auto` ones, or those `--backend` names."""
    return {name for name, spec in info.backends.items() if (name in named if named else spec.auto)}


def runner_up(bucket: Measured, info: OpInfo, named: Sequence[str]) -> str | None:
    """The fastest candidate the table timed in the bucket other than its choice."""
    others = candidates(info, named) - {bucket.choice}
    timed = [(t, name) for name, t in bucket.medians_us.items() if name in others]
    return min(timed)[1] if timed else None


def bucket_jobs(
    catalog: Catalog, bucket: Measured, platform: Platform, backends: Sequence[str], notes: list[str]
) -> list[Job]:
    """The jobs that time `backends` at the bucket's shapes: those the table recorded where the manifest still
    makes them (from its decode and prefill sizes, or the decode sizes at the bucket's token count), else the
    manifest's shapes at that token count, with a note."""
    jobs: list[Job] = []
    for buckets in (None, [bucket.tokens]):
        made, _ = tune_jobs(catalog, [bucket.op], platform=platform, dtypes=[bucket.dtype], buckets=buckets,
                            backends=backends)  # fmt: skip
        jobs += [job for job in made if bucket_of(job) == bucket.slot]
    unique = {(job.spec.backend, describe(job.sizes)): job for job in jobs}
    recorded = [job for (_, shape), job in unique.items() if shape in bucket.shapes]
    if recorded or not bucket.shapes:
        return recorded
    notes.append(f"{bucket.where}: the shapes recorded are no longer the manifest's")
    return list(unique.values())


def check(
    catalog: Catalog,
    kept: KeptTable,
    platform: Platform,
    device: str,
    *,
    ops: Sequence[str] | None = None,
    backends: Sequence[str] = (),
    rounds: int = ROUNDS,
    progress: Callable[[int, int, str], None] | None = None,
    notes: list[str] | None = None,
) -> list[Verdict]:
    """Every bucket of the table (of `ops`, if given), its winner and runner-up timed again in `rounds`
    interleaved rounds on `device`."""
    notes = [] if notes is None else notes
    cut = spans(kept.measured)
    wanted = [m for m in kept.measured if ops is None or m.op in ops]
    verdicts = []
    for index, bucket in enumerate(wanted):
        if progress:
            progress(index, len(wanted), bucket.where)
        span = cut[bucket.slot]
        verdicts.append(_check_bucket(catalog, bucket, span, platform, device, backends, rounds, notes))
    if progress:
        progress(len(wanted), len(wanted), "done")
    return verdicts


def _check_bucket(
    catalog: Catalog,
    bucket: Measured,
    span: tuple[int, int | None],
    platform: Platform,
    device: str,
    backends: Sequence[str],
    rounds: int,
    notes: list[str],
) -> Verdict:
    if bucket.op not in catalog:
        return Verdict(bucket, span, None, problem=f"the catalog has no op '{bucket.op}'")
    winner = bucket.choice
    second = runner_up(bucket, catalog.info(bucket.op), backends)
    if winner is None or second is None:
        return Verdict(bucket, span, None)
    why: list[str] = []
    jobs = bucket_jobs(catalog, bucket, platform, [winner, second], why)
    notes += why
    by_backend = {name: [job for job in jobs if job.spec.backend == name] for name in (winner, second)}
    for name, mine in by_backend.items():
        if not mine:
            return Verdict(bucket, span, second, problem=f"{name} cannot run here ({platform} {bucket.dtype})")
    timers = []
    for name in (winner, second):
        for job in by_backend[name]:
            try:
                timers.append(prepare(job, device).seconds)
            except Exception as exc:  # a backend that fails here is a finding, not the end of the check
                return Verdict(bucket, span, second, problem=f"{name} failed: {type(exc).__name__}: {exc}")
    times = interleaved(timers, rounds)
    shapes = len(by_backend[winner])
    per_round = {
        name: [statistics.geometric_mean(column) for column in zip(*rows)]
        for name, rows in ((winner, times[:shapes]), (second, times[shapes:]))
    }
    ratios = tuple(w / r for w, r in zip(per_round[winner], per_round[second]))
    medians = {name: statistics.median(values) * 1e6 for name, values in per_round.items()}
    return Verdict(bucket, span, second, ratios, medians)


def retimed(verdicts: Sequence[Verdict], measured_again: Sequence[Measured]) -> set[tuple[str, str]]:
    """The (op, backend) pairs timed again in every bucket of the op's entries: as winner or runner-up of a bucket
    that was checked, or among the candidates of a bucket measured again whole. Their recorded kernel digests can
    be brought up to date; another backend's keeps what was measured."""
    again = {m.slot: set(m.medians_us) for m in measured_again}
    per_op: dict[str, set[str]] = {}
    for verdict in verdicts:
        b = verdict.bucket
        timed = again.get(b.slot)
        if timed is None:
            timed = {n for n in (b.choice, verdict.runner_up) if n is not None} if verdict.ratios else set()
        per_op[b.op] = per_op[b.op] & timed if b.op in per_op else set(timed)
    return {(op, name) for op, names in per_op.items() for name in names}
