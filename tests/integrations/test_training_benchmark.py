"""benchmarks/training_gpu.py --smoke: the H200 training benchmark's whole path on a tiny Llama on the CPU (no
Liger, no torch.compile there), so that the GPU run does not fail on something a CPU could have shown."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "training_gpu.py"


def test_the_smoke_run_times_every_variant_and_op_and_checks_the_gradients(
    transformers: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("training_gpu", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(tmp_path), "--smoke"]) == 0
    data = json.loads((tmp_path / "training_h200.json").read_text())
    assert {"plain", "kcatalog"} <= set(data["steps"]) and all(s["step_ms"] > 0 for s in data["steps"].values())
    checks = data["checks"]
    assert checks["kcatalog_grads"]["missing"] == [] and checks["kcatalog_grads"]["max_rel_err"] < 1e-4
    assert checks["kcatalog_loss_rel_err"] < 1e-5 and not checks["kcatalog_left"]
    assert set(checks["backends"]) == set(script.OPS) and all(
        b["backward_backend"] for b in checks["backends"].values()
    )
    assert set(data["ops"]) == {"rms_norm", "swiglu", "rope", "fused_linear_cross_entropy"}
    for op in data["ops"].values():  # every op's outputs and gradients against float32 torch
        assert {"kcatalog", "torch"} <= set(op["ms"]) and op["rel_err"]["kcatalog"] < 1e-4
    table = (tmp_path / "training_h200.md").read_text()
    assert "| kcatalog |" in table and "| fused_linear_cross_entropy |" in table
    assert table in capsys.readouterr().out
