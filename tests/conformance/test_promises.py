"""`kcatalog test` checks what backends promise: a backend that declares `batch_invariant` but whose rows depend on
the batch, or `deterministic` but whose runs differ, fails with what differs; one that keeps its promise passes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import NamedTuple

import pytest
from catalog_builder import Workspace, workspace_at
from conformance_support import Run, declare_op, run_cli

SEED = 11
MODULE = "kc_promise_kernels"
KERNELS = """
    import torch


    def twice(x):
        return 2 * x


    def depends_on_the_batch(x):
        return 2 * x + x.shape[0] * 1e-7


    def differs_per_run(x):
        return 2 * x + torch.rand(x.shape) * 1e-7


    def sums_the_batch(x):
        return (2 * x).sum()


    def residual_depends_on_the_batch(x, residual):
        residual.add_(x + x.shape[0] * 1e-7)
        x.copy_(2 * x)
"""
SAMPLES = {"sizes": {"T": [1, 4], "H": [16]}, "args": {"x": {"shape": ["T", "H"]}}}
BACKENDS = {
    "torch": {"target": f"{MODULE}:twice", "batch_invariant": True},  # the reference: its promise is checked too
    "batchy": {"target": f"{MODULE}:depends_on_the_batch", "batch_invariant": True},
    "noisy": {"target": f"{MODULE}:differs_per_run", "deterministic": ["cpu"]},
    "summed": {"target": f"{MODULE}:sums_the_batch", "batch_invariant": True, "dtypes": ["float32"]},
    "elsewhere": {"target": f"{MODULE}:depends_on_the_batch", "batch_invariant": ["cuda"]},  # not checked on the CPU
}


class Fixture(NamedTuple):
    workspace: Workspace
    concise: Run
    json: Run


def _op(**extra: object) -> dict[str, object]:
    op = declare_op(MODULE, {}, samples=extra.pop("samples", SAMPLES), **extra)
    op["tolerance"] = {"float32": 0.5}  # what these backends compute is no matter here, only their promises
    return op


@pytest.fixture(scope="module")
def promised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixture]:
    """A catalog of backends keeping and breaking their promises, and `kcatalog test` over it in each format."""
    with workspace_at(tmp_path_factory.mktemp("promised")) as workspace:
        workspace.module(MODULE, KERNELS)
        one_row = {"sizes": {"T": [1]}, "args": {"x": {"shape": ["T", 8]}}}
        inplace_samples = {
            "sizes": {"T": [3]},
            "args": {"x": {"shape": ["T", 8]}, "residual": {"shape": ["T", 8]}},
            "compare": ["x", "residual"],
        }
        workspace.write(
            {
                "op": {**_op(), "backends": BACKENDS},
                "single": {**_op(samples=one_row), "backends": {"torch": BACKENDS["torch"]}},
                "inplace": {
                    **_op(samples=inplace_samples, signature="(x: Tensor, residual: Tensor) -> None"),
                    "mutates": ["x", "residual"],
                    "backends": {
                        "torch": {"target": f"{MODULE}:residual_depends_on_the_batch", "deterministic": True},
                        "batchy": {"target": f"{MODULE}:residual_depends_on_the_batch", "batch_invariant": True},
                    },
                },
            },
            backends=["torch", "batchy", "noisy", "summed", "elsewhere"],
            group="p",
        )
        argv = ["test", "--catalog", workspace.catalog_dir, "--seed", str(SEED)]
        yield Fixture(workspace, run_cli(*argv), run_cli(*argv, "--output-format", "json"))


def _promise_rows(out: str) -> list[list[str]]:
    """The rows of the promises table (after its header), as cells."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["op", "backend", "promise"])
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("p."):
            break
        rows.append(line.split())
    return rows


def _fail(op: str, backend: str, promise: str, sizes: str, what: str) -> str:
    return (
        rf"^FAIL {re.escape(op)} \[{backend}\] {promise} float32 {re.escape(sizes)}: {what} \(seed {SEED}; "
        rf"case seed \d+; reproduce: kcatalog test {re.escape(op)} --backend {backend} --dtype float32 --seed {SEED}"
        rf" --catalog \S+\)$"
    )


