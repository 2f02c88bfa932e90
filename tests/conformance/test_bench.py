"""`kcatalog bench` on the CPU: timings, bytes moved, speedups, the JSON and the plot; broken backends recorded."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from catalog_builder import Workspace
from conformance_support import Run, declare_op, one_torch_thread, run_cli

from kcatalog.tools.inputs import Call  # its input, as the bench builds it
from kcatalog.tools.timing import bytes_moved  # unit test of the byte count: internal on purpose

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Shipped(NamedTuple):
    run: Run
    json_path: Path
    png_path: Path
    document: dict[str, Any]
    png: bytes


@pytest.fixture(scope="module")
def rms_norm(tmp_path_factory: pytest.TempPathFactory) -> Shipped:
    """`kcatalog bench layernorm.rms_norm --device cpu --json F --plot P` on the shipped catalog, run once."""
    out = tmp_path_factory.mktemp("bench")
    json_path, png_path = out / "bench.json", out / "bench.png"
    with one_torch_thread():
        run = run_cli("bench", "layernorm.rms_norm", "--device", "cpu", "--json", json_path, "--plot", png_path)
    document = json.loads(json_path.read_text(encoding="utf-8")) if json_path.exists() else {}
    return Shipped(run, json_path, png_path, document, png_path.read_bytes() if png_path.exists() else b"")


def test_bench_of_one_shipped_op_exits_0_and_prints_a_table(rms_norm: Shipped) -> None:
    assert rms_norm.run.code == 0, rms_norm.run.out + rms_norm.run.err
    lines = rms_norm.run.out.splitlines()
    assert lines[0].split() == [
        "op",
        "backend",
        "dtype",
        "shape",
        "sizes",
        "time",
        "us",
        "GB/s",
        "of",
        "copy",
        "x",
        "ref",
    ]
    assert re.search(r"^copy bandwidth: \d+\.\d GB/s \(bytes read \+ written\)$", rms_norm.run.out, re.M)
    assert any(line.startswith("note: layernorm.rms_norm [triton] float32: skipped, ") for line in lines)
    assert lines[-2:] == [f"wrote {rms_norm.json_path}", f"wrote {rms_norm.png_path}"]
    assert rms_norm.run.err.splitlines()[-1].endswith("12/12 done")  # the progress bar, on stderr


def test_bench_json_has_the_figures(rms_norm: Shipped) -> None:
    document = rms_norm.document
    assert document["copy_gbps"] > 0
    assert (document["shapes"], document["dtypes"]) == ("decode", ["float32"])
    results = document["results"]
    # decode shapes T in 1, 8, 64 by H in 4096, 8192; torch and aten run on the CPU, reference first.
    assert [(r["backend"], r["sizes"]) for r in results] == [
        (backend, f"T={t} H={h}") for t in (1, 8, 64) for h in (4096, 8192) for backend in ("torch", "aten")
    ]
    for r in results:
        assert (r["op"], r["dtype"], r["shapes"], r["method"], r["error"]) == (
            "layernorm.rms_norm",
            "float32",
            "decode",
            "wall-clock",
            "",
        )
        assert r["time_us"] > 0
        assert r["gbps"] == pytest.approx(r["bytes_moved"] / (r["time_us"] * 1e3))
        assert r["fraction_of_copy"] == pytest.approx(r["gbps"] / document["copy_gbps"])
        assert r["speedup_vs_reference"] > 0
    reference = [r for r in results if r["backend"] == "torch"]
    assert [r["speedup_vs_reference"] for r in reference] == [1.0] * 6
    aten = {r["sizes"]: r for r in results if r["backend"] == "aten"}
    for ref in reference:
        assert aten[ref["sizes"]]["speedup_vs_reference"] == pytest.approx(
            ref["time_us"] / aten[ref["sizes"]]["time_us"]
        )


def test_bench_bytes_moved_are_the_fewest_the_op_must_move(rms_norm: Shipped) -> None:
    by_shape = {(r["backend"], r["sizes"]): r["bytes_moved"] for r in rms_norm.document["results"]}
    # T=1, H=4096 in float32: x read (4096 * 4) + weight read (4096 * 4) + y written (4096 * 4).
    assert by_shape["torch", "T=1 H=4096"] == 16384 + 16384 + 16384 == 49152
    # T=64, H=8192: x read 2 MiB, weight read 32 KiB, y written 2 MiB.
    assert by_shape["aten", "T=64 H=8192"] == 2097152 + 32768 + 2097152
    for (_, sizes), moved in by_shape.items():
        t, h = (int(v) for v in re.findall(r"\d+", sizes))
        assert moved == (t * h + h + t * h) * 4


def test_bench_plot_is_a_png(rms_norm: Shipped) -> None:
    png = rms_norm.png
    assert png[:8] == PNG_MAGIC
    assert png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 300 and height > 200
    assert len(png) > 8_000  # axes, lines and labels drawn, not an empty canvas


def test_bytes_moved_counts_mutated_arguments_as_written_once() -> None:
    x, residual, weight = torch.zeros(8, 64), torch.zeros(8, 64), torch.zeros(64, dtype=torch.bfloat16)
    call = Call({"x": x, "residual": residual, "weight": weight, "eps": 1e-6})
    read = 2 * 8 * 64 * 4 + 64 * 2
    assert bytes_moved(call, None, ("x", "residual")) == read + 2 * 8 * 64 * 4
    assert bytes_moved(call, (torch.zeros(8, 64, dtype=torch.float8_e4m3fn), torch.zeros(8, 1)), ()) == (
        read + 8 * 64 + 8 * 4
    )


# -- throwaway catalogs ---------------------------------------------------------------------------------

KERNELS = """
    def twice(x):
        return 2 * x


    def raises(x):
        raise RuntimeError("no kernel for this shape")
