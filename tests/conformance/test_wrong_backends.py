"""Deliberately wrong backends are caught, with the seed and the figures, by `kcatalog test` and the pytest plugin.

One throwaway catalog holds every wrong backend as a backend of one op, so each front end runs once per
module and the tests below read that run.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from catalog_builder import Workspace, workspace_at
from conformance_support import Run, declare_op, run_cli

SEED = 7
MODULE = "kc_conformance_wrong_kernels"
SINGLE = "kc_conformance_wrong_kernels_single"  # the same kernels, for the tests that write their own catalog
KERNELS = """
    import torch


    def twice(x):
        return 2 * x


    def off_by_one_percent(x):
        return 2.02 * x


    def last_row_unwritten(x):
        out = torch.empty_like(x)
        out[:-1] = 2 * x[:-1]
        return out


    def mutates_its_input(x):
        out = 2 * x
        x.add_(1.0)
        return out


    def one_nan(x):
        out = 2 * x
        out[1, 3] = float("nan")
        return out


    def raises(x):
        raise RuntimeError("kernel exploded on purpose")


    def float_noise(x):
        return (2 * x) * (1 + 1e-6)


    def float64_output(x):
        return 2 * x.double()


    def twice_in_place(x):
        x.mul_(2)


    def forgets_to_write(x):
        return 2 * x
