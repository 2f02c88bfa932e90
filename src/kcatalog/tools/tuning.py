"""`kcatalog tune`: time every eligible backend per token-count bucket and write the tuned selection table."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .inputs import samples_of, size_sets, with_samples
from .timing import BenchResult, Job, runnable_here, time_job

if TYPE_CHECKING:
    from ..diagnostics import Diagnostics
    from ..model import OpInfo
    from ..platform import Platform
    from ..registry.catalog import Catalog
    from ..validate.tables import BucketDecl, KeyedBucketsDecl
    from ..write.yaml_text import Rows

DECODE_MAX = 512  # token counts up to this are launch-bound: timed as CUDA-graph replays, like `bench --shapes decode`


@dataclass(frozen=True)
class Measured:
    """One bucket's measurements: the token count, the shapes timed there, each backend's median (geometric mean
    over those shapes, microseconds), and the errors of backends that failed."""

    op: str
    dtype: str
    tokens: int
    shapes: tuple[str, ...]
    medians_us: dict[str, float]
    errors: dict[str, str]
    chosen: str | None = None  # read back from a table: the backend it chose (by hand, it may not be the fastest)
    # For an op keyed by its shape (`table_key`): its key's sizes as measured, (name, value) in the op's key order.
    key: tuple[tuple[str, int], ...] = ()

    @property
    def group(self) -> tuple[str, str, tuple[tuple[str, int], ...]]:
        """(op, dtype, key): the buckets cut together into one entry of the table."""
        return self.op, self.dtype, self.key

    @property
    def slot(self) -> Bucket:
        """(op, dtype, key, token count): what one row of a table holds."""
        return self.op, self.dtype, self.key, self.tokens

    @property
    def where(self) -> str:
        """'g.op float32 E=8 T=16', as progress and notes name the bucket."""
        return " ".join([self.op, self.dtype, *(f"{n}={v}" for n, v in self.key), f"T={self.tokens}"])

    @property
    def best(self) -> str | None:
        """The fastest backend here, or None when none ran."""
        return min(self.medians_us, key=self.medians_us.__getitem__) if self.medians_us else None

    @property
    def choice(self) -> str | None:
        """The backend the bucket chooses: the one its table chose, else the fastest."""
        return self.chosen or self.best


def leading_size(info: OpInfo) -> str | None:
    """The size name of the dispatch argument's leading dimension in the op's samples ('T'), if it is one name."""
    samples = samples_of(info)
    if samples is None:
        return None
    spec = samples.args.get(info.dispatch.name)
    shape = getattr(spec, "shape", None)
    first = shape[0] if shape else None
    return first if isinstance(first, str) and first.isidentifier() and first in samples.sizes else None


def tune_jobs(
    catalog: Catalog,
    ops: Sequence[str],
    *,
    platform: Platform,
    dtypes: Sequence[str],
    buckets: Sequence[int] | None = None,
    backends: Sequence[str] = (),
    shape: Mapping[str, int] | None = None,
) -> tuple[list[Job], list[str]]:
    """Every (op, backend, dtype, shape) to time: the manifest's decode and prefill sizes, or with `buckets`
    the decode sizes with the leading dimension set to each bucket's token count; `shape` (`--shape E=8,H=64`)
    sets those sizes wherever an op's samples have them: for an op keyed by its shape, the key measured."""
    jobs: list[Job] = []
    notes: list[str] = []
    for info, samples in with_samples(catalog, ops, "tune", notes):
        name = leading_size(info)
        if name is None:
            notes.append(f"{info.id}: skipped, its dispatch argument's leading dimension is not a size name")
            continue
        fixed = {name: (value,) for name, value in (shape or {}).items()}
        size_list = [(kind, sizes) for kind in ("decode", "prefill") for sizes in size_sets(samples, kind, fixed)]
        if buckets is not None:
            decode = size_sets(samples, "decode", fixed)
            seen: list[dict[str, Any]] = []
            for tokens in buckets:
                for sizes in decode:
                    candidate = {**sizes, name: tokens}
                    if candidate not in seen:
                        seen.append(candidate)
            size_list = [("decode" if s[name] <= DECODE_MAX else "prefill", s) for s in seen]
        for dtype in [d for d in dtypes if d in (info.dtypes or ())]:  # samples need declared dtypes
            wanted = []
            for spec in info.backends.values():
                if backends and spec.backend not in backends:
                    continue
                if not backends and not spec.auto:  # a table would choose it with no one asking for it
                    notes.append(f"{info.id} [{spec.backend}]: not a candidate, auto: false (name it with --backend)")
                    continue
                wanted.append(spec)
            runnable = runnable_here(wanted, platform, dtype, notes, "not a candidate")
            jobs += [Job(info, spec, dtype, kind, sizes) for kind, sizes in size_list for spec in runnable]
    return jobs, notes


