"""Tuned tables of many buckets: a lookup reads O(log n) buckets, a handle's first call selects once per distinct
choice (not once per bucket), and 30,000 one-token buckets (a 1.4 MB table, within the limits) load and dispatch."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Callable, overload

import pytest
from catalog_builder import Workspace

import kcatalog
from kcatalog.model import Location, TunedBucket
from kcatalog.select.buckets import covering, dispatch_for, segments

MANY = 30_000
HERE = Location("table.yaml", 1, 1)


def _one_token_buckets(n: int, backends: str = "ab") -> list[TunedBucket]:
    return [TunedBucket(t, t, backends[t % len(backends)], {}, HERE) for t in range(1, n + 1)]


class CountingBuckets(Sequence[TunedBucket]):
    """A bucket list that counts how many buckets are read from it."""

    def __init__(self, buckets: list[TunedBucket]) -> None:
        self.buckets = buckets
        self.reads = 0

    def __len__(self) -> int:
        return len(self.buckets)

    @overload
    def __getitem__(self, index: int) -> TunedBucket: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[TunedBucket]: ...
    def __getitem__(self, index: int | slice) -> TunedBucket | Sequence[TunedBucket]:
        found = self.buckets[index]
        self.reads += len(found) if isinstance(found, list) else 1
        return found

    def __iter__(self) -> Iterator[TunedBucket]:
        for bucket in self.buckets:
            self.reads += 1
            yield bucket


def test_a_lookup_reads_a_logarithmic_number_of_buckets() -> None:
    buckets = CountingBuckets(_one_token_buckets(MANY))
    for tokens in (1, 2, MANY // 2, MANY - 1, MANY, MANY + 1, 0):
        buckets.reads = 0
        found = covering(buckets, tokens)
        assert (found.low if found else None) == (tokens if 1 <= tokens <= MANY else None)
        assert buckets.reads <= 2 * MANY.bit_length(), tokens  # a bisect, not a list of every bucket's edge


def test_the_first_call_selects_once_per_distinct_choice() -> None:
    table = _one_token_buckets(MANY)
    plan = [TunedBucket(1, MANY // 2, "a", {}, HERE), TunedBucket(MANY // 2 + 1, None, "c", {}, HERE)]
    asked: list[int] = []
    fns: dict[str, Callable[..., Any]] = {name: (lambda name=name: name) for name in "abc"}

    def resolve(tokens: int) -> Callable[..., Any]:  # the plan's bucket wins where there is one, as picks do
        asked.append(tokens)
        plan_bucket, table_bucket = covering(plan, tokens), covering(table, tokens)
        return fns[(plan_bucket or table_bucket).backend if plan_bucket or table_bucket else "a"]

    cut = segments([table, plan])
    dispatch = dispatch_for(cut, resolve)
    # (none, none) below 1, then (a|b, a), then (a|b, c), then (none, c) above the table: 6 distinct choices.
    assert len(asked) == len(set(cut.choosers)) == 6
    assert len(cut.probes) == MANY + 2
    assert dispatch.edges == (MANY // 2,)  # the plan's 'a' hides the table's alternation below its cut
    assert dispatch.fns == (fns["a"], fns["c"])


@pytest.fixture(scope="module")
def many_buckets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from catalog_builder import workspace_at

    with workspace_at(tmp_path_factory.mktemp("buckets")) as workspace:
        yield _write_many(workspace)


def _write_many(workspace: Workspace) -> Path:
    for name in ("a", "b"):
        workspace.module(f"bucket_{name}", f"def tag(x):\n    return {name!r}\n")
    backends = {name: f"bucket_{name}:tag" for name in ("a", "b")}
    directory = workspace.write({"tag": workspace.op(backends, reference="a")}, backends=["a", "b"])
    rows = "".join(f"        - {{tokens: [{t}, {t}], backend: {'ab'[t % 2]}}}\n" for t in range(1, MANY + 1))
    head = "kcatalog: 1\ntuned:\n  platform: cpu\n  provenance: {device: cpu}\n  ops:\n    g.tag:\n      float32:\n"
    workspace.files({"tuned/cpu.yaml": head + rows})
    return directory


def test_thirty_thousand_buckets_dispatch_on_the_first_call(many_buckets: Path) -> None:
    torch = pytest.importorskip("torch")
    catalog = kcatalog.load_catalog(many_buckets, cache=False)
    handle = catalog.op("g.tag")
    started = time.perf_counter()
    assert handle(torch.zeros(3, 1)) == "b"
    first_call = time.perf_counter() - started
    # Generous: a few tenths of a second here; the quadratic lookup took 12 s (minutes on a loaded machine).
    assert first_call < 5.0
    got = {t: handle(torch.zeros(t, 1)) for t in (1, 2, MANY // 2, MANY - 1, MANY, MANY + 1)}
    assert got == {1: "b", 2: "a", MANY // 2: "a", MANY - 1: "b", MANY: "a", MANY + 1: "a"}  # above: priority
