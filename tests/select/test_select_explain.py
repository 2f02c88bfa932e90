"""`kcatalog explain`: which backend runs an op on a platform, and every other backend's reason."""

from __future__ import annotations

import importlib.metadata
import json
from typing import TYPE_CHECKING, Any

import pytest

import kcatalog
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

try:
    importlib.metadata.distribution("triton")
    HAS_TRITON = True
except importlib.metadata.PackageNotFoundError:
    HAS_TRITON = False

needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="the shipped triton backends require the triton distribution")


def _explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["explain", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _explain_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]]]:
    code, out, _ = _explain(capsys, *args, "--output-format", "json")
    return code, json.loads(out)


# -- the shipped catalog -------------------------------------------------------------------------------


@needs_triton
@pytest.mark.parametrize("platform", ["cuda:9.0", "hip:gfx942"])
def test_shipped_rms_norm_on_a_gpu_is_triton(capsys: pytest.CaptureFixture[str], platform: str) -> None:
    code, out, err = _explain(capsys, "layernorm.rms_norm", "--platform", platform)
    assert (code, err) == (0, "")
    assert out == (
        f"layernorm.rms_norm on {platform}: triton (kcatalog.kernels.triton.layernorm:rms_norm), by catalog default priority\n"
        "  aten: ranked below triton by catalog default priority\n"
        "  torch_compile: not chosen automatically (auto: false); name it with backend=, an override or a plan\n"
        "  torch: ranked below triton by catalog default priority\n"
        "  backward: layernorm.rms_norm_backward runs triton (kcatalog.kernels.triton.norm_backward:rms_norm_backward),"
        " by catalog default priority; gradients of x, weight\n"
    )