def tokens_of(job: Job) -> int:
    """The leading dimension of the job's dispatch argument, as a call would have it."""
    name = leading_size(job.info)
    assert name is not None  # tune_jobs makes jobs only for such ops
    return int(job.sizes[name])


def key_of(job: Job) -> tuple[tuple[str, int], ...]:
    """The job's table key, for an op keyed by its shape: each size of its `table_key` as the job sets it (a name
    of its samples' shapes, which `sizes` defines); () for an op without one."""
    return tuple((dim.name, int(job.sizes[dim.name])) for dim in job.info.table_key)


Bucket = tuple[str, str, tuple[tuple[str, int], ...], int]  # op, dtype, key, token count: one row of a table


def bucket_of(job: Job) -> Bucket:
    """The bucket a job's timing goes into."""
    return job.info.id, job.dtype, key_of(job), tokens_of(job)


def measure(
    jobs: Sequence[Job],
    device: str,
    *,
    progress: Callable[[int, int, str], None] | None = None,
    timer: Callable[[Job], BenchResult] | None = None,
    finished: Callable[[Measured], None] | None = None,
) -> list[Measured]:
    """Time every job, a bucket's jobs one after another, then gather them by op, dtype and token count;
    `finished` gets each bucket as its last job is timed (so that an interruption loses only the bucket under way)."""
    first: dict[Bucket, int] = {}
    for index, job in enumerate(jobs):
        first.setdefault(bucket_of(job), index)
    ordered = sorted(jobs, key=lambda job: first[bucket_of(job)])  # stable: the bucket's own order is kept
    left = collections.Counter(bucket_of(job) for job in jobs)
    results: list[tuple[Job, BenchResult]] = []
    for index, job in enumerate(ordered):
        if progress:
            progress(index, len(ordered), f"{job.info.id} [{job.spec.backend}] {job.dtype} {job.sizes}")
        results.append((job, timer(job) if timer else time_job(job, device, 0.0, 0)))
        key = bucket_of(job)
        left[key] -= 1
        if finished and not left[key]:
            finished(gather([row for row in results if bucket_of(row[0]) == key])[0])
    if progress:
        progress(len(ordered), len(ordered), "done")
    return gather(results)


def gather(results: Sequence[tuple[Job, BenchResult]]) -> list[Measured]:
    """Per (op, dtype, key, token count): each backend's geometric mean over the shapes where it ran at all of
    them."""
    groups: dict[Bucket, list[tuple[Job, BenchResult]]] = {}
    for job, result in results:
        groups.setdefault(bucket_of(job), []).append((job, result))
    measured = []
    for (op, dtype, key, tokens), rows in sorted(groups.items()):
        shapes = tuple(dict.fromkeys(r.sizes for _, r in rows))
        times: dict[str, list[float]] = {}
        errors: dict[str, str] = {}
        for job, result in rows:
            if result.time_us is None:
                errors[job.spec.backend] = result.error
            else:
                times.setdefault(job.spec.backend, []).append(result.time_us)
        medians = {
            backend: statistics.geometric_mean(values)
            for backend, values in times.items()
            if backend not in errors and len(values) == len(shapes)
        }
        measured.append(Measured(op, dtype, tokens, shapes, medians, errors, key=key))
    return measured


def bucket_edges(token_counts: Sequence[int]) -> list[tuple[int, int | None]]:
    """Buckets around the measured token counts, cut at their geometric midpoints: [1, ...] up to no bound."""
    counts = sorted(set(token_counts))
    edges = [math.isqrt(a * b) for a, b in zip(counts, counts[1:])]
    lows = [1, *(edge + 1 for edge in edges)]
    highs: list[int | None] = [*edges, None]
    return list(zip(lows, highs))


@dataclass(frozen=True)
class Provenance:
    """Where a table was measured."""

    device: str
    capability: str | None
    sms: int | None  # the GPU's streaming multiprocessors (compute units on ROCm)
    driver: str | None
    torch: str | None
    triton: str | None
    packages: dict[str, str]  # the versions of the other distributions the timed backends require
    kcatalog: str
    date: str
    command: str


