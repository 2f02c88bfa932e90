"""Concurrency and import faults: loads and first calls racing in 16 threads agree; a backend module that raises
on import (at once, half-way, or only the first time) falls back the same way for every caller, is recorded in
the selection's reasons, and leaves no half-initialised module in sys.modules."""

from __future__ import annotations

import gc
import logging
import random
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import kcatalog
from kcatalog import KernelImportError, NoEligibleBackendError, Rejected, RejectKind

if TYPE_CHECKING:
    from catalog_builder import Workspace

THREADS = 16
FAILURE = "RuntimeError: boom: libkernel.so not found"
IMPORT_LOG = "kc_hard_log"  # a module whose `imports` list the kernel modules below append their name to

GOOD = f"""
import {IMPORT_LOG}
{IMPORT_LOG}.imports.append(__name__)


def kernel(*args, **kwargs):
    return "good"
"""
# Broken modules: the static target check at load passes (they define `kernel`), the import fails.
BROKEN = {
    "at-once": f"""
import {IMPORT_LOG}
{IMPORT_LOG}.imports.append(__name__)
raise RuntimeError("boom: libkernel.so not found")


def kernel(*args, **kwargs):
    return "broken"
""",
    "half-way": f"""
import {IMPORT_LOG}
{IMPORT_LOG}.imports.append(__name__)


def kernel(*args, **kwargs):
    return "broken"


TABLE = {{"block": 128}}
raise RuntimeError("boom: libkernel.so not found")
""",
}