def test_a_backend_whose_rows_depend_on_the_batch_is_caught(promised: Fixture) -> None:
    what = r"row 0 of 4 computed alone differs from it in the batch: 16 of 16 elements of 'return' differ in their bits"
    assert re.search(_fail("p.op", "batchy", "batch_invariant", "T=4 H=16", what), promised.concise.out, re.M)
    rows = [row for row in _promise_rows(promised.concise.out) if row[:3] == ["p.op", "batchy", "batch_invariant"]]
    assert rows == [["p.op", "batchy", "batch_invariant", "float32", "T=4", "H=16", "FAIL"]]  # T=1 is no batch
    # batch_invariant implies deterministic, which it keeps: checked too, and passing
    deterministic = [
        row for row in _promise_rows(promised.concise.out) if row[:3] == ["p.op", "batchy", "deterministic"]
    ]
    assert [row[-1] for row in deterministic] == ["ok", "ok"]


def test_a_backend_whose_runs_differ_is_caught(promised: Fixture) -> None:
    what = r"run 2 differs from run 1: \d+ of (16|64) elements of 'return' differ in their bits"
    for sizes in ("T=1 H=16", "T=4 H=16"):
        assert re.search(_fail("p.op", "noisy", "deterministic", sizes, what), promised.concise.out, re.M)
    assert not [row for row in _promise_rows(promised.concise.out) if row[1:3] == ["noisy", "batch_invariant"]]


def test_mutated_arguments_are_compared_and_an_output_without_rows_fails(promised: Fixture) -> None:
    what = r"row 0 of 3 computed alone differs from it in the batch: 8 of 8 elements of 'residual' differ in their bits"
    assert re.search(_fail("p.inplace", "batchy", "batch_invariant", "T=3", what), promised.concise.out, re.M)
    what = r"output 'return' \(shape \(\)\) does not have the call's 4 rows along its first dimension"
    assert re.search(_fail("p.op", "summed", "batch_invariant", "T=4 H=16", what), promised.concise.out, re.M)


def test_a_promise_the_samples_cannot_check_fails(promised: Fixture) -> None:
    what = r"cannot be checked: no size set of the samples has more than one row \(T\)"
    assert re.search(_fail("p.single", "torch", "batch_invariant", "T=1", what), promised.concise.out, re.M)


def test_promises_kept_pass_and_those_of_other_devices_are_not_checked(promised: Fixture) -> None:
    rows = _promise_rows(promised.concise.out)
    assert {row[-1] for row in rows if row[:2] == ["p.op", "torch"]} == {"ok"}  # the reference keeps its promise
    assert {row[2] for row in rows if row[:2] == ["p.op", "torch"]} == {"deterministic", "batch_invariant"}
    assert not [row for row in rows if row[1] == "elsewhere"]
    assert [row[-1] for row in rows if row[:3] == ["p.inplace", "torch", "deterministic"]] == ["ok"]


def test_the_counts_and_the_exit_code(promised: Fixture) -> None:
    assert promised.concise.code == 1, promised.concise.err
    assert promised.concise.err == ""
    # accuracy: p.op 4 backends x 2 sizes (summed's two fail), p.inplace 1; promises: p.op torch 2+1, batchy 2+1,
    # noisy 2, summed 2+1; p.single torch 1+1; p.inplace torch 1, batchy 1+1; six broken (the FAIL lines above)
    assert promised.concise.out.splitlines()[-1] == f"{9 + 16} checks, {2 + 6} failed."


def test_json_lists_the_promises(promised: Fixture) -> None:
    assert promised.json.code == 1
    document = json.loads(promised.json.out)
    assert document["summary"] == {"checks": 25, "failed": 8}
    batchy = [
        r
        for r in document["promises"]
        if (r["op"], r["backend"], r["promise"]) == ("p.op", "batchy", "batch_invariant")
    ]
    assert batchy == [
        {
            "op": "p.op",
            "backend": "batchy",
            "promise": "batch_invariant",
            "dtype": "float32",
            "sizes": "T=4 H=16",
            "seed": batchy[0]["seed"],
            "passed": False,
            "message": "row 0 of 4 computed alone differs from it in the batch: 16 of 16 elements of 'return' differ "
            "in their bits",
        }
    ]
    same_inputs = {r["sizes"]: r["seed"] for r in document["results"] if r["backend"] == "batchy"}
    assert batchy[0]["seed"] == same_inputs["T=4 H=16"]  # the accuracy check's inputs