"""

SIZES = ("T=4 H=16", "T=4 H=33")
SAMPLES = {"sizes": {"T": [4], "H": [16, 33]}, "args": {"x": {"shape": ["T", "H"]}}}
SCALE2 = {
    "torch": "twice",
    "scaled": "off_by_one_percent",
    "unwritten": "last_row_unwritten",
    "mutating": "mutates_its_input",
    "nan_output": "one_nan",
    "raising": "raises",
    "noisy": "float_noise",
}
INPLACE = {"torch": "twice_in_place", "forgetful": "forgets_to_write"}

# What each wrong backend's failure says, after "FAIL <op> [<backend>] float32 <sizes>: ".
CAUGHT = {
    ("t.scale2", "scaled"): r"relative error 1\.000e-02 > tolerance 1\.0e-05",
    # Unwritten CPU memory is whatever malloc hands back: garbage, zeros, NaN. In the first run over this
    # catalog no freed block holds the right answer yet (see test_unwritten_memory_is_always_caught_as_nan).
    ("t.scale2", "unwritten"): r"(relative error \d\.\d{3}e[+-]\d+ > tolerance 1\.0e-05"
    r"|\d+ of \d+ elements of 'return' are NaN or Inf \(unwritten or overflowed\))",
    ("t.scale2", "mutating"): r"changed 'x', which the op does not declare in mutates",
    ("t.scale2", "nan_output"): r"1 of (64|132) elements of 'return' are NaN or Inf \(unwritten or overflowed\)",
    ("t.scale2", "raising"): r"raised RuntimeError: kernel exploded on purpose",
    ("t.inplace", "forgetful"): r"relative error 5\.000e-01 > tolerance 1\.0e-05",
}
PASSING = [("t.scale2", "noisy")]


def failure_pattern(op: str, backend: str, sizes: str, what: str) -> str:
    """A whole FAIL line: the figures, the base seed, the case seed and a reproduce command.

    The reproduce command may carry more options than op, backend, dtype and seed (see
    test_the_reproduce_command_reproduces), so only those are pinned.
    """
    return (
        rf"^FAIL {re.escape(op)} \[{backend}\] float32 {re.escape(sizes)}: {what} "
        rf"\(seed {SEED}; case seed \d+; reproduce: kcatalog test {re.escape(op)}\b[^()\n]*"
        rf" --backend {backend}\b[^()\n]* --dtype float32\b[^()\n]* --seed {SEED}\b[^()\n]*\)$"
    )


class Fixture(NamedTuple):
    workspace: Workspace
    concise: Run
    json: Run


@pytest.fixture(scope="module")
def wrong(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixture]:
    """The throwaway catalog, and `kcatalog test` over it once in each output format."""
    with workspace_at(tmp_path_factory.mktemp("wrong")) as workspace:
        workspace.module(MODULE, KERNELS)
        workspace.write(
            {
                "scale2": declare_op(MODULE, SCALE2, samples=SAMPLES),
                "inplace": declare_op(
                    MODULE,
                    INPLACE,
                    signature="(x: Tensor) -> None",
                    mutates=["x"],
                    samples={"sizes": {"T": [4], "H": [16]}, "args": {"x": {"shape": ["T", "H"]}}, "compare": ["x"]},
                ),
            },
            backends=list(dict.fromkeys([*SCALE2, *INPLACE])),
            group="t",
        )
        argv = ["test", "--catalog", workspace.catalog_dir, "--seed", str(SEED)]
        # The JSON run leaves out the backend that leaves memory unwritten: after the first run, the CPU
        # allocator may hand it a block holding the right answer (test_unwritten_memory_is_always_caught_as_nan).
        json_backends = ["--backend", "scaled", "--backend", "raising", "--backend", "noisy", "--backend", "forgetful"]
        yield Fixture(workspace, run_cli(*argv), run_cli(*argv, *json_backends, "--output-format", "json"))


def backend_ids(cases: dict[tuple[str, str], str] | list[tuple[str, str]]) -> list[str]:
    return [f"{op}[{backend}]" for op, backend in cases]


# -- kcatalog test --------------------------------------------------------------------------------------


def test_cli_exits_1_and_counts_the_failures(wrong: Fixture) -> None:
    assert wrong.concise.code == 1, wrong.concise.err
    assert wrong.concise.err == ""
    lines = wrong.concise.out.splitlines()
    assert lines[0] == f"seed {SEED}"
    # 7 backends of t.scale2 less the reference, 2 sizes each, plus 1 check of t.inplace.
    assert lines[-1] == "13 checks, 11 failed."


@pytest.mark.parametrize(("op", "backend"), list(CAUGHT), ids=backend_ids(CAUGHT))
def test_cli_catches_the_wrong_backend_with_seed_and_figures(wrong: Fixture, op: str, backend: str) -> None:
    sizes = [s for s in SIZES if op == "t.scale2"] or ["T=4 H=16"]
    for size in sizes:
        assert re.search(failure_pattern(op, backend, size, CAUGHT[op, backend]), wrong.concise.out, re.M), (
            wrong.concise.out
        )
    rows = [line.split() for line in wrong.concise.out.splitlines() if line.startswith(f"{op} ")]
    assert [row[-1] for row in rows if row[1] == backend] == ["FAIL"] * len(sizes)


@pytest.mark.parametrize(("op", "backend"), PASSING, ids=backend_ids(PASSING))
def test_cli_passes_a_backend_within_tolerance(wrong: Fixture, op: str, backend: str) -> None:
    rows = [line.split() for line in wrong.concise.out.splitlines() if line.startswith(f"{op} ")]
    mine = [row for row in rows if row[1] == backend]
    assert [row[-1] for row in mine] == ["ok", "ok"]
    assert all(1e-7 < float(row[-3]) < 1e-5 for row in mine)  # rel err: noise there, but under the tolerance
    assert f"[{backend}]" not in "".join(line for line in wrong.concise.out.splitlines() if line.startswith("FAIL"))


def test_cli_json_carries_seed_and_figures_of_failures(wrong: Fixture) -> None:
    assert wrong.json.code == 1
    document = json.loads(wrong.json.out)
    assert document["seed"] == SEED
    assert document["summary"] == {"checks": 7, "failed": 5}
    by_backend = {(r["op"], r["backend"], r["sizes"]): r for r in document["results"]}
    scaled = by_backend["t.scale2", "scaled", "T=4 H=16"]
    assert scaled["passed"] is False
    assert scaled["relative_error"] == pytest.approx(1e-2, rel=1e-4)
    assert scaled["max_abs_error"] == pytest.approx(0.02, rel=0.05)  # 0.02 * |x|, x uniform in [-1, 1)
    assert scaled["tolerance"] == 1e-5
    assert scaled["message"] == "relative error 1.000e-02 > tolerance 1.0e-05"
    raising = by_backend["t.scale2", "raising", "T=4 H=16"]
    assert (raising["passed"], raising["relative_error"], raising["message"]) == (
        False,
        None,
        "raised RuntimeError: kernel exploded on purpose",
    )
    noisy = by_backend["t.scale2", "noisy", "T=4 H=16"]
    assert noisy["passed"] is True and 1e-7 < noisy["relative_error"] < 1e-5
    concise_seeds = set(re.findall(r"case seed (\d+)", wrong.concise.out))
    assert {str(r["seed"]) for r in document["results"] if not r["passed"]} == concise_seeds


def test_cli_catches_an_output_of_the_wrong_dtype(workspace: Workspace) -> None:
    workspace.module(SINGLE, KERNELS)
    catalog = workspace.write(
        {"scale2": declare_op(SINGLE, {"torch": "twice", "wrong_dtype": "float64_output"}, samples=SAMPLES)},
        backends=["torch", "wrong_dtype"],
        group="t",
    )
    result = run_cli("test", "--catalog", catalog, "--seed", str(SEED))
    assert result.code == 1, result.out
    for size in SIZES:
        pattern = failure_pattern(
            "t.scale2", "wrong_dtype", size, r"output 'return' has dtype float64, expected float32"
        )
        assert re.search(pattern, result.out, re.M), result.out


def test_unwritten_memory_is_always_caught_as_nan(workspace: Workspace) -> None:
    """Whatever the allocator hands back, every unwritten element reads as NaN (and so is counted)."""
    workspace.module(SINGLE, KERNELS)
    catalog = workspace.write(
        {
            "scale2": declare_op(
                SINGLE, {"torch": "twice", "good": "twice", "unwritten": "last_row_unwritten"}, samples=SAMPLES
            )
        },
        backends=["torch", "good", "unwritten"],
        group="t",
    )
    for _ in range(3):  # later runs find the good backend's outputs, for the same inputs, freed
        result = run_cli("test", "--catalog", catalog, "--seed", str(SEED))
        for size, row in (("T=4 H=16", 16), ("T=4 H=33", 33)):
            what = rf"{row} of {4 * row} elements of 'return' are NaN or Inf \(unwritten or overflowed\)"
            assert re.search(failure_pattern("t.scale2", "unwritten", size, what), result.out, re.M), result.out


def test_the_reproduce_command_reproduces(wrong: Fixture) -> None:
    line = next(line for line in wrong.concise.out.splitlines() if line.startswith("FAIL t.scale2 [scaled]"))
    command = shlex.split(line.partition("reproduce: ")[2].removesuffix(")"))
    assert command[:2] == ["kcatalog", "test"]
    again = run_cli(*command[1:])
    assert again.code == 1, again.err
    assert line in again.out.splitlines()


# -- the pytest plugin ----------------------------------------------------------------------------------


class PluginRun(NamedTuple):
    code: int
    out: str
    outcomes: dict[str, str]  # test name -> failure text, '' when it passed


def plugin_argv(wrong: Fixture, *extra: str) -> list[str]:
    """A child `pytest --kcatalog` over the wrong backends' catalog, with the base seed."""
    catalog = str(wrong.workspace.catalog_dir)
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--kcatalog",
        catalog,
        "--kcatalog-seed",
        str(SEED),
        *extra,
    ]