def provenance(device: str, command: str, packages: Sequence[str] = ()) -> Provenance:
    """This machine's GPU (name, architecture, multiprocessors), driver and library versions, now; `packages`: the
    distributions the timed backends require (torch and triton are recorded anyway)."""
    import torch

    from .._version import version as kcatalog_version
    from ..platform import Platform

    capability, driver = None, None
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        capability = f"{major}.{minor}"
        driver = _driver()
    # What a load compares a table with where it runs (select/staleness.py), detected the same way.
    here = Platform("cuda" if device == "cuda" else "cpu").environment(["triton", *packages])
    others = {name: version for name in sorted(set(packages) - {"torch", "triton"}) if (version := here.versions[name])}
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    return Provenance(
        here.device,
        capability,
        here.sms,
        driver,
        torch.__version__,
        here.versions["triton"],
        others,
        kcatalog_version(),
        now,
        command,
    )


def required(catalog: Catalog, ops: Sequence[str]) -> list[str]:
    """Every distribution the backends of these ops require, sorted."""
    return sorted({name for op in ops for spec in catalog.specs(op) for name in spec.requires})


def kernel_digests(catalog: Catalog, ops: Sequence[str]) -> dict[tuple[str, str], str]:
    """The kernel source digest of every backend of these ops, by (op, backend), where it has source here."""
    from ..pyresolve import kernel_sources

    specs = [spec for op in dict.fromkeys(ops) if op in catalog for spec in catalog.specs(op)]
    found = kernel_sources(dict.fromkeys(str(spec.target) for spec in specs))
    by_target = {source.target: source.digest for source in found}
    return {(spec.op, spec.backend): d for spec in specs if (d := by_target[str(spec.target)]) is not None}


def _driver() -> str | None:
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def table_text(
    platform: str,
    prov: Provenance,
    measured: Sequence[Measured],
    *,
    written_to: Path | None = None,
    kernels: Mapping[tuple[str, str], str] | None = None,
) -> str:
    """The tuned table as YAML (a catalog file: tuned/*.yaml), one flow mapping per bucket, naming its schema as
    seen from `written_to`; `measured` must hold a bucket where some backend ran (a table lists at least one op).
    `kernels` (by op and backend) are the source digests recorded for each op's timed backends."""
    from ..write.yaml_text import Flow, Rows, document
    from .schema_refs import schema_comment

    by_op: dict[str, dict[str, list[Measured]]] = {}
    for m in measured:
        if m.choice is not None:
            by_op.setdefault(m.op, {}).setdefault(m.dtype, []).append(m)
    keyed = {m.op for m in measured if m.key}
    recorded = {
        op: Flow({b: kernels[(op, b)] for b in sorted(_timed(by_dtype.values())) if (op, b) in kernels})
        for op, by_dtype in by_op.items()
    } if kernels else {}  # fmt: skip
    ops: dict[str, dict[str, Rows]] = {}
    for op, by_dtype in by_op.items():
        for dtype, rows in by_dtype.items():
            if op not in keyed:
                ops.setdefault(op, {})[dtype] = _bucket_rows(rows)
                continue
            by_key: dict[tuple[tuple[str, int], ...], list[Measured]] = {}
            for m in rows:
                by_key.setdefault(m.key, []).append(m)
            ops.setdefault(op, {})[dtype] = Rows(
                [{"key": Flow(dict(key)), "buckets": _bucket_rows(group)} for key, group in sorted(by_key.items())]
            )
    provenance = {key: value for key, value in dataclasses.asdict(prov).items() if value not in (None, {})}
    comments = [
        schema_comment("tuned.v1.json", written_to),
        "Written by `kcatalog tune`: the fastest backend per token-count bucket, with every candidate's median;",
        "kernels: each timed backend's kernel source digest, which a load compares with the source.",
    ]
    body: dict[str, Any] = {"platform": platform, "provenance": provenance}
    if any(recorded.values()):
        body["kernels"] = {op: digests for op, digests in recorded.items() if digests}
    body["ops"] = ops
    return document({"kcatalog": 1, "tuned": body}, comments=comments)


def _bucket_rows(rows: Sequence[Measured]) -> Rows:
    """One entry's buckets, one flow mapping a line, cut around the token counts measured."""
    from ..write.yaml_text import Flow, Rows

    ordered = sorted(rows, key=lambda r: r.tokens)
    return Rows(
        [
            Flow(
                {
                    "tokens": [low, high],
                    "backend": m.choice,
                    "at": m.tokens,
                    # Two decimals, as timings are read; a median below 0.005 us kept whole (a table's are > 0).
                    "medians_us": {b: float(f"{t:.2f}") or t for b, t in sorted(m.medians_us.items(), key=_time)},
                    "shapes": list(m.shapes),
                }
            )
            for (low, high), m in zip(bucket_edges([r.tokens for r in ordered]), ordered)
        ]
    )


