"""One CLI shape: catalog paths the same way for every command, the subcommand's usage on errors, Ctrl-C, a CUDA
device that is not there, unknown dtypes, and `validate --strict` / `--error-on` for CI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from catalog_builder import MINIMAL, Workspace, child_env

from kcatalog.tools.cli import COMMANDS, main

Result = tuple[int, str, str]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def invoke(*argv: str) -> Result:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


@pytest.fixture
def minimal(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The corpus's clean_minimal catalog (norm.rms_norm: torch) as `mycat/` in the working directory."""
    directory = workspace.minimal("mycat")
    monkeypatch.chdir(workspace.root)
    return directory


EXPLAIN_MINIMAL = (
    "norm.rms_norm on cpu: torch (kcatalog.kernels.torch.layernorm:rms_norm), by catalog default priority\n"
)


@pytest.mark.parametrize(
    "given", [["mycat"], ["--catalog", "mycat"], ["./mycat/"]], ids=["positional", "option", "slash"]
)
def test_explain_takes_catalog_paths_as_every_command_does(
    run: Callable[..., Result], minimal: Path, given: list[str]
) -> None:
    assert run("explain", "norm.rms_norm", *given, "--platform", "cpu") == (0, EXPLAIN_MINIMAL, "")
    assert run("validate", *given) == (0, "All checks passed!\n", "")
    code, out, _ = run("list", *given)
    assert code == 0 and out.splitlines()[1].split() == ["norm.rms_norm", "ref"]


# A user layer of one op on top of the shipped catalog: it declares no backends of its own (it uses shipped's) and
# meets the shipped policy, so that only the way the layers are named is under test.
USER_MANIFEST = """\
kcatalog: 1
group: mine
ops:
  rms_norm:
    description: the shipped RMS norm, as a user's op
    signature: "(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor"
    reference: torch
    fake: reference
    dtypes: [float32]
    samples:
      sizes: {T: [1, 3], H: [8]}
      args:
        x: {shape: [T, H]}
        weight: {shape: [H], range: [0.5, 1.5]}
        eps: 1.0e-6
      decode: {T: [1, 2], H: [8]}
    backends:
      torch: {target: "kcatalog.kernels.torch.layernorm:rms_norm", requires: [torch]}
      aten: {target: "kcatalog.kernels.aten.layernorm:rms_norm", requires: [torch]}
"""


# Every command that takes catalog layers: its options, placed between `shipped` and the user's directory (argparse
# alone took positionals only before the first option), and a part of its output that shows the user's op.
CATALOG_COMMANDS: dict[str, tuple[list[str], str]] = {
    "validate": (["--strict"], "All checks passed!\n"),
    "list": (["--output-format", "json"], '"layer": "mycat"'),
    "layers": (["--output-format", "json"], '"name": "mycat"'),
    "explain": (
        ["mine.rms_norm", "--platform", "cpu"],
        "mine.rms_norm on cpu: aten (kcatalog.kernels.aten.layernorm:rms_norm) [layer mycat]",
    ),
    "test": (["mine.rms_norm", "--seed", "1"], "\n2 checks, 0 failed.\n"),
    "bench": (["mine.rms_norm", "--device", "cpu"], "\nmine.rms_norm  aten "),
    "tune": (
        ["mine.rms_norm", "--device", "cpu", "--dtype", "float32", "--buckets", "1", "--out", "tuned"],
        "\nwrote tuned/cpu.yaml\n",
    ),
    "plan": (["--platform", "cpu"], "\n    mine.rms_norm:\n      float32: aten\n"),
    "report": (["--html", "page.html"], "wrote page.html (24 ops x "),  # the shipped 23 and the user's
}
RUN_KERNELS = {"test", "bench", "tune", "plan"}  # need torch


def test_every_command_that_takes_catalogs_is_covered() -> None:
    from kcatalog.tools.cli import _parser

    _, parsers = _parser()
    takes = {name for name, parser in parsers.items() if "--catalog" in parser.format_help()}
    assert takes == set(CATALOG_COMMANDS)


