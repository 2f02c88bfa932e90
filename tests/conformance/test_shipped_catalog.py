"""`kcatalog test` over the shipped catalog: every backend that can run on the CPU agrees with its reference."""

from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter

import pytest
from conformance_support import run_cli

import kcatalog
from kcatalog.tools.inputs import samples_of, size_sets
from kcatalog.tools.promises import rows_of

SEED = 20240611


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


def test_whole_shipped_catalog_passes_on_the_cpu_with_triton_interpreted(
    interpreted: None, single_threaded: None
) -> None:
    result = run_cli("test", "--device", "cpu", "--interpret", "--seed", str(SEED))
    assert result.code == 0, result.out + result.err
    assert result.err == ""
    lines = result.out.splitlines()
    assert lines[0] == f"seed {SEED}"
    assert not [line for line in lines if line.startswith("FAIL")]
    catalog = kcatalog.load_catalog()
    promises_at = lines.index(next(line for line in lines if line.split()[:3] == ["op", "backend", "promise"]))
    gradients_at = lines.index(next(line for line in lines if line.split()[:3] == ["op", "backward", "backend"]))
    table = [line.split() for line in lines[:gradients_at] if line.split()[:1] and line.split()[0] in catalog.ops()]
    rows = [row for row in table if row[2] not in ("deterministic", "batch_invariant")]
    promise_rows = [line.split() for line in lines[promises_at + 1 : gradients_at] if line.split()[0] in catalog.ops()]
    gradient_rows = [
        line.split() for line in lines[gradients_at + 1 :] if line.split()[:1] and line.split()[0] in catalog.ops()
    ]
    assert len(rows) + len(promise_rows) == len(table)
    assert lines[-1] == f"{len(table) + len(gradient_rows)} checks, 0 failed."
    assert {row[-1] for row in table + gradient_rows} == {"ok"}
    # Every op with a backward had its gradients checked: the catalog's choice, each backward backend (the Triton
    # kernels called directly, in the interpreter), and gradcheck of the references.
    with_backward = {op for op in catalog.ops() if catalog.info(op).backward is not None}
    assert with_backward and {row[0] for row in gradient_rows} == with_backward
    for op in with_backward:
        backward = catalog.info(op).backward
        assert backward is not None
        tried = {row[2] for row in gradient_rows if row[0] == op}
        assert tried == {"catalog", "gradcheck", *catalog.info(backward.op).backends}, op
    assert {row[0] for row in rows} == set(catalog.ops())  # every op appears
    # Every other backend ran on every dtype and declared size set, except the dtypes a note says it
    # was skipped for and why; the Triton kernels were never skipped: they ran under the interpreter.
    checked = Counter((row[0], row[1]) for row in rows)
    for op in catalog.ops():
        info = catalog.info(op)
        samples = samples_of(info)
        assert samples is not None, op
        assert checked[op, info.reference] == 0  # the reference is what the others are checked against
        for backend in info.backends:
            if backend == info.reference:
                continue
            skipped = {
                dtype
                for line in lines
                if line.startswith(f"note: {op} [{backend}] ")
                for dtype in line.split("] ", 1)[1].split(": skipped, ", 1)[0].split(", ")
            }
            size_set_count = math.prod(len(values) for values in samples.sizes.values())  # their product
            assert checked[op, backend] == len(set(info.dtypes) - skipped) * size_set_count, (
                op,
                backend,
                skipped,
            )
            if backend == "triton":
                assert not skipped, op
    assert sum(count for (_, backend), count in checked.items() if backend == "triton") > 0
    assert_every_promise_checked(catalog, promise_rows)


def assert_every_promise_checked(catalog: kcatalog.Catalog, rows: list[list[str]]) -> None:
    """Every promise a shipped backend makes on the CPU (the references' too), and each Triton kernel on cuda (run
    as on cuda, in the interpreter), was checked on every dtype it takes and size set, a batch_invariant one on
    every size set of more than one row; no other promise was."""
    checked = Counter((row[0], row[1], row[2]) for row in rows)
    expected: Counter[tuple[str, str, str]] = Counter()
    for op in catalog.ops():
        info = catalog.info(op)
        samples = samples_of(info)
        assert samples is not None and info.dtypes is not None, op
        found = rows_of(info, samples)
        assert not isinstance(found, str), (op, found)
        batches = [sizes for sizes in size_sets(samples) if found.count(sizes) > 1]
        for spec in info.backends.values():
            where = "cuda" if "triton" in spec.requires else "cpu"
            dtypes = [dtype for dtype in info.dtypes if spec.dtypes is None or dtype in spec.dtypes]
            for promise in kcatalog.Promise:
                if spec.keeps(promise, where):
                    per_dtype = len(batches if promise is kcatalog.Promise.BATCH_INVARIANT else size_sets(samples))
                    expected[op, spec.backend, promise.value] = per_dtype * len(dtypes)
    assert checked == expected
    # torch's and aten's: what the CPU measurement backs; triton's: what the H200 measurement backs
    assert {backend for _, backend, _ in expected} == {"torch", "aten", "triton"}
    assert sum(count for (_, _, promise), count in expected.items() if promise == "batch_invariant") > 0


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