def _time(item: tuple[str, float]) -> float:
    return item[1]


def _timed(groups: Iterable[Sequence[Measured]]) -> set[str]:
    """Every backend chosen or timed in these buckets."""
    return {name for rows in groups for m in rows for name in (*m.medians_us, *filter(None, [m.choice]))}


@dataclass(frozen=True)
class KeptTable:
    """A table an earlier `kcatalog tune` wrote, read back to go on from it: its platform, the device it was
    measured on and its buckets (the medians it recorded; failures were not recorded, so they are timed again)."""

    platform: str
    device: str
    measured: tuple[Measured, ...]
    kernels: Mapping[tuple[str, str], str] = dataclasses.field(default_factory=dict)  # as recorded, by op and backend


def read_kept(path: Path, diagnostics: Diagnostics) -> KeptTable | None:
    """The table at `path`; None, with what is wrong in `diagnostics`, when it is not a table tune wrote."""
    from .. import codes
    from ..read.files import CatalogFile, read_sources
    from ..validate.tables import TunedTable
    from ..validate.validator import validate_sources

    start = len(diagnostics)
    sources = read_sources([CatalogFile(path.resolve(), is_settings=False)], diagnostics)
    files = validate_sources(sources, diagnostics).files
    if diagnostics.errors_since(start) or not files:
        return None
    table = files[0].model
    if not isinstance(table, TunedTable):
        where = files[0].locations.value(())
        diagnostics.error(codes.MISSING_FIELD, "missing required field 'tuned': not a tuned table", where)
        return None
    measured = []
    for op, by_dtype in table.tuned.ops.items():
        for dtype, listed in by_dtype.items():
            for below, key, buckets in _kept_entries(listed):
                for index, bucket in enumerate(buckets):
                    if bucket.at is None:  # without the token count measured, it cannot be told from a new one
                        where = files[0].locations.value(("tuned", "ops", op, dtype, *below, index))
                        message = (
                            "missing field 'at': the bucket records no token count (not written by `kcatalog tune`)"
                        )
                        diagnostics.error(codes.MISSING_FIELD, message, where)
                        continue
                    medians = dict(bucket.medians_us)
                    row = Measured(op, dtype, bucket.at, bucket.shapes, medians, {}, bucket.backend, key=key)
                    measured.append(row)
    if diagnostics.errors_since(start):
        return None
    kernels = {(op, b): d for op, digests in table.tuned.kernels.items() for b, d in digests.items()}
    return KeptTable(table.tuned.platform, table.tuned.provenance.device, tuple(measured), kernels)


def _kept_entries(
    listed: tuple[BucketDecl, ...] | tuple[KeyedBucketsDecl, ...],
) -> list[tuple[tuple[int | str, ...], tuple[tuple[str, int], ...], tuple[BucketDecl, ...]]]:
    """(path below the dtype, key, buckets) of each entry of a dtype read back: its buckets, or one per key (in
    the order the key's sizes are written, which is the op's: tune writes them so)."""
    from ..validate.tables import BucketDecl, KeyedBucketsDecl

    entries: list[tuple[tuple[int | str, ...], tuple[tuple[str, int], ...], tuple[BucketDecl, ...]]] = []
    for index, item in enumerate(listed):
        if isinstance(item, KeyedBucketsDecl):
            entries.append(((index, "buckets"), tuple(item.key.items()), item.buckets))
    plain = tuple(item for item in listed if isinstance(item, BucketDecl))
    return entries if entries else [((), (), plain)]


def format_table(measured: Sequence[Measured]) -> str:
    """Op, dtype, key (for ops keyed by their shape), token count, the chosen backend and each candidate's median."""
    from .formats import text_table

    keyed = any(m.key for m in measured)
    rows = [["op", "dtype", *(["key"] if keyed else []), "T", "chosen", "medians (us)"]]
    for m in measured:
        medians = ", ".join(f"{b} {t:.1f}" for b, t in sorted(m.medians_us.items(), key=lambda kv: kv[1]))
        errors = "".join(f"; {b} failed: {e}" for b, e in m.errors.items())
        key = [" ".join(f"{n}={v}" for n, v in m.key) or "-"] if keyed else []
        rows.append([m.op, m.dtype, *key, str(m.tokens), m.choice or "-", medians + errors])
    return text_table(rows)
