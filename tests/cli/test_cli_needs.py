"""What a command needs and this machine lacks (torch, a GPU, matplotlib, triton) is one usage error saying what
to install or pass, never an internal error; and every error of the tool has one form, `error: ...`."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from kcatalog.tools.cli import COMMANDS, main

Result = tuple[int, str, str]
TORCH_INSTALL = (
    "pip install 'kcatalog[torch]' (on a machine without a GPU, first: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu)"
)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def invoke(*argv: str) -> Result:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


@pytest.mark.parametrize("command", ["test", "bench", "tune --device cpu --out x", "tune --out x"])
def test_a_command_that_runs_kernels_says_torch_is_needed(
    run: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """The core install (no torch): not `internal error: ModuleNotFoundError`, nor `0 checks, 0 failed.`."""
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails as where it is not installed
    name = command.split()[0]
    code, out, err = run(*command.split())
    assert (code, out) == (2, "")
    assert err.startswith(f"usage: kcatalog {name} ")
    assert err.splitlines()[-1] == (
        f"error: kcatalog {name} runs kernels and needs torch, which is not installed here: {TORCH_INSTALL}"
    )


def test_a_torch_that_cannot_be_imported_says_why(run: Callable[..., Result], monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def find_spec(self, name: str, path: object = None, target: object = None) -> None:
            if name == "torch":
                raise ImportError("libtorch_cpu.so: cannot open shared object file")

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    code, _, err = run("bench")
    assert code == 2
    assert err.splitlines()[-1] == (
        "error: kcatalog bench runs kernels and needs torch, which cannot be imported (ImportError: "
        f"libtorch_cpu.so: cannot open shared object file) here: {TORCH_INSTALL}"
    )


@pytest.mark.parametrize("command", ["test", "bench", "tune --out x"])
def test_no_gpu_suggests_the_cpu(run: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    code, out, err = run(*command.split(), "--device", "cuda")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "error: --device cuda: no CUDA device is available here (torch.cuda.is_available() is False; "
        f"torch {torch.__version__} is a CPU-only build); pass --device cpu to run on the CPU"
    )


def test_plot_without_matplotlib_fails_before_timing_anything(
    run: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = run("bench", "layernorm.rms_norm", "--plot", "x.png")
    assert (code, out) == (2, "")  # no table: nothing was timed
    assert err.splitlines()[-1] == (
        "error: --plot needs matplotlib, which is not installed here: pip install 'kcatalog[plot]'"
    )


def test_interpret_without_triton_says_what_to_install(
    run: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the command sets it: restored afterwards
    monkeypatch.setitem(sys.modules, "triton", None)
    code, out, err = run("test", "--interpret")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "error: --interpret needs triton, which is not installed here: pip install 'kcatalog[triton]'"
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_prints_its_errors_in_one_form(run: Callable[..., Result], command: str) -> None:
    """argparse's own errors (`kcatalog explain: error: ...` before) and the commands' alike: `error: ...`, after
    the usage line that names the command."""
    code, out, err = run(command, "--no-such-option")
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert lines[0].startswith(f"usage: kcatalog {command} ")
    assert lines[-1].startswith("error: ")
    assert not any(line.startswith("kcatalog") for line in lines)


@pytest.mark.parametrize(
    ("argv", "last"),
    [
        ([], "error: the following arguments are required: COMMAND"),
        (["valdiate"], "error: unknown command 'valdiate' (did you mean 'validate'?); commands: validate, list, "),
        (["explain", "--platform", "cpu"], "error: give one op, or --all"),  # a command's own UsageError
    ],
)
def test_top_level_and_command_errors_share_the_form(run: Callable[..., Result], argv: list[str], last: str) -> None:
    code, _, err = run(*argv)
    assert code == 2
    assert err.splitlines()[-1].startswith(last)
