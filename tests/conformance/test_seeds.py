"""Seeds reproduce: the same base seed gives the same inputs and figures, another seed other inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import torch
from catalog_builder import child_env
from conformance_support import run_cli

import kcatalog
from kcatalog.tools import conformance  # unit tests of the planner's case seeds: internal on purpose
from kcatalog.tools.inputs import build_call, samples_of, size_sets  # and of the inputs built from a seed: likewise

# ATen's float16 softmax differs from the float32-accumulating reference in the last bits: figures
# that are not zero, and so change with the data.
ARGV = ("test", "elementwise.softmax", "--backend", "aten", "--dtype", "float16", "--output-format", "json")


def figures(seed: int) -> list[dict[str, Any]]:
    result = run_cli(*ARGV, "--seed", str(seed))
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["seed"] == seed
    return document["results"]


def test_the_same_seed_gives_identical_figures() -> None:
    first, second = figures(11), figures(11)
    assert len(first) == 6
    assert first == second
    assert all(r["relative_error"] > 0 for r in first)


def test_another_seed_gives_other_inputs_and_figures() -> None:
    first, other = figures(11), figures(12)
    assert [r["sizes"] for r in first] == [r["sizes"] for r in other]
    assert all(a["seed"] != b["seed"] for a, b in zip(first, other))
    assert all(a["relative_error"] != b["relative_error"] for a, b in zip(first, other))


def test_build_call_is_a_function_of_the_seed() -> None:
    info = kcatalog.load_catalog().info("layernorm.fused_add_rms_norm")
    samples = samples_of(info)
    assert samples is not None
    sizes = size_sets(samples)[3]

    def tensors(seed: int) -> dict[str, torch.Tensor]:
        return build_call(info, samples, sizes, "bfloat16", "cpu", seed).tensors()

    first, again, other = tensors(99), tensors(99), tensors(100)
    assert list(first) == ["x", "residual", "weight"]
    assert all(torch.equal(first[name], again[name]) for name in first)
    assert not any(torch.equal(first[name], other[name]) for name in first)
    assert not torch.equal(first["x"], first["residual"])  # one generator, drawn in turn: no two alike


def test_every_backend_of_a_case_sees_the_same_inputs() -> None:
    catalog = kcatalog.load_catalog()
    cases, _ = conformance.plan(catalog, ["layernorm.rms_norm"], device="cpu", base_seed=3, interpret=True)
    by_data: dict[tuple[str, str], set[int]] = {}
    for case in cases:
        by_data.setdefault((case.dtype, conformance.describe(case.sizes)), set()).add(case.seed)
    assert {case.spec.backend for case in cases} == {"aten", "triton"}
    assert len(by_data) == 3 * 6
    assert all(len(seeds) == 1 for seeds in by_data.values())  # aten and triton: one seed per case
    assert len({seed for seeds in by_data.values() for seed in seeds}) == 3 * 6  # distinct across cases


PLAN_SEEDS = """
import kcatalog
from kcatalog.tools import conformance
cases, _ = conformance.plan(kcatalog.load_catalog(), ["layernorm.rms_norm"], device="cpu", base_seed=3)
print([case.seed for case in cases])
"""


@pytest.mark.parametrize("hash_seed", ["1", "2"])
def test_case_seeds_are_the_same_in_another_process(hash_seed: str) -> None:
    """A seed printed by one run means the same in the next, whatever Python's string-hash salt."""
    catalog = kcatalog.load_catalog()
    cases, _ = conformance.plan(catalog, ["layernorm.rms_norm"], device="cpu", base_seed=3)
    env = {**child_env(), "PYTHONHASHSEED": hash_seed}
    proc = subprocess.run(
        [sys.executable, "-c", PLAN_SEEDS], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert proc.stdout.strip() == str([case.seed for case in cases])
