"""What autograd keeps for backward in a kernelize(model, mode="training") forward of a tiny Llama (the ops' `backward:
inputs` and `outputs`): attention.apply_rotary keeps cos and sin, never the pre-rotation q and k; add_rms_norm keeps
its weight and its summed output, never x and the residual; and the whole forward keeps exactly what its nodes
hold (benchmarks/saved_tensors.py, which measures it, counted two ways)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import kcatalog

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "saved_tensors.py"


@pytest.fixture(scope="module")
def saved() -> ModuleType:
    spec = importlib.util.spec_from_file_location("saved_tensors", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_rotary_and_the_residual_norm_keep_only_what_their_backward_reads(
    tiny: Callable[..., Any], saved: ModuleType
) -> None:
    from test_kernelize_training import tokens

    model = tiny("llama").train()
    kcatalog.kernelize(model, mode="training")
    outputs: list[torch.Tensor] = []  # each decoder layer's output: the residual stream, add_rms_norm's summed
    hooks = [layer.register_forward_hook(lambda m, a, out: outputs.append(out)) for layer in model.model.layers]
    parameters = {saved.storage_key(p) for p in model.parameters()}
    ids = tokens(0)
    out, packed = saved.saved_bytes(lambda: model(input_ids=ids, labels=ids), parameters)
    for hook in hooks:
        hook.remove()
    config = model.config
    batch, seq, hidden, head_dim = *ids.shape, config.hidden_size, config.head_dim
    by_kind: dict[str, list[list[torch.Tensor]]] = {"apply_rotary": [], "add_rms_norm": []}
    for node in saved.nodes(out.loss):
        for kind, found in by_kind.items():
            if f"_{kind}_default" in saved.node_name(node):
                found.append(list(saved.node_saved(node)))
    layers = config.num_hidden_layers
    assert len(by_kind["apply_rotary"]) == layers and len(by_kind["add_rms_norm"]) == 2 * layers

    for kept in by_kind["apply_rotary"]:  # cos and sin [1, S, D], not q [B, Hq, S, D] nor k [B, Hk, S, D]
        assert [tuple(t.shape) for t in kept] == [(1, seq, head_dim)] * 2

    summed_keys = set()
    for kept in by_kind["add_rms_norm"]:  # the weight and the summed output, not x and the residual
        assert [tuple(t.shape) for t in kept] == [(hidden,), (batch, seq, hidden)]
        assert saved.storage_key(kept[0]) in parameters
        summed_keys.add(saved.storage_key(kept[1]))
    assert len(summed_keys) == 2 * layers  # one summed output per norm, none an input of another's
    assert {saved.storage_key(o) for o in outputs} <= summed_keys  # the layers' outputs are the summed ones

    counted = saved.saved_by_nodes(out.loss, parameters)
    assert counted.total == packed > 0  # what the nodes hold is all that autograd packed
    by_node = counted.by_node()
    rotary = next(size for name, size in by_node.items() if "_apply_rotary_default" in name)
    assert rotary == 2 * seq * head_dim * 4  # cos and sin (float32), shared by the layers
    residual = next(size for name, size in by_node.items() if "_add_rms_norm_default" in name)
    assert residual == 2 * layers * batch * seq * hidden * 4
    out.loss.backward()  # what was kept is enough for the gradients (their values: test_kernelize_training)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_the_saved_tensors_report_runs(saved: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert saved.main(["--small", "--seq", "8", "--layers", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("saved for backward at 4096 tokens, bf16, MiB")
    assert any("add_rms_norm" in line for line in lines) and lines[-1].lstrip().startswith("total")