@pytest.mark.parametrize("command", sorted(CATALOG_COMMANDS))
def test_every_command_takes_shipped_and_a_user_directory(
    run: Callable[..., Result], workspace: Workspace, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    options, shown = CATALOG_COMMANDS[command]
    if command in RUN_KERNELS:
        pytest.importorskip("torch")
    workspace.files({"mine.yaml": USER_MANIFEST}, name="mycat")
    monkeypatch.chdir(workspace.root)
    code, out, err = run(command, "shipped", *options, "mycat")
    assert code == 0, err
    assert shown in out, out


def test_positional_paths_and_catalog_options_are_layers_in_order(run: Callable[..., Result], minimal: Path) -> None:
    code, out, err = run("layers", "shipped", "--catalog", "mycat", "--output-format", "json")
    assert code == 1  # both layers' settings declare torch and triton: the second is told to use the first's
    assert "KC220 backend 'torch' is already declared by layer 'shipped'" in err


def test_a_misspelt_path_is_reported_as_a_path(run: Callable[..., Result], minimal: Path) -> None:
    code, _, err = run("explain", "norm.rms_norm", "mycatt", "--platform", "cpu")
    assert code == 1 and err.splitlines()[0] == "KC006 path 'mycatt' does not exist"


def test_test_and_bench_take_ops_and_paths_positionally(run: Callable[..., Result], minimal: Path) -> None:
    # No samples declared: nothing to check, but the op and the catalog were both understood.
    code, out, err = run("test", "norm.*", "mycat", "--seed", "1")
    assert (code, err) == (1, "") and out.splitlines()[-1] == "0 checks, 0 failed."
    assert "note: norm.rms_norm: no samples declared" in out


def test_unrecognized_arguments_show_the_subcommand_usage(run: Callable[..., Result]) -> None:
    for command in COMMANDS:
        required = {
            "report": ["--html", "x.html"],
            "import-registry": ["--out", "x"],
            "dump-registry": ["m:o"],
            "tune": ["--out", "x"],
            "trace": ["show", "x.json"],
        }.get(command, [])
        code, out, err = run(command, *required, "--bogus-option")
        assert (code, out) == (2, ""), command
        assert err.startswith(f"usage: kcatalog {command} "), command
        assert err.splitlines()[-1] == "error: unrecognized arguments: --bogus-option", command


def test_an_output_file_that_cannot_be_written_is_one_clear_error(run: Callable[..., Result], tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "matrix.html"
    code, out, err = run("report", "--html", str(missing))
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == f"error: cannot write {missing}: No such file or directory"  # not "internal error"


@pytest.mark.parametrize(
    ("given", "hint"),
    [
        ("float128", ""),  # float16, float32 and float64 are equally near: no guess
        ("fp16", " (did you mean 'float16'?)"),  # the names other tools use
        ("bf16", " (did you mean 'bfloat16'?)"),
        ("half", " (did you mean 'float16'?)"),
        ("torch.float32", " (did you mean 'float32'?)"),
        ("BFloat16", " (did you mean 'bfloat16'?)"),
        ("bfloat61", " (did you mean 'bfloat16'?)"),
    ],
)
def test_an_unknown_dtype_is_a_usage_error(run: Callable[..., Result], given: str, hint: str) -> None:
    for command in ("explain", "test", "bench", "plan"):
        op = [] if command == "plan" else ["layernorm.rms_norm"]
        code, _, err = run(command, *op, "--dtype", given)
        assert code == 2
        assert err.startswith(f"usage: kcatalog {command} ")
        assert err.splitlines()[-1].startswith(
            f"error: argument --dtype: unknown dtype '{given}'{hint}; known: float64, float32,"
        )


@pytest.mark.skipif(
    os.environ.get("KCATALOG_TEST_DEVICE", "cpu") != "cpu", reason="the machine has a CUDA device to test on"
)
def test_device_cuda_without_cuda_is_one_clear_error(run: Callable[..., Result]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    for command in ("test", "bench", "tune --out x"):
        code, out, err = run(*command.split(), "--device", "cuda")
        assert (code, out) == (2, "")
        assert err.splitlines()[-1].startswith(
            "error: --device cuda: no CUDA device is available here (torch.cuda.is_available() is False"
        )
        assert err.endswith("; pass --device cpu to run on the CPU\n")


def test_ctrl_c_exits_130_with_one_line(run: Callable[..., Result], monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("kcatalog.load.check_catalog", interrupted)
    for argv in (["validate"], ["list"], ["explain", "layernorm.rms_norm"], ["layers"], ["report", "--html", "x"]):
        assert run(*argv) == (130, "", "\nerror: interrupted\n")


def test_ctrl_c_in_a_real_process(tmp_path: Path) -> None:
    """SIGINT to a running `python -m kcatalog`: exit 130, one line, no KeyboardInterrupt traceback."""
    script = textwrap.dedent(
        """\
        import sys, time
        import kcatalog.load
        def slow(*args, **kwargs):
            print("ready", flush=True)
            time.sleep(60)
        kcatalog.load.check_catalog = slow
        from kcatalog.tools.cli import main
        raise SystemExit(main(["validate"]))
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert (child.returncode, out, err) == (130, "", "\nerror: interrupted\n")


NOT_INSTALLED = "kcatalg.kernels.torch.layernorm:rms_norm"  # 'kcatalog' misspelt


@pytest.fixture
def misspelt(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Path:
    manifest = (MINIMAL / "norm.yaml").read_text(encoding="utf-8").replace("kcatalog.kernels", "kcatalg.kernels")
    directory = workspace.files({"kcatalog.yaml": (MINIMAL / "kcatalog.yaml").read_bytes(), "norm.yaml": manifest})
    monkeypatch.chdir(directory)
    return directory


KC303 = (
    "norm.yaml:11:17: KC303 {label}module 'kcatalg.kernels.torch.layernorm' unavailable here: top-level package "
    "'kcatalg' is not installed (did you mean 'kcatalog'?)"
)


def test_a_misspelt_top_level_package_is_a_warning_that_suggests_the_installed_one(
    run: Callable[..., Result], misspelt: Path
) -> None:
    code, out, _ = run("validate", ".")
    assert (code, out.splitlines()) == (0, [KC303.format(label="warning: "), "All checks passed! (1 warning)"])


@pytest.mark.parametrize("option", [["--strict"], ["--error-on", "KC303"], ["--error-on", "KC304,KC303"]])
def test_strict_and_error_on_make_warnings_fail(run: Callable[..., Result], misspelt: Path, option: list[str]) -> None:
    code, out, _ = run("validate", ".", *option)
    assert (code, out.splitlines()) == (1, [KC303.format(label=""), "Found 1 error in 1 file."])


def test_error_on_other_codes_leaves_the_warning_a_warning(run: Callable[..., Result], misspelt: Path) -> None:
    assert run("validate", ".", "--error-on", "KC304")[0] == 0


def test_error_on_an_unknown_code_is_a_usage_error(run: Callable[..., Result], misspelt: Path) -> None:
    code, out, err = run("validate", ".", "--error-on", "KC303,KC3033")  # a typo would make nothing fail
    assert (code, out) == (2, "")
    assert err.startswith("usage: kcatalog validate ")
    assert err.endswith("error: --error-on: unknown code KC3033 (did you mean 'KC303'?)\n")


def test_core_only_install_explains_why_torch_backends_cannot_run(
    run: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every shipped torch, aten and torch_compile backend declares `requires: [torch]`: without torch, explain
    says so instead of selecting one."""
    from kcatalog import platform

    real = platform.is_installed.__wrapped__  # type: ignore[attr-defined]
    monkeypatch.setattr(platform, "is_installed", lambda dist: dist not in ("torch", "triton") and real(dist))
    monkeypatch.setattr("kcatalog.select.selection.is_installed", platform.is_installed)
    code, out, _ = run("explain", "layernorm.rms_norm", "--platform", "cpu")
    assert code == 1
    assert out.splitlines() == [
        "layernorm.rms_norm on cpu: nothing eligible",
        "  aten: needs torch, not installed",
        "  torch: needs torch, not installed",
        "  torch_compile: runs on cuda >= 7.0, not cpu; runs on hip, not cpu",
        "  triton: runs on cuda >= 8.0, not cpu; runs on hip, not cpu",
        "  backward: layernorm.rms_norm_backward runs nothing eligible; gradients of x, weight; torch: needs torch,"
        " not installed; triton: runs on cuda >= 8.0, not cpu; runs on hip, not cpu",
    ]