def test_shipped_rms_norm_on_cpu_is_aten(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _explain(capsys, "layernorm.rms_norm", "--platform", "cpu")
    assert (code, err) == (0, "")
    assert out == (
        "layernorm.rms_norm on cpu: aten (kcatalog.kernels.aten.layernorm:rms_norm), by catalog priority on cpu\n"
        "  torch: ranked below aten by catalog priority on cpu\n"
        "  torch_compile: runs on cuda >= 7.0, not cpu; runs on hip, not cpu\n"
        "  triton: runs on cuda >= 8.0, not cpu; runs on hip, not cpu\n"
        "  backward: layernorm.rms_norm_backward runs torch (kcatalog.kernels.torch.norm_backward:rms_norm_backward),"
        " by catalog priority on cpu; gradients of x, weight\n"
    )


def test_shipped_rms_norm_below_the_triton_arch_window(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _explain(capsys, "layernorm.rms_norm", "--platform", "cuda:7.5")
    assert code == 0
    assert out.splitlines()[:2] == [
        "layernorm.rms_norm on cuda:7.5: aten (kcatalog.kernels.aten.layernorm:rms_norm), by catalog default priority",
        "  triton: needs cuda >= 8.0; this is cuda:7.5; runs on hip, not cuda",
    ]


@needs_triton
@pytest.mark.parametrize(
    ("platform", "chosen", "order"),
    [
        ("cuda:9.0", "triton", ["triton", "aten", "torch_compile", "torch"]),
        ("hip:gfx942", "triton", ["triton", "aten", "torch_compile", "torch"]),
        ("cpu", "aten", ["aten", "torch", "torch_compile", "triton"]),
    ],
)
def test_shipped_rms_norm_json(
    capsys: pytest.CaptureFixture[str], platform: str, chosen: str, order: list[str]
) -> None:
    code, [entry] = _explain_json(capsys, "layernorm.rms_norm", "--platform", platform)
    assert code == 0
    assert entry["op"] == "layernorm.rms_norm"
    assert entry["platform"] == platform
    assert entry["chosen"] == chosen
    assert entry["target"] == f"kcatalog.kernels.{chosen}.layernorm:rms_norm"
    assert entry["order"] == order
    assert [r["backend"] for r in entry["rejected"]] == [b for b in order if b != chosen]
    assert all(r["reason"] for r in entry["rejected"])


@needs_triton
def test_shipped_fused_add_rms_norm_has_no_aten(capsys: pytest.CaptureFixture[str]) -> None:
    _, [cpu] = _explain_json(capsys, "layernorm.fused_add_rms_norm", "--platform", "cpu")
    _, [cuda] = _explain_json(capsys, "layernorm.fused_add_rms_norm", "--platform", "cuda:9.0")
    assert (cpu["chosen"], cuda["chosen"]) == ("torch", "triton")


@needs_triton
def test_shipped_all_on_hip(capsys: pytest.CaptureFixture[str]) -> None:
    code, entries = _explain_json(capsys, "--all", "--platform", "hip:gfx942")
    assert code == 0
    assert [e["op"] for e in entries] == kcatalog.load_catalog().ops()
    chosen = {e["op"]: e["chosen"] for e in entries}
    for op in ("layernorm.rms_norm", "layernorm.layer_norm", "layernorm.fused_add_rms_norm", "elementwise.softmax"):
        assert chosen[op] == "triton"
    assert all(e["platform"] == "hip:gfx942" and e["chosen"] for e in entries)
    code, out, _ = _explain(capsys, "--all", "--platform", "hip:gfx942")
    assert code == 0
    assert (
        "layernorm.rms_norm on hip:gfx942: triton (kcatalog.kernels.triton.layernorm:rms_norm), by catalog default priority\n"
        in out
    )


def test_default_platform_is_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code, [entry] = _explain_json(capsys, "layernorm.rms_norm")
    assert code == 0
    assert entry["platform"] == str(kcatalog.Platform.detect())


# -- throwaway catalogs ----------------------------------------------------------------------------------


@pytest.fixture
def nothing_on_cpu(workspace: Workspace) -> Workspace:
    """g.op: 'cu' (cuda >= 8.0), 'rocm' (hip gfx942), 'f32' (float32 only); nothing runs on cpu but f32."""
    workspace.named_functions("kc_sel_explain", ["cu", "rocm", "f32"])
    workspace.write(
        {
            "op": workspace.op(
                {
                    "cu": {"target": "kc_sel_explain:cu", "capabilities": [{"device": "cuda", "min_arch": "8.0"}]},
                    "rocm": {"target": "kc_sel_explain:rocm", "capabilities": [{"device": "hip", "archs": ["gfx942"]}]},
                    "f32": {"target": "kc_sel_explain:f32", "dtypes": ["float32"], "capabilities": [{"device": "cpu"}]},
                },
                dtypes=["float32", "float16"],
            )
        },
        backends=["cu", "rocm", "f32"],
    )
    return workspace


def test_nothing_eligible_exits_1_with_every_reason(
    nothing_on_cpu: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _explain(
        capsys, "g.op", "--platform", "cpu", "--dtype", "float16", "--catalog", str(nothing_on_cpu.catalog_dir)
    )
    assert (code, err) == (1, "")
    assert out == (
        "g.op on cpu: nothing eligible\n"
        "  cu: runs on cuda >= 8.0, not cpu\n"
        "  rocm: runs on hip (gfx942), not cpu\n"
        "  f32: does not support float16 (supports float32)\n"
    )


def test_nothing_eligible_json(nothing_on_cpu: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    code, entries = _explain_json(
        capsys, "g.op", "--platform", "hip:gfx90a", "--catalog", str(nothing_on_cpu.catalog_dir)
    )
    assert code == 1
    assert [entry.pop("layers") for entry in entries] == [
        dict.fromkeys(["cu", "rocm", "f32"], str(nothing_on_cpu.catalog_dir))
    ]
    assert entries == [
        {
            "op": "g.op",
            "platform": "hip:gfx90a",
            "chosen": None,
            "target": None,
            "decided_by": "catalog default priority",
            "notes": [],
            "order": ["cu", "rocm", "f32"],
            "rejected": [
                {"backend": "cu", "kind": "capability", "reason": "runs on cuda >= 8.0, not hip"},
                {"backend": "rocm", "kind": "capability", "reason": "needs hip arch in gfx942; this is hip:gfx90a"},
                {"backend": "f32", "kind": "capability", "reason": "runs on cpu, not hip"},
            ],
        }
    ]


def test_explain_all_fails_when_one_op_has_nothing(workspace: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    workspace.named_functions("kc_sel_explain", ["cu", "ref"])
    workspace.write(
        {
            "fine": workspace.op({"ref": "kc_sel_explain:ref"}),
            "gpu_only": workspace.op({"cu": {"target": "kc_sel_explain:cu", "capabilities": [{"device": "cuda"}]}}),
        },
        backends=["cu", "ref"],
    )
    code, entries = _explain_json(capsys, "--all", "--platform", "cpu", "--catalog", str(workspace.catalog_dir))
    assert code == 1
    assert {e["op"]: e["chosen"] for e in entries} == {"g.fine": "ref", "g.gpu_only": None}


def test_explain_a_platform_on_a_throwaway_catalog(
    nothing_on_cpu: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _explain(capsys, "g.op", "--platform", "cuda:9.0", "--catalog", str(nothing_on_cpu.catalog_dir))
    assert code == 0
    assert out == (
        "g.op on cuda:9.0: cu (kc_sel_explain:cu), by catalog default priority\n"
        "  rocm: runs on hip (gfx942), not cuda\n"
        "  f32: runs on cpu, not cuda\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["layernorm.rms_norm", "--platform", "tpu"],
            "error: unknown device 'tpu' in platform 'tpu'; expected one of cuda, hip, cpu, npu, xpu, mps, musa\n",
        ),
        (["--platform", "cpu"], "error: give one op, or --all\n"),
        (["layernorm.rms_norm", "--all"], "error: give one op, or --all\n"),
    ],
    ids=["bad-platform", "no-op", "op-and-all"],
)
def test_explain_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, out, err = _explain(capsys, *args)
    assert (code, out) == (2, "")
    assert err.startswith("usage: kcatalog explain ") and err.endswith("\n" + message)  # the subcommand's usage


def test_explain_unknown_op_names_the_available_ones(
    nothing_on_cpu: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _explain(capsys, "g.oq", "--platform", "cpu", "--catalog", str(nothing_on_cpu.catalog_dir))
    assert code != 0 and out == ""
    assert err == "error: no op 'g.oq' (did you mean 'g.op'?). Available: g.op\n"
