"""Plans: the fully resolved selection of every op on one platform, written as a lock file and compared with
what this machine would choose (`kcatalog plan`, `kcatalog plan --check`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import CatalogError
from ..model import LockedPlan, TableKeyValues, TunedBucket, key_text
from ..platform import Platform
from ..select.buckets import segments
from ..write.yaml_text import Flow, Rows
from .room import Runtime

# One op and dtype (or key): a backend for every call, or (low, high, backend) per bucket of token counts.
Plain = str | tuple[tuple[int, int | None, str], ...]


@dataclass(frozen=True)
class Keyed:
    """An op keyed by its shape (`table_key`), for one dtype: its key's size names, and a choice per key that a
    tuned table or the loaded plan has (a call of another key is left to priority)."""

    names: tuple[str, ...]
    choices: tuple[tuple[TableKeyValues, Plain], ...]


Choice = Plain | Keyed


@dataclass(frozen=True)
class ResolvedPlan:
    """What this machine chooses for every op and dtype on a platform, and what it could not plan."""

    platform: str
    digest: str
    choices: Mapping[str, Mapping[str, Choice]]
    notes: tuple[str, ...]


def resolve_plan(
    runtime: Runtime, platform: Platform, dtypes: Sequence[str] = (), *, here: bool = True
) -> ResolvedPlan:
    """Resolve every op for each dtype, per bucket where a tuned table or the loaded plan has buckets. `here`:
    the platform is this machine's, so each chosen backend is imported and a failed import shows as its
    fallback; for another platform nothing is imported (what fails to import here says nothing about there)."""
    choices: dict[str, dict[str, Choice]] = {}
    notes: list[str] = []
    if not here:
        notes.append(f"planned for {platform} on another machine: no backend was imported and every `requires` was "
                     f"taken as installed there, so a backend whose import fails there falls back at run time "
                     f"(`kcatalog plan --check` there tells)")  # fmt: skip
    for op in runtime.value.ops():
        info = runtime.value.info(op)
        if info.dtypes is None:  # a plan's entries are per dtype; an op that takes any dtype is left to priority
            notes.append(f"{op}: declares no dtypes; left out")
            continue
        for dtype in [d for d in info.dtypes if not dtypes or d in dtypes]:
            choice = _choice(runtime, op, platform, dtype, here)
            if choice is None:
                notes.append(f"{op} {dtype}: nothing eligible on {platform}; left out")
            else:
                choices.setdefault(op, {})[dtype] = choice
    return ResolvedPlan(str(platform), runtime.value.digest, choices, tuple(notes))


def _choice(runtime: Runtime, op: str, platform: Platform, dtype: str, here: bool) -> Choice | None:
    info = runtime.value.info(op)
    keys = runtime.value.tuning.keys(op, platform, dtype) if info.table_key else ()
    if not any(keys):
        return _plain(runtime, op, platform, dtype, here, ())
    choices = []
    for key in keys:
        choice = _plain(runtime, op, platform, dtype, here, key)
        if choice is None:
            return None
        choices.append((key, choice))
    return Keyed(info.key_names, tuple(choices))


def _plain(runtime: Runtime, op: str, platform: Platform, dtype: str, here: bool, key: TableKeyValues) -> Plain | None:
    lists = runtime.value.tuning.bucket_lists(op, platform, dtype, key)
    if not lists:
        return _backend(runtime, op, platform, dtype, None, here, key)
    cut = segments(lists)
    rows: list[tuple[int, int | None, str]] = []
    for index, probe in enumerate(cut.probes):
        low = cut.edges[index - 1] + 1 if index else 0
        high = cut.edges[index] if index < len(cut.edges) else None
        if high is not None and high < 1:
            continue  # no call has fewer than one token in the leading dimension
        backend = _backend(runtime, op, platform, dtype, probe, here, key)
        if backend is None:
            return None
        if rows and rows[-1][2] == backend:
            rows[-1] = (rows[-1][0], high, backend)
        else:
            rows.append((max(low, 1), high, backend))
    return rows[0][2] if len(rows) == 1 else tuple(rows)


def _backend(
    runtime: Runtime, op: str, platform: Platform, dtype: str, tokens: int | None, here: bool, key: TableKeyValues
) -> str | None:
    keyed = key or None
    try:
        if here:  # imported: a fallback shows
            return runtime.resolve_spec(op, platform, dtype, tokens=tokens, key=keyed).backend
        return runtime.select(op, platform, dtype, tokens=tokens, key=keyed, packages_here=False).backend
    except CatalogError:
        return None


def plan_text(plan: ResolvedPlan, command: str, *, comments: Sequence[str] = ()) -> str:
    """The plan as YAML, for load_catalog(plan=...) and `kcatalog plan --check`; `comments` go first (the line
    naming its schema)."""
    from .._version import version
    from ..write.yaml_text import document

    body = {
        "platform": plan.platform,
        "digest": plan.digest,
        "kcatalog": version(),
        "command": command,
        "ops": {op: {dtype: _choice_data(choice) for dtype, choice in by.items()} for op, by in plan.choices.items()},
    }
    written = "Written by `kcatalog plan`: load_catalog(plan=...) pins it; `kcatalog plan --check` compares it."
    return document({"kcatalog": 1, "plan": body}, comments=[*comments, written])


def _choice_data(choice: Choice) -> object:
    if isinstance(choice, Keyed):
        rows = []
        for key, plain in choice.choices:
            given = "backend" if isinstance(plain, str) else "buckets"
            rows.append(Flow({"key": dict(zip(choice.names, key)), given: _choice_data(plain)}))
        return Rows(rows)
    if isinstance(choice, str):
        return choice
    return [Flow({"tokens": [low, high], "backend": backend}) for low, high, backend in choice]


def locked_choices(plan: LockedPlan) -> dict[str, dict[str, Choice]]:
    """A loaded plan's entries in the form resolve_plan gives, to compare the two."""
    choices: dict[str, dict[str, Choice]] = {}
    keyed: dict[tuple[str, str], list[tuple[TableKeyValues, Plain]]] = {}
    names: dict[tuple[str, str], tuple[str, ...]] = {}
    for (op, dtype, key), entry in plan.entries.items():
        choice: Plain = entry.backend if entry.backend is not None else _rows(entry.buckets)
        if key:
            keyed.setdefault((op, dtype), []).append((key, choice))
            names[(op, dtype)] = entry.key_names
        else:
            choices.setdefault(op, {})[dtype] = choice
    for (op, dtype), found in keyed.items():
        choices.setdefault(op, {})[dtype] = Keyed(names[(op, dtype)], tuple(sorted(found)))
    return choices


def _rows(buckets: Sequence[TunedBucket]) -> tuple[tuple[int, int | None, str], ...]:
    return tuple((b.low, b.high, b.backend) for b in buckets)


def differences(locked: Mapping[str, Mapping[str, Choice]], here: ResolvedPlan) -> list[str]:
    """One line per op and dtype where this machine would choose other than the plan says."""
    lines = []
    for op in sorted(set(locked) | set(here.choices)):
        pinned, chosen = locked.get(op, {}), here.choices.get(op, {})
        for dtype in sorted(set(pinned) | set(chosen)):
            a, b = pinned.get(dtype), chosen.get(dtype)
            if a != b:
                lines.append(f"{op} {dtype}: plan has {_shown(a)}, this machine chooses {_shown(b)} on {here.platform}")
    return lines


def _shown(choice: Choice | None) -> str:
    if choice is None:
        return "nothing"
    if isinstance(choice, Keyed):
        return "; ".join(f"{key_text(choice.names, key)}: {_shown(plain)}" for key, plain in choice.choices)
    if isinstance(choice, str):
        return choice
    return ", ".join(f"{b} for T∈[{low}, {'∞' if high is None else high}]" for low, high, b in choice)
