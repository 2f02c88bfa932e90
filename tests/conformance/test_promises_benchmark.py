"""benchmarks/promises.py: a compact summary per op x backend x promise, the manifest lines that declare what a run
measured, its time budget; and the promise checks building each input set once for every backend."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import kcatalog
from kcatalog.tools import promises
from kcatalog.tools.inputs import describe

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "promises.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("promises_benchmark_under_test", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def shipped() -> kcatalog.Catalog:
    return kcatalog.load_catalog(cache=False)


def _check(op: str, backend: str, promise: str, passed: bool, sizes: str = "T=7 H=64") -> dict[str, Any]:
    return {
        "op": op, "backend": backend, "promise": promise, "dtype": "float32", "sizes": sizes, "seed": 1,
        "passed": passed, "message": "" if passed else "row 0 of 7 computed alone differs", "shapes": "test",
        "device": "cuda", "declared": False,
    }  # fmt: skip


def test_the_checks_of_one_input_set_build_it_once(shipped: kcatalog.Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    cases, _ = promises.plan_promises(
        shipped, ["layernorm.rms_norm"], device="cpu", backends=["torch", "aten"], base_seed=3, every=True
    )
    cases.sort(key=lambda c: (c.dtype, c.seed, describe(c.sizes)))
    built: list[str] = []
    real = promises.build_call

    def counting(*args: Any) -> Any:
        built.append(describe(args[2]))
        return real(*args)

    monkeypatch.setattr(promises, "build_call", counting)
    results = list(promises.run_promises(cases, "cpu"))
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]
    inputs = {(c.dtype, c.seed, describe(c.sizes)) for c in cases}
    assert len(cases) > 2 * len(inputs)  # both backends, both promises: each input set is checked several times
    assert len(built) == len(inputs)


def test_the_summary_is_one_line_per_op_backend_and_promise(script: ModuleType) -> None:
    checks = [
        _check("layernorm.rms_norm", "triton", "batch_invariant", True),
        _check("layernorm.rms_norm", "triton", "batch_invariant", False, "T=2048 H=32768"),
        _check("layernorm.rms_norm", "triton", "deterministic", True),
        _check("layernorm.rms_norm", "triton", "deterministic", True, "T=1 H=64"),
    ]
    rows = script.summarise(checks)
    assert [(r["promise"], r["held"], r["checks"], r["broken"]) for r in rows] == [
        ("batch_invariant", False, 2, 1),
        ("deterministic", True, 2, 0),
    ]
    assert rows[0]["first_broken"] == ["float32 T=2048 H=32768: row 0 of 7 computed alone differs"]
    assert rows[1]["shapes"] == {"test": ["T=1 H=64", "T=7 H=64"]}  # in the samples' order, each once
    text = script.compact_json({"device": "x"}, rows)
    assert len(text.splitlines()) == 2 + len(rows) + 1
    assert json.loads(text)["summary"] == rows


def test_the_declarations_are_the_lines_to_change(script: ModuleType, shipped: kcatalog.Catalog) -> None:
    # Against the shipped declarations: torch deterministic on [cpu, cuda]; aten deterministic on [cpu] and
    # batch_invariant on [cuda]; triton deterministic on [cuda].
    checks = [
        _check("layernorm.rms_norm", "triton", "deterministic", True),  # batch-invariant too: the stronger promise
        _check("layernorm.rms_norm", "triton", "batch_invariant", True),
        _check("layernorm.rms_norm", "torch", "deterministic", True),  # as declared: nothing to change
        _check("layernorm.rms_norm", "torch", "batch_invariant", False),
        _check("layernorm.rms_norm", "aten", "deterministic", True),  # only deterministic held on cuda
        _check("layernorm.rms_norm", "aten", "batch_invariant", False),
    ]
    lines = script.declare(shipped, script.summarise(checks), False, set())
    text = "\n".join(lines)
    assert "layernorm.rms_norm [torch]" not in text
    aten_at = lines.index(next(line for line in lines if "[aten]" in line))
    assert "catalog/layernorm.yaml:" in lines[aten_at]  # where the backend is declared
    assert "deterministic held" in lines[aten_at]
    assert lines[aten_at + 1 : aten_at + 4] == [
        "-        batch_invariant: [cuda]",
        "-        deterministic: [cpu]",
        "+        deterministic: [cpu, cuda]",
    ]
    triton_at = lines.index(next(line for line in lines if "[triton]" in line))
    assert "batch_invariant held" in lines[triton_at]
    assert lines[triton_at + 1 : triton_at + 3] == [
        "-        deterministic: [cuda]",
        "+        batch_invariant: [cuda]",
    ]
    cut = script.declare(shipped, script.summarise(checks), False, {"layernorm.rms_norm [triton]"})
    assert "+        batch_invariant: [cuda]" not in cut
    assert any("[triton]: some checks left out" in line for line in cut)
    assert script.declare(shipped, script.summarise(checks), True, set())[0].startswith("# under the Triton interp")


def test_a_budget_leaves_checks_out_and_says_which(script: ModuleType, tmp_path: Path) -> None:
    argv = ["--device", "cpu", "--ops", "layernorm.rms_norm", "--backends", "torch,aten", "--dtypes", "float32"]
    assert script.main([*argv, "--shapes", "test", "--budget-s", "0.000001", "--out", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "promises_cpu.json").read_text())
    assert written["environment"]["complete"] is False
    assert written["environment"]["left_out"] == ["layernorm.rms_norm [aten]", "layernorm.rms_norm [torch]"]
    assert written["summary"] == []  # planning took longer than the budget: no check started
    assert "Left out by --budget-s: layernorm.rms_norm [aten]" in (tmp_path / "promises_cpu.md").read_text()
