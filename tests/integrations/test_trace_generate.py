"""A trace of a kernelized tiny Llama's `generate` on the CPU lists every op that ran, with its backend and its calls
at each leading dimension (counted independently, by hooks on the replaced modules), and `kcatalog tune
--from-trace` on it times exactly the shapes that ran untuned (a layer's CPU table tunes the rotary op's decode
rows, so the trace holds shapes that ran tuned too)."""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# The tiny models, their tokens and greedy generation, as test_kernelize builds them (its `build` fixture too).
from test_kernelize import build, generate, tokens  # noqa: F401

import kcatalog
from kcatalog.model import KernelSpec
from kcatalog.runtime.trace_file import TraceRecord, Via
from kcatalog.tools import tuning
from kcatalog.tools.cli import main
from kcatalog.tools.timing import BenchResult, Job
from kcatalog.tools.traces import untuned_shapes

ROTARY, NORM, MLP = "attention.rotary_embedding", "layernorm.rms_norm", "activation.silu_and_mul"
TABLE = """\
kcatalog: 1
tuned:
  platform: cpu
  provenance: {{device: cpu}}
  ops:
    {op}:
      float32:
        - {{tokens: [1, 4], backend: {backend}}}
"""


def count_kernel_calls(monkeypatch: pytest.MonkeyPatch, catalog: kcatalog.Catalog) -> Counter[tuple[str, str, int]]:
    """(op, backend, leading dimension of the dispatch argument) -> calls, counted independently of the trace: each
    kernel is wrapped as the catalog imports it (KernelSpec.load), before any handle resolves."""
    calls: Counter[tuple[str, str, int]] = Counter()
    load = KernelSpec.load

    def counting_load(spec: KernelSpec) -> Callable[..., Any]:
        kernel = load(spec)
        dispatch = catalog.info(spec.op).dispatch

        @functools.wraps(kernel)
        def counted(*args: Any, **kwargs: Any) -> Any:
            index = dispatch.index
            tensor = args[index] if index is not None and index < len(args) else kwargs[dispatch.name]
            calls[(spec.op, spec.backend, tensor.shape[0])] += 1
            return kernel(*args, **kwargs)

        return counted

    monkeypatch.setattr(KernelSpec, "load", counting_load)
    return calls


def test_a_trace_of_generate_lists_every_op_and_tune_times_its_untuned_shapes(
    build: Callable[..., Any],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = build("llama")
    report = kcatalog.kernelize(model, kcatalog.load_catalog())
    chosen = {choice.op: choice.backend for item in report.replaced for choice in item.ops}
    assert {ROTARY, NORM, MLP} <= set(chosen)
    # A layer on top of the shipped catalog tunes the rotary op at 1-4 rows on the CPU, for the backend it runs.
    layer = tmp_path / "layer"
    (layer / "tuned").mkdir(parents=True)
    (layer / "tuned" / "cpu.yaml").write_text(TABLE.format(op=ROTARY, backend=chosen[ROTARY]))
    model = build("llama")
    catalog = kcatalog.load_catalog(["shipped", layer])  # this test's own: nothing else runs its handles
    report = kcatalog.kernelize(model, catalog)
    assert {choice.op: choice.backend for item in report.replaced for choice in item.ops} == chosen
    expected = count_kernel_calls(monkeypatch, catalog)
    path = tmp_path / "generate.json"
    with catalog.trace(path) as trace:
        generated = generate(model, tokens())
    assert generated.shape[1] > tokens().shape[1]

    record = trace.record
    assert TraceRecord.from_dict(json.loads(path.read_text())) == record
    assert expected and Counter({(e.op, e.backend, s.tokens): s.calls for e in record.entries for s in e.shapes}) == (
        expected
    )
    assert {e.op for e in record.entries} == set(chosen)  # every op kernelize put in ran
    assert {(e.platform, e.dtype, e.via) for e in record.entries} == {("cpu", "float32", Via.HANDLE)}
    prefill, decode = 2 * 11, 2  # the rotary op's rows: batch x sequence, then batch x one token
    assert {s.tokens: s.bucket for e in record.entry(ROTARY) for s in e.shapes} == {prefill: None, decode: (1, 4)}
    (tuned,) = [e for e in record.entry(ROTARY) if e.shapes[0].tokens == decode]
    assert tuned.decided_by.startswith("tuned table for cpu float32 T∈[1, 4]")

    assert main(["trace", "show", str(path)]) == 0
    rows = [line.split()[:6] for line in capsys.readouterr().out.splitlines()]
    for entry in record.entries:
        assert [entry.op, "cpu", "float32", entry.backend, "handle", f"{entry.calls:,}"] in rows

    # Every shape but the rotary op's decode rows ran untuned, and tune times exactly those (op, dtype, tokens).
    untuned = {(op, dtype, t) for (op, _, dtype), counts in untuned_shapes(record, "cpu").items() for t in counts}
    assert untuned == {(op, "float32", t) for op, _, t in expected if (op, t) != (ROTARY, decode)}
    timed: list[tuple[str, str, tuple[int, ...], int]] = []

    def timer(job: Job, device: str, copy_gbps: float, seed: int) -> BenchResult:
        timed.append(tuning.bucket_of(job))
        sizes = str(job.sizes)  # the shapes of one bucket, told apart
        return BenchResult(
            job.info.id, job.spec.backend, job.dtype, job.shapes, sizes, "fake", 1.0, 0, None, None, None
        )

    monkeypatch.setattr(tuning, "time_job", timer)
    out = tmp_path / "tuned"
    assert main(["tune", "--from-trace", str(path), "--device", "cpu", "--tuned", str(layer), "--out", str(out)]) == 0
    assert set(timed) == {(op, dtype, (), t) for op, dtype, t in untuned}  # (): no op here is keyed by its shape
    table = (out / "cpu.yaml").read_text()
    assert all(f"at: {t}," in table for _, _, t in untuned)