def race(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Each call in its own thread, all released at once; their results in order, or the first exception."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        barrier.wait(30)
        try:
            results[index] = calls[index]()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def imports(workspace: Workspace) -> list[str]:
    """The import log: every kernel module written by these tests appends its name on each import."""
    workspace.module(IMPORT_LOG, "imports = []\n")
    __import__(IMPORT_LOG)
    return sys.modules[IMPORT_LOG].imports  # type: ignore[no-any-return]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kcatalog" and r.levelno == logging.WARNING]


# -- (a) racing loads and first calls ---------------------------------------------------------------------------


def _summary(catalog: kcatalog.Catalog) -> tuple[object, ...]:
    specs = [(s.op, s.backend, s.target, s.location, s.capabilities, s.dtypes) for s in catalog.specs()]
    return catalog.ops(), specs, catalog.backends, [str(w) for w in catalog.warnings]


def test_loads_of_the_shipped_catalog_racing_in_16_threads_agree() -> None:
    expected = _summary(kcatalog.load_catalog())
    catalogs = race([kcatalog.load_catalog] * THREADS)
    assert len({id(catalog) for catalog in catalogs}) == THREADS
    assert [_summary(catalog) for catalog in catalogs] == [expected] * THREADS
    assert gc.isenabled()  # each load pauses the cyclic collector; overlapping loads must not leave it off


def test_first_calls_of_kernels_and_handles_racing_in_16_threads_agree(
    workspace: Workspace, imports: list[str]
) -> None:
    torch = pytest.importorskip("torch")
    names = [workspace.module(f"kc_hard_op{i}", GOOD.replace('"good"', f'"op{i}"')) for i in range(4)]
    ops = {f"op{i}": workspace.op({"only": f"{name}:kernel"}) for i, name in enumerate(names)}
    catalog = kcatalog.load_catalog([workspace.write(ops, backends=["only"])])
    handles = {op: catalog.op(f"g.{op}") for op in ops}  # shared: their first calls race too
    x = torch.zeros(2)

    def first_calls(seed: int) -> dict[str, tuple[Any, Any]]:
        order = random.Random(seed).sample(sorted(ops), len(ops))  # each thread takes the ops in its own order
        return {op: (catalog.kernel(f"g.{op}"), handles[op](x)) for op in order}

    results = race([lambda seed=seed: first_calls(seed) for seed in range(THREADS)])
    kernels = {op: catalog.info(f"g.{op}").backends["only"].load() for op in ops}
    assert results == [{op: (kernels[op], op) for op in ops}] * THREADS
    assert sorted(imports) == names  # each kernel module imported exactly once


# -- (b), (c) a backend whose import raises -----------------------------------------------------------------------


@pytest.fixture(params=["at-once", "half-way", "half-way-in-a-package"])
def broken(request: pytest.FixtureRequest, workspace: Workspace, imports: list[str]) -> tuple[Path, str]:
    """A catalog where g.op's first-ranked backend 'broken' raises on import, and 'good' works; and the broken
    module's name."""
    if request.param == "half-way-in-a-package":
        workspace.package("kc_hard_pkg", {"__init__": "", "broken": BROKEN["half-way"]})
        name = "kc_hard_pkg.broken"
    else:
        name = workspace.module("kc_hard_broken", BROKEN[request.param])
    workspace.module("kc_hard_good", GOOD)
    op = workspace.op({"broken": f"{name}:kernel", "good": "kc_hard_good:kernel"}, reference="good")
    return workspace.write({"op": op}, backends=["broken", "good"]), name


def _assert_not_left_behind(name: str) -> None:
    """importlib drops a module whose import raised; its package gets no attribute for it either."""
    assert name not in sys.modules
    parent, _, child = name.rpartition(".")
    if parent:
        assert not hasattr(sys.modules[parent], child)


@pytest.mark.parametrize("via", ["kernel", "handle"])
def test_racing_first_calls_fall_back_past_a_broken_import_alike(
    via: str, broken: tuple[Path, str], imports: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    torch = pytest.importorskip("torch")
    directory, name = broken
    catalog = kcatalog.load_catalog([directory])
    handle, x = catalog.op("g.op"), torch.zeros(2)
    call = (lambda: catalog.kernel("g.op")()) if via == "kernel" else (lambda: handle(x))
    assert race([call] * THREADS) == ["good"] * THREADS
    selection = catalog.select("g.op", "cpu")
    assert selection.chosen is not None and selection.chosen.backend == "good"
    assert selection.rejected == (
        Rejected("broken", f"import failed on first use: {FAILURE}", RejectKind.IMPORT_FAILED),
    )
    _assert_not_left_behind(name)
    # Threads already waiting on the broken kernel's lock retry its import: 1 to THREADS attempts.
    assert 1 <= imports.count(name) <= THREADS and imports.count("kc_hard_good") == 1
    assert set(_warnings(caplog)) == {
        f"backend 'broken' of op 'g.op' failed to import ({FAILURE.partition(': ')[2]}); "
        "falling back to the next eligible backend"
    }


SLOW_TO_FAIL = f"""
import time
import {IMPORT_LOG}
{IMPORT_LOG}.imports.append(__name__)
time.sleep(0.05)  # long enough for every racing caller to queue on the kernel's lock
raise RuntimeError("boom: libkernel.so not found")


def kernel(*args, **kwargs):
    return "broken"
"""


def test_racing_first_calls_run_a_failing_import_once(workspace: Workspace, imports: list[str]) -> None:
    name = workspace.module("kc_hard_slow_broken", SLOW_TO_FAIL)
    workspace.module("kc_hard_good", GOOD)
    op = workspace.op({"broken": f"{name}:kernel", "good": "kc_hard_good:kernel"}, reference="good")
    catalog = kcatalog.load_catalog([workspace.write({"op": op}, backends=["broken", "good"])])
    catalog.platform()  # detected before the race, which is about the kernel's import
    assert race([lambda: catalog.kernel("g.op")()] * THREADS) == ["good"] * THREADS
    assert imports.count(name) == 1


def test_racing_first_calls_of_a_strict_catalog_all_raise(broken: tuple[Path, str]) -> None:
    directory, name = broken
    catalog = kcatalog.load_catalog([directory], strict=True)

    def first_call() -> str:
        with pytest.raises(KernelImportError) as info:
            catalog.kernel("g.op")
        return str(info.value)

    assert (
        race([first_call] * THREADS)
        == [f"cannot load backend 'broken' of op 'g.op' from '{name}:kernel': {FAILURE}"] * THREADS
    )
    _assert_not_left_behind(name)
    assert catalog.select("g.op", "cpu").chosen.backend == "broken"  # type: ignore[union-attr]  # not recorded


# -- (d) a backend whose import fails the first time only ---------------------------------------------------------

FLAKY = f"""
import os
import {IMPORT_LOG}
{IMPORT_LOG}.imports.append(__name__)
if not os.path.exists(FLAG):
    raise RuntimeError("boom: the flag file is missing")


def kernel(*args, **kwargs):
    return "flaky"
"""
FLAKY_FAILURE = "RuntimeError: boom: the flag file is missing"


@pytest.fixture
def flaky(workspace: Workspace, imports: list[str], tmp_path: Path) -> tuple[Path, Path]:
    """A catalog where g.op's first-ranked backend 'flaky' fails to import until the flag file exists; and the flag."""
    flag = tmp_path / "flag"
    workspace.module("kc_hard_flaky", FLAKY.replace("FLAG", repr(str(flag))))
    workspace.module("kc_hard_good", GOOD)
    op = workspace.op({"flaky": "kc_hard_flaky:kernel", "good": "kc_hard_good:kernel"}, reference="good")
    return workspace.write({"op": op}, backends=["flaky", "good"]), flag


def test_strict_a_failed_import_is_not_cached_and_is_retried(flaky: tuple[Path, Path], imports: list[str]) -> None:
    directory, flag = flaky
    catalog = kcatalog.load_catalog([directory], strict=True)
    with pytest.raises(
        KernelImportError,
        match=r"^cannot load backend 'flaky' of op 'g\.op' from "
        rf"'kc_hard_flaky:kernel': {FLAKY_FAILURE}$",
    ):
        catalog.kernel("g.op")
    _assert_not_left_behind("kc_hard_flaky")
    flag.touch()  # the fix
    assert catalog.kernel("g.op")() == "flaky"
    assert catalog.kernel("g.op")() == "flaky"
    assert imports == ["kc_hard_flaky", "kc_hard_flaky"]  # one failed import, one that worked, then cached
    assert catalog.select("g.op", "cpu").rejected == (
        Rejected("good", "ranked below flaky by catalog default priority", RejectKind.RANKED_BELOW),
    )


def test_a_failed_import_is_skipped_for_the_catalogs_lifetime(flaky: tuple[Path, Path], imports: list[str]) -> None:
    torch = pytest.importorskip("torch")
    directory, flag = flaky
    catalog = kcatalog.load_catalog([directory])
    assert catalog.kernel("g.op")() == "good"
    recorded = Rejected("flaky", f"import failed on first use: {FLAKY_FAILURE}", RejectKind.IMPORT_FAILED)
    assert catalog.select("g.op", "cpu").rejected == (recorded,)
    _assert_not_left_behind("kc_hard_flaky")
    flag.touch()  # the fix: this catalog keeps skipping the backend (the documented behaviour) ...
    assert catalog.kernel("g.op")() == "good"
    assert catalog.resolve("g.op", "cpu")() == "good"
    assert catalog.op("g.op")(torch.zeros(2)) == "good"
    assert catalog.select("g.op", "cpu").rejected == (recorded,)
    with pytest.raises(
        NoEligibleBackendError,
        match=rf"^no backend of op 'g\.op' can run on \S+: flaky: "
        rf"import failed on first use: {FLAKY_FAILURE}$",
    ):
        catalog.kernel("g.op", backend="flaky")
    assert imports == ["kc_hard_flaky", "kc_hard_good"]  # ... without trying the import again
    fresh = kcatalog.load_catalog([directory])  # ... and a new load retries it
    assert fresh.kernel("g.op")() == "flaky"
    assert fresh.select("g.op", "cpu").rejected == (
        Rejected("good", "ranked below flaky by catalog default priority", RejectKind.RANKED_BELOW),
    )
    assert imports == ["kc_hard_flaky", "kc_hard_good", "kc_hard_flaky"]