@pytest.fixture(scope="module")
def plugin(wrong: Fixture, tmp_path_factory: pytest.TempPathFactory) -> PluginRun:
    """`pytest --kcatalog CATALOG --kcatalog-seed 7 -q` in a child process, with its JUnit XML report."""
    cwd = tmp_path_factory.mktemp("plugin")
    report = cwd / "report.xml"
    proc = subprocess.run(
        plugin_argv(wrong, "-q", f"--junitxml={report}"),
        cwd=cwd,
        env=wrong.workspace.child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.exists(), proc.stdout + proc.stderr
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        failure = case.find("failure")
        outcomes[case.get("name", "")] = "" if failure is None else (failure.text or failure.get("message", ""))
    return PluginRun(proc.returncode, proc.stdout + proc.stderr, outcomes)


def plugin_name(op: str, backend: str, sizes: str) -> str:
    return f"kcatalog[{op}-{backend}-float32-{sizes.replace(' ', ',')}]"


def test_plugin_exits_1_with_one_test_per_backend_and_size(plugin: PluginRun) -> None:
    assert plugin.code == 1, plugin.out
    assert len(plugin.outcomes) == 13
    assert sum(bool(text) for text in plugin.outcomes.values()) == 11
    assert re.search(r"^11 failed, 2 passed in ", plugin.out, re.M), plugin.out


@pytest.mark.parametrize(("op", "backend"), list(CAUGHT), ids=backend_ids(CAUGHT))
def test_plugin_reports_the_failure_with_seed_and_figures(plugin: PluginRun, op: str, backend: str) -> None:
    for size in [s for s in SIZES if op == "t.scale2"] or ["T=4 H=16"]:
        report = plugin.outcomes[plugin_name(op, backend, size)]
        assert re.fullmatch(failure_pattern(op, backend, size, CAUGHT[op, backend]), report.strip(), re.M), report
        assert report.strip() in plugin.out  # the terminal shows it, not only the XML


@pytest.mark.parametrize(("op", "backend"), PASSING, ids=backend_ids(PASSING))
def test_plugin_passes_a_backend_within_tolerance(plugin: PluginRun, op: str, backend: str) -> None:
    assert [plugin.outcomes[plugin_name(op, backend, size)] for size in SIZES] == ["", ""]


@pytest.mark.parametrize("backend", ["scaled", "mutating", "nan_output", "raising"])
def test_plugin_and_cli_agree_on_the_same_seed(wrong: Fixture, plugin: PluginRun, backend: str) -> None:
    """Same base seed, same inputs: the same case seeds and the same figures (the reproduce hint aside)."""
    for size in SIZES:
        report = plugin.outcomes[plugin_name("t.scale2", backend, size)].strip()
        head = report.partition("; reproduce:")[0]
        assert head.startswith(f"FAIL t.scale2 [{backend}] float32 {size}: ")
        assert any(line.startswith(head) for line in wrong.concise.out.splitlines()), (head, wrong.concise.out)


def test_plugin_header_shows_the_seed(wrong: Fixture, tmp_path: Path) -> None:
    proc = subprocess.run(
        plugin_argv(wrong, "--collect-only"),
        cwd=tmp_path,
        env=wrong.workspace.child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"kcatalog: base seed {SEED}" in proc.stdout.splitlines(), proc.stdout
