"""benchmarks/kernels_gpu.py --sweep gaps, on the CPU: the command parses, the llama phases would run exactly the
GAPS cases (each with the shipped kernel, Liger and its variants, "again" last), every variant overrides real
tunables to something new, and every variant passes the benchmark's own correctness check (Triton interpreted)."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

pytest.importorskip("triton")
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels_gpu.py"
COMMAND = "--phases llama --sweep gaps --ops rotary_embedding,layer_norm,rms_norm,fused_add_rms_norm"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kernels_gpu_under_test", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def test_gaps_are_llama_cases_with_new_tunables(bench: ModuleType) -> None:
    assert bench.parse_args([*COMMAND.split(), "--backends", "triton,liger"]).sweep == "gaps"
    for gap in bench.GAPS:
        shapes = getattr(bench.BENCHES[gap.op], gap.phase.removesuffix("-graph").replace("-", "_"))
        assert gap.params in shapes and bench.TIMING[gap.phase] == "graph", gap
        default = importlib.import_module(gap.module).TUNING.default
        names = [name for name, _ in gap.variants]
        assert len(set(names)) == len(names) and "again" not in names
        tunings = [dataclasses.replace(default, **overrides) for _, overrides in gap.variants]
        assert all(t != default for t in tunings), gap  # none is the shipped configuration again
        assert len({repr(t) for t in tunings}) == len(tunings), gap  # nor two variants the same


def test_llama_phases_run_only_the_gaps(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    ops, problems = bench.read_catalog(bench.REPO / "catalog")
    assert not [p for p in problems if "failed" in p]
    run = bench.Run(args=bench.parse_args([*COMMAND.split(), "--device", "cpu"]), device=torch.device("cpu"), ops=ops)
    op_ids = bench._op_ids(run, run.args.ops, [])
    run.peers = {op: bench.Contender("liger", lambda: None) for op in op_ids}  # Liger loads on CUDA only
    seen: list[tuple[str, str, Any, list[str], list[str]]] = []

    def record(run: Any, phase: str, case: Any, backends: list[str], extra: list[Any]) -> None:
        seen.append((phase, case.op.op_id, case.params, backends, [c.name for c in extra]))

    monkeypatch.setattr(bench, "run_case", record)
    for phase in ("llama-prefill", "llama-prefill-graph", "llama-decode"):
        bench.phase_timed(run, op_ids, phase, [torch.bfloat16])
    assert sorted(repr((phase, op, params)) for phase, op, params, _, _ in seen) == sorted(
        repr((g.phase, g.op, g.params)) for g in bench.GAPS
    )  # every gap once, nothing else (no do_bench llama-prefill case)
    for phase, op, params, backends, extra in seen:
        gap = bench.gap_for(op, phase, params)
        assert "triton" in backends
        assert extra == ["liger", *(f"triton:{name}" for name, _ in gap.variants), "triton:again"]


def test_every_gap_variant_passes_the_check(bench: ModuleType) -> None:
    ops, _ = bench.read_catalog(bench.REPO / "catalog")
    run = bench.Run(args=bench.parse_args(["--device", "cpu", "--sweep", "gaps"]), device=torch.device("cpu"), ops=ops)
    for gap in bench.GAPS:
        op = ops[gap.op]
        params = gap.params | {"T": 32 if gap.params.get("H") == 128 else 3}  # q_norm's 32 rows; else 3 tokens
        case = bench.Case(op, bench.BENCHES[gap.op], params, torch.bfloat16)
        first = len(run.records)
        bench.run_case(run, "check", case, ["triton"], bench.gap_contenders(op, gap))
        done = run.records[first:]
        assert [r.backend for r in done] == ["triton", *(f"triton:{n}" for n, _ in gap.variants), "triton:again"]
        assert all(r.ok for r in done), [(r.backend, r.note) for r in done if not r.ok]
