"""`kcatalog test`'s checks over the shipped catalog, an op per test: every backend that can run on the CPU agrees
with its reference (the Triton kernels run by the interpreter, as on cuda), keeps its promises, and every op with a
backward has its gradients checked."""

from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter
from collections.abc import Iterator

import pytest
from conformance_support import run_cli

import kcatalog
from kcatalog.tools import conformance, gradients, promises
from kcatalog.tools.inputs import samples_of, size_sets
from kcatalog.tools.promises import PromiseCase, rows_of

SEED = 20240611
SHIPPED_OPS = kcatalog.load_catalog(cache=False).ops()  # a test each, so that the workers share them out

# Under the interpreter a Triton kernel's programs run one after another: repeated runs can only differ where they
# read memory never written, and the agreement checks run every kernel on NaN-filled new memory, which would show
# that. So `deterministic` is run once per dtype there (on the first, smallest size set), not on every size set.
# `batch_invariant` runs on every size set, with 8 rows computed alone (the first and last among them) rather than
# 64: a kernel whose rows depend on the batch differs on every row, or on the rows of a block's tail.
INTERPRETED_ROWS = 8


@pytest.fixture
def interpreted(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--interpret` sets TRITON_INTERPRET for the process; put it back afterwards.

    It only works if no Triton kernel was compiled for a GPU earlier in this process.
    """
    compiled_for_gpu = os.environ.get("TRITON_INTERPRET") != "1" and any(
        name.startswith("kcatalog.kernels.triton") for name in sys.modules
    )
    if compiled_for_gpu:
        pytest.skip("Triton kernels were already defined for the GPU in this process; --interpret needs a fresh one")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def shipped() -> kcatalog.Catalog:
    return kcatalog.load_catalog()


def test_a_test_per_shipped_op_and_every_kind_of_check_among_them(shipped: kcatalog.Catalog) -> None:
    assert SHIPPED_OPS == shipped.ops()
    planned = promises.plan_promises(shipped, shipped.ops(), device="cpu", base_seed=SEED, interpret=True)[0]
    # torch's and aten's: what the CPU measurement backs; triton's: what the H200 measurement backs
    assert {case.spec.backend for case in planned} == {"torch", "aten", "triton"}
    assert {case.promise for case in planned if case.spec.backend == "triton"} == set(kcatalog.Promise)
    assert any(shipped.info(op).backward is not None for op in shipped.ops())


@pytest.mark.parametrize("op", SHIPPED_OPS)
def test_every_shipped_op_passes_on_the_cpu_with_triton_interpreted(
    shipped: kcatalog.Catalog, op: str, interpreted: None, single_threaded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = shipped.info(op)
    samples = samples_of(info)
    assert samples is not None and info.dtypes is not None, op
    where = {"device": "cpu", "base_seed": SEED, "interpret": True}
    cases, notes = conformance.plan(shipped, [op], **where)
    results = list(conformance.run(cases, shipped, "cpu"))
    assert [(r.backend, r.dtype, r.sizes, r.message) for r in results if not r.passed or r.skipped] == []
    # Every backend but the reference (what the others are checked against) ran on every dtype and declared size
    # set, except the dtypes a note says it was skipped for and why; the Triton kernels were never skipped.
    checked = Counter(r.backend for r in results)
    assert checked[info.reference] == 0
    for backend in info.backends:
        if backend == info.reference:
            continue
        skipped = {
            dtype
            for note in notes
            if note.startswith(f"{op} [{backend}] ")
            for dtype in note.split("] ", 1)[1].split(": skipped, ", 1)[0].split(", ")
        }
        size_set_count = math.prod(len(values) for values in samples.sizes.values())  # their product
        assert checked[backend] == len(set(info.dtypes) - skipped) * size_set_count, (backend, skipped)
        if backend == "triton":
            assert not skipped
    promise_cases = promises.plan_promises(shipped, [op], **where)[0]
    assert_every_promise_planned(info, promise_cases)
    monkeypatch.setattr(promises, "MAX_ROWS", INTERPRETED_ROWS)
    kept = list(promises.run_promises(list(promise_checks_run(promise_cases)), "cpu"))
    assert [(r.backend, r.promise, r.dtype, r.sizes, r.message) for r in kept if not r.passed] == []
    assert {(r.backend, r.promise, r.dtype) for r in kept} == {
        (case.spec.backend, case.promise.value, case.dtype) for case in promise_cases
    }
    gradient_cases = gradients.plan_gradients(shipped, [op], **where)[0]
    grads = list(gradients.run_gradients(gradient_cases, shipped, "cpu"))
    assert [(g.backend, g.dtype, g.sizes, g.message) for g in grads if not g.passed] == []
    if info.backward is None:
        assert grads == []
    else:
        # The catalog's choice, each backward backend (the Triton kernels called directly, in the interpreter),
        # and gradcheck of the references.
        backends = {"catalog", "gradcheck", *shipped.info(info.backward.op).backends}
        assert {g.backend for g in grads} == backends
        assert Counter(g.backend for g in grads if g.backend != "gradcheck") == {
            backend: len(info.dtypes) * len(size_sets(samples)) for backend in backends - {"gradcheck"}
        }


def assert_every_promise_planned(info: kcatalog.OpInfo, cases: list[PromiseCase]) -> None:
    """Every promise a shipped backend makes on the CPU (the references' too), and each Triton kernel on cuda (run
    as on cuda, in the interpreter), is planned on every dtype it takes and size set, a batch_invariant one on every
    size set of more than one row; no other promise is."""
    samples = samples_of(info)
    assert samples is not None and info.dtypes is not None
    found = rows_of(info, samples)
    assert not isinstance(found, str), found
    batches = [sizes for sizes in size_sets(samples) if found.count(sizes) > 1]
    expected: Counter[tuple[str, str, str]] = Counter()
    for spec in info.backends.values():
        where = "cuda" if "triton" in spec.requires else "cpu"
        dtypes = [dtype for dtype in info.dtypes if spec.dtypes is None or dtype in spec.dtypes]
        for promise in kcatalog.Promise:
            if spec.keeps(promise, where):
                per_dtype = len(batches if promise is kcatalog.Promise.BATCH_INVARIANT else size_sets(samples))
                expected.update({(spec.backend, promise.value, dtype): per_dtype for dtype in dtypes})
    assert Counter((case.spec.backend, case.promise.value, case.dtype) for case in cases) == expected
    assert not [case for case in cases if case.unchecked]


def promise_checks_run(cases: list[PromiseCase]) -> Iterator[PromiseCase]:
    """The planned checks, less a Triton kernel's `deterministic` on all but the first size set of each dtype."""
    first: dict[tuple[str, str], PromiseCase] = {}
    for case in cases:
        if case.promise is kcatalog.Promise.DETERMINISTIC:
            first.setdefault((case.spec.backend, case.dtype), case)
    for case in cases:
        repeated = case.promise is kcatalog.Promise.DETERMINISTIC and "triton" in case.spec.requires
        if not repeated or first[case.spec.backend, case.dtype] is case:
            yield case


def test_json_output_of_one_op(interpreted: None) -> None:
    result = run_cli(
        "test", "elementwise.softmax", "--dtype", "float16", "--interpret", "--seed", "5", "--output-format", "json"
    )
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["seed"] == 5
    # 12 against the reference; the promises: torch's deterministic (6 size sets), aten's batch_invariant (6 size
    # sets deterministic, 4 of more than one row batch-invariant), triton's deterministic on cuda (6, interpreted)
    assert document["summary"] == {"checks": 12 + 22, "failed": 0}
    assert {(r["backend"], r["promise"], r["passed"]) for r in document["promises"]} == {
        ("torch", "deterministic", True),
        ("aten", "deterministic", True),
        ("aten", "batch_invariant", True),
        ("triton", "deterministic", True),
    }
    assert len(document["promises"]) == 22
    assert document["notes"] == [
        "elementwise.softmax [torch_compile] float16: skipped, runs on cuda >= 7.0, not cpu; runs on hip, not cpu"
    ]
    assert {(r["backend"], r["sizes"]) for r in document["results"]} == {
        (backend, f"T={t} H={h}") for backend in ("aten", "triton") for t in (1, 7, 130) for h in (64, 1000)
    }
    for r in document["results"]:
        assert set(r) == {
            "op",
            "backend",
            "dtype",
            "sizes",
            "seed",
            "max_abs_error",
            "relative_error",
            "tolerance",
            "passed",
            "message",
            "skipped",
        }
        assert (r["op"], r["dtype"], r["tolerance"], r["passed"], r["message"]) == (
            "elementwise.softmax",
            "float16",
            2e-3,
            True,
            "",
        )
        assert isinstance(r["seed"], int)
        assert 0 < r["relative_error"] <= 2e-3  # float16 rounding shows, within the tolerance
        assert 0 < r["max_abs_error"] < 1