"""


def bench_catalog(workspace: Workspace, backends: dict[str, str]) -> Path:
    module = workspace.module("kc_conformance_bench_kernels", KERNELS)
    return workspace.write(
        {
            "scale2": declare_op(
                module,
                backends,
                samples={
                    "sizes": {"T": [4], "H": [16]},
                    "args": {"x": {"shape": ["T", "H"]}},
                    "decode": {"T": [2]},
                    "prefill": {"T": [3, 5], "H": [32]},
                },
            )
        },
        backends=list(backends),
        group="t",
    )


def test_a_backend_that_raises_is_an_error_row_and_the_run_goes_on(
    workspace: Workspace, tmp_path: Path, single_threaded: None
) -> None:
    catalog = bench_catalog(workspace, {"torch": "twice", "broken": "raises", "good": "twice"})
    report = tmp_path / "bench.json"
    result = run_cli("bench", "--catalog", catalog, "--device", "cpu", "--json", report)
    assert result.code == 1, result.err
    assert re.search(
        r"^t\.scale2 +broken +float32 +decode +T=2 H=16 +error: RuntimeError: no kernel for this "
        r"shape +- +- +-$",
        result.out,
        re.M,
    ), result.out
    assert re.search(r"^t\.scale2 +good +float32 +decode +T=2 H=16 +\d+\.\d +", result.out, re.M), result.out
    rows = {r["backend"]: r for r in json.loads(report.read_text(encoding="utf-8"))["results"]}
    assert list(rows) == ["torch", "broken", "good"]  # the reference first, then declaration order
    assert (rows["broken"]["error"], rows["broken"]["time_us"], rows["broken"]["speedup_vs_reference"]) == (
        "RuntimeError: no kernel for this shape",
        None,
        None,
    )
    assert rows["good"]["error"] == "" and rows["good"]["time_us"] > 0
    assert rows["good"]["bytes_moved"] == 2 * (2 * 16 * 4)
    assert rows["torch"]["speedup_vs_reference"] == 1.0


def test_prefill_shapes(workspace: Workspace, tmp_path: Path, single_threaded: None) -> None:
    catalog = bench_catalog(workspace, {"torch": "twice", "good": "twice"})
    report = tmp_path / "bench.json"
    result = run_cli("bench", "--catalog", catalog, "--device", "cpu", "--shapes", "prefill", "--json", report)
    assert result.code == 0, result.err
    document = json.loads(report.read_text(encoding="utf-8"))
    assert document["shapes"] == "prefill"
    assert [(r["backend"], r["shapes"], r["sizes"], r["bytes_moved"]) for r in document["results"]] == [
        (backend, "prefill", f"T={t} H=32", 2 * t * 32 * 4) for t in (3, 5) for backend in ("torch", "good")
    ]
    assert all(r["time_us"] > 0 and r["error"] == "" for r in document["results"])


def test_unknown_shapes_kind_is_a_usage_error() -> None:
    result = run_cli("bench", "--shapes", "huge")
    assert result.code == 2
    assert (
        "argument --shapes: invalid choice: 'huge' (choose from decode, prefill, all)" in result.err
        or "argument --shapes: invalid choice: 'huge' (choose from 'decode', 'prefill', 'all')" in result.err
    )


def test_a_shape_that_cannot_be_built_is_an_error_row(workspace: Workspace) -> None:
    module = workspace.module("kc_conformance_bench_kernels", KERNELS)
    catalog = workspace.write(
        {
            "scale2": declare_op(
                module,
                {"torch": "twice"},
                samples={
                    "sizes": {"T": [4], "H": [16]},
                    "args": {"x": {"shape": ["T", "H - 20"]}},
                    "decode": {"H": [16, 24]},
                },
            )
        },
        backends=["torch"],
        group="t",
    )
    result = run_cli("bench", "--catalog", catalog, "--device", "cpu")
    assert result.code == 1, result.err
    assert re.search(
        r"^t\.scale2 +torch +float32 +decode +T=4 H=16 +error: RuntimeError: .*negative", result.out, re.M
    ), result.out
    assert re.search(r"^t\.scale2 +torch +float32 +decode +T=4 H=24 +\d+\.\d ", result.out, re.M), result.out


def test_graph_replays_rotate_sets_by_bytes_and_copy_large_decode_inputs() -> None:
    """A decode job whose inputs are large (an MoE layer's expert weights) rotates 2 sets copied on the device, not
    8 built on the CPU (that took a Mixtral-shaped tune past its 150 s cap on the H200); small ones stay as before."""
    from types import SimpleNamespace

    from kcatalog.tools.timing import GRAPH_INPUT_SETS, more_sets

    built: list[int] = []

    def build(i: int) -> Call:
        built.append(i)
        return Call({"x": torch.zeros(4)})

    for elements, sets, from_seeds in ((16, GRAPH_INPUT_SETS, True), (160 << 20, 2, False)):
        built.clear()
        job: Any = SimpleNamespace(shapes="decode", info=SimpleNamespace(mutates=()))
        first = Call({"x": torch.ones(elements, dtype=torch.int8)})
        more = more_sets(job, first, torch.empty(0, dtype=torch.int8), build)
        assert len(more) == sets - 1
        assert built == (list(range(1, sets)) if from_seeds else [])
        if not from_seeds:  # copies: the same values at other addresses
            assert more[0].kwargs["x"].data_ptr() != first.kwargs["x"].data_ptr()
            assert torch.equal(more[0].kwargs["x"], first.kwargs["x"])
