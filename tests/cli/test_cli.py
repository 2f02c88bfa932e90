"""The `kcatalog` command line, driven through `main([...])`: exit codes, output formats, usage errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from catalog_builder import Workspace, child_env

from kcatalog import load  # the loader's module, to make the CLI's call of it fail (main's error handling)
from kcatalog.tools.cli import main

SETTINGS = """\
kcatalog: 1
backends:
  torch: {description: reference}
  triton: {description: fused Triton kernels}
  rocm: {description: hand-written ROCm kernels}
priority: [triton, rocm, torch]
platform_priority:
  cpu: [torch]
"""

NORM = """\
kcatalog: 1
group: norm
ops:
  rms_norm:
    description: RMS norm over the last dim
    signature: "(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor"
    reference: torch
    dtypes: [float32, bfloat16]
    backends:
      torch:
        target: kcatalog.kernels.torch.layernorm:rms_norm
      triton:
        target: kcatalog.kernels.triton.layernorm:rms_norm
        capabilities: [{device: cuda, min_arch: "8.0"}]
        dtypes: [bfloat16]
      rocm:
        target: kcatalog.kernels.torch.layernorm:rms_norm
        capabilities: [{device: hip, archs: [gfx942, gfx950]}]
  layer_norm:
    description: layer norm over the last dim
    signature: "(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor"
    reference: torch
    dtypes: [float32]
    backends:
      torch:
        target: kcatalog.kernels.torch.layernorm:layer_norm
"""

# Two errors and a warning: a misspelt backend name, a misspelt target, a package not installed here.
BROKEN = (
    NORM.replace("      triton:\n", "      tirton:\n")
    .replace("layernorm:rms_norm\n      tirton", "layernorm:rms_nrom\n      tirton")
    .replace(
        "target: kcatalog.kernels.torch.layernorm:rms_norm\n        capabilities: [{device: hip",
        "target: kc_rocm_kernels_absent.norm:rms_norm\n        capabilities: [{device: hip",
    )
)
BROKEN_CONCISE = [
    "norm.yaml:11:17: KC302 target 'kcatalog.kernels.torch.layernorm:rms_nrom': module "
    "'kcatalog.kernels.torch.layernorm' defines no 'rms_nrom' (did you mean 'rms_norm'?)",
    "norm.yaml:12:7: KC203 unknown backend 'tirton' in op 'norm.rms_norm' (did you mean 'triton'?); "
    "known: torch, triton, rocm",
    "norm.yaml:17:17: KC303 warning: module 'kc_rocm_kernels_absent.norm' unavailable here: "
    "top-level package 'kc_rocm_kernels_absent' is not installed; install it to check this target",
    "Found 2 errors and 1 warning in 1 file.",
]


class Run(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """`run(*argv)`: main's exit code and what it printed."""

    def invoke(*argv: str) -> Run:
        code = main(list(argv))
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return invoke


@pytest.fixture
def catalog(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """`catalog(manifest_text)`: a catalog directory with that norm.yaml, made the working directory."""

    def write(manifest: str = NORM, name: str = "norm.yaml") -> Path:
        directory = workspace.files({"kcatalog.yaml": SETTINGS, name: manifest})
        monkeypatch.chdir(directory)
        return directory

    return write


# -- validate ------------------------------------------------------------------------------------------


def test_validate_clean(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog()
    assert run("validate", ".") == Run(0, "All checks passed!\n", "")


def test_validate_shipped_catalog_by_default(run: Callable[..., Run]) -> None:
    assert run("validate") == Run(0, "All checks passed!\n", "")


def test_validate_broken(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog(BROKEN)
    result = run("validate", ".")
    assert (result.code, result.out.splitlines(), result.err) == (1, BROKEN_CONCISE, "")


def test_exit_zero_reports_but_passes(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog(BROKEN)
    result = run("validate", ".", "--exit-zero")
    assert (result.code, result.out.splitlines()) == (0, BROKEN_CONCISE)


def test_a_single_file_is_checked_with_the_settings_beside_it(
    run: Callable[..., Run], catalog: Callable[..., Path]
) -> None:
    catalog()
    assert run("validate", "norm.yaml") == Run(0, "All checks passed!\n", "")


def test_no_targets_skips_the_target_checks(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog(BROKEN)
    result = run("validate", ".", "--no-targets")
    assert (result.code, result.out.splitlines()) == (1, [BROKEN_CONCISE[1], "Found 1 error in 1 file."])


def test_allow_module_refuses_targets_elsewhere(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog()
    result = run("validate", ".", "--allow-module", "kcatalog.kernels.torch")
    assert (result.code, result.out.splitlines()) == (
        1,
        [
            "norm.yaml:13:17: KC305 target 'kcatalog.kernels.triton.layernorm:rms_norm' is outside the allowed "
            "modules (allowed_modules: kcatalog.kernels.torch)",
            "Found 1 error in 1 file.",
        ],
    )


def test_json_report(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog(BROKEN)
    result = run("validate", ".", "--output-format", "json")
    document = json.loads(result.out)
    assert result.code == 1
    assert [(d["code"], d["severity"], d["path"], d["line"], d["col"]) for d in document["diagnostics"]] == [
        ("KC302", "error", "norm.yaml", 11, 17),
        ("KC203", "error", "norm.yaml", 12, 7),
        ("KC303", "warning", "norm.yaml", 17, 17),
    ]
    assert document["diagnostics"][1]["message"] == BROKEN_CONCISE[1].split(" KC203 ", 1)[1]
    assert document["summary"] == {"errors": 2, "warnings": 1, "files": 1}


@pytest.mark.parametrize(
    ("files", "code", "summary"),
    [
        ({"norm.yaml": NORM}, 0, {"errors": 0, "warnings": 0, "files": 0}),
        ({"norm.yaml": "ops: [unclosed\n"}, 1, {"errors": 1, "warnings": 0, "files": 1}),
        ({"norm.yaml": b"group: \xff\n"}, 1, {"errors": 1, "warnings": 0, "files": 1}),
        ({}, 1, {"errors": 2, "warnings": 0, "files": 0}),
    ],
    ids=["clean", "yaml-syntax", "not-utf8", "missing-path"],
)
def test_json_is_valid_whatever_happens(
    run: Callable[..., Run],
    workspace: Workspace,
    monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str | bytes],
    code: int,
    summary: dict[str, int],
) -> None:
    monkeypatch.chdir(workspace.files({"kcatalog.yaml": SETTINGS, **files} if files else {}))
    target = "." if files else "norm.yaml"
    result = run("validate", target, "--output-format", "json")
    assert result.code == code
    assert json.loads(result.out)["summary"] == summary


GITHUB_LINE = re.compile(r"^::(error|warning) file=[^,:]+,line=\d+,col=\d+,title=KC\d{3}::KC\d{3} .+$")


def test_github_annotations(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog(BROKEN)
    result = run("validate", ".", "--output-format", "github")
    lines = result.out.splitlines()
    assert result.code == 1
    assert all(GITHUB_LINE.match(line) for line in lines), lines
    assert lines[1] == (
        "::error file=norm.yaml,line=12,col=7,title=KC203::KC203 unknown backend 'tirton' in op "
        "'norm.rms_norm' (did you mean 'triton'?); known: torch, triton, rocm"
    )
    assert lines[2].startswith("::warning file=norm.yaml,line=17,col=17,title=KC303::KC303 module ")


def test_github_escapes_properties(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog(BROKEN, name="norm,v2.yaml")
    lines = run("validate", ".", "--output-format", "github").out.splitlines()
    assert lines[0].startswith("::error file=norm%2Cv2.yaml,line=11,col=17,title=KC302::KC302 target ")


def test_python_dash_m_validates(catalog: Callable[..., Path]) -> None:
    directory = catalog(BROKEN)
    result = subprocess.run(
        [sys.executable, "-m", "kcatalog", "validate", "."],
        capture_output=True,
        text=True,
        cwd=directory,
        env=child_env(),
        timeout=120,
    )
    assert (result.returncode, result.stdout.splitlines(), result.stderr) == (1, BROKEN_CONCISE, "")


# -- usage and internal errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["validate", "--output-format", "xml"],
        ["list", "--output-format", "yaml"],
        ["validate", "--no-such-flag"],
        ["explain", "--platform", "cpu"],
        ["explain", "norm.rms_norm", "--all", "--platform", "cpu"],
        ["explain", "norm.rms_norm", "--platform", "gpu"],
        ["explain", "norm.rms_norm", "--platform", "cuda:sm90"],
    ],
    ids=[
        "no-command",
        "unknown-command",
        "bad-format",
        "bad-list-format",
        "unknown-flag",
        "no-op",
        "op-and-all",
        "unknown-device",
        "malformed-arch",
    ],
)
def test_usage_errors_exit_2_without_a_traceback(run: Callable[..., Run], argv: list[str]) -> None:
    result = run(*argv)
    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith(("usage: ", "error: ")) and "Traceback" not in result.err


def test_usage_error_messages(run: Callable[..., Run]) -> None:
    """The subcommand's own usage, then one line saying what is wrong."""
    err = run("explain", "--platform", "cpu").err
    assert err.startswith("usage: kcatalog explain ") and err.endswith("\nerror: give one op, or --all\n")
    err = run("explain", "norm.rms_norm", "--platform", "gpu").err
    assert err.startswith("usage: kcatalog explain ") and err.endswith(
        "\nerror: unknown device 'gpu' in platform 'gpu' (did you mean 'cuda'?); expected one of cuda, hip, cpu, npu, "
        "xpu, mps, musa\n"
    )


def test_help_exits_0(run: Callable[..., Run]) -> None:
    result = run("--help")
    assert result.code == 0 and result.out.startswith("usage: kcatalog")


def test_an_internal_error_exits_2_with_one_line(run: Callable[..., Run], monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(load, "check_catalog", boom)
    assert run("validate") == Run(2, "", "error: internal error: RuntimeError: boom\n")


# -- list ----------------------------------------------------------------------------------------------


def test_list_text(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog()
    assert run("list", ".") == Run(
        0,
        (
            "op               torch  triton  rocm\n"
            "norm.layer_norm  ref    -       -\n"
            "norm.rms_norm    ref    yes     yes\n"
            "2 ops, 4 backend specs\n"
        ),
        "",
    )


def test_list_text_counts_one_op_in_the_singular(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog(
        NORM.split("  layer_norm:")[0].replace(
            """\
      triton:
        target: kcatalog.kernels.triton.layernorm:rms_norm
        capabilities: [{device: cuda, min_arch: "8.0"}]
        dtypes: [bfloat16]
      rocm:
        target: kcatalog.kernels.torch.layernorm:rms_norm
        capabilities: [{device: hip, archs: [gfx942, gfx950]}]
""",
            "",
        )
    )
    assert run("list", ".").out.splitlines()[-1] == "1 op, 1 backend spec"


def test_list_json(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog()
    result = run("list", ".", "--output-format", "json")
    document = json.loads(result.out)
    assert result.code == 0
    assert document["backends"] == ["torch", "triton", "rocm"]
    assert list(document["ops"]) == ["norm.layer_norm", "norm.rms_norm"]
    rms_norm = document["ops"]["norm.rms_norm"]
    assert (rms_norm["reference"], rms_norm["location"]) == ("torch", "norm.yaml:4:3")
    assert rms_norm["backends"]["triton"] == {
        "target": "kcatalog.kernels.triton.layernorm:rms_norm",
        "requires": [],
        "capabilities": [{"device": "cuda", "min_arch": "8.0"}],
        "dtypes": ["bfloat16"],
        "layer": ".",
    }


def test_list_of_a_broken_catalog_reports_on_stderr(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog(BROKEN)
    result = run("list", ".")
    assert (result.code, result.out, result.err.splitlines()) == (1, "", BROKEN_CONCISE)


# -- explain -------------------------------------------------------------------------------------------

EXPLAINED = {
    "cuda:9.0": [
        "norm.rms_norm on cuda:9.0: triton (kcatalog.kernels.triton.layernorm:rms_norm), by catalog default priority",
        "  rocm: runs on hip (gfx942, gfx950), not cuda",
        "  torch: ranked below triton by catalog default priority",
    ],
    "cuda:7.5": [
        "norm.rms_norm on cuda:7.5: torch (kcatalog.kernels.torch.layernorm:rms_norm), by catalog default priority",
        "  triton: needs cuda >= 8.0; this is cuda:7.5",
        "  rocm: runs on hip (gfx942, gfx950), not cuda",
    ],
    "hip:gfx942": [
        "norm.rms_norm on hip:gfx942: rocm (kcatalog.kernels.torch.layernorm:rms_norm), by catalog default priority",
        "  triton: runs on cuda >= 8.0, not hip",
        "  torch: ranked below rocm by catalog default priority",
    ],
    "hip:gfx90a": [
        "norm.rms_norm on hip:gfx90a: torch (kcatalog.kernels.torch.layernorm:rms_norm), by catalog default priority",
        "  triton: runs on cuda >= 8.0, not hip",
        "  rocm: needs hip arch in gfx942, gfx950; this is hip:gfx90a",
    ],
    "cpu": [
        "norm.rms_norm on cpu: torch (kcatalog.kernels.torch.layernorm:rms_norm), by catalog priority on cpu",
        "  triton: runs on cuda >= 8.0, not cpu",
        "  rocm: runs on hip (gfx942, gfx950), not cpu",
    ],
}


@pytest.mark.parametrize("platform", list(EXPLAINED))
def test_explain_text(run: Callable[..., Run], catalog: Callable[..., Path], platform: str) -> None:
    catalog()
    result = run("explain", "norm.rms_norm", "--platform", platform, "--catalog", ".")
    assert (result.code, result.out.splitlines(), result.err) == (0, EXPLAINED[platform], "")


@pytest.mark.parametrize(
    ("platform", "chosen", "decided_by", "order"),
    [
        ("cuda:9.0", "triton", "catalog default priority", ["triton", "rocm", "torch"]),
        ("hip:gfx942", "rocm", "catalog default priority", ["triton", "rocm", "torch"]),
        ("cpu", "torch", "catalog priority on cpu", ["torch", "triton", "rocm"]),
    ],
)
def test_explain_json(
    run: Callable[..., Run], catalog: Callable[..., Path], platform: str, chosen: str, decided_by: str, order: list[str]
) -> None:
    catalog()
    result = run("explain", "norm.rms_norm", "--platform", platform, "--catalog", ".", "--output-format", "json")
    [selection] = json.loads(result.out)
    assert result.code == 0
    assert {key: selection[key] for key in ("op", "platform", "chosen", "decided_by", "order", "notes")} == {
        "op": "norm.rms_norm",
        "platform": platform,
        "chosen": chosen,
        "decided_by": decided_by,
        "order": order,
        "notes": [],
    }
    reasons = [f"  {r['backend']}: {r['reason']}" for r in selection["rejected"]]
    assert reasons == EXPLAINED[platform][1:]


def test_explain_all_and_dtype(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog()
    result = run("explain", "--all", "--platform", "cuda:9.0", "--dtype", "float32", "--catalog", ".")
    assert (result.code, result.out.splitlines()) == (
        0,
        [
            "norm.layer_norm on cuda:9.0: torch (kcatalog.kernels.torch.layernorm:layer_norm), by catalog default priority",
            "norm.rms_norm on cuda:9.0: torch (kcatalog.kernels.torch.layernorm:rms_norm), by catalog default priority",
            "  triton: does not support float32 (supports bfloat16)",
            "  rocm: runs on hip (gfx942, gfx950), not cuda",
        ],
    )


def test_explain_shows_an_override_that_cannot_be_honoured(
    run: Callable[..., Run], catalog: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog()
    monkeypatch.setenv("KCATALOG_OVERRIDES", "norm.rms_norm=rocm")
    result = run("explain", "norm.rms_norm", "--platform", "cuda:9.0", "--catalog", ".")
    assert (result.code, result.out.splitlines()) == (
        0,
        [
            EXPLAINED["cuda:9.0"][0],
            "  note: KCATALOG_OVERRIDES norm.rms_norm=rocm ignored: rocm cannot run (runs on hip (gfx942, gfx950), "
            "not cuda)",
            *EXPLAINED["cuda:9.0"][1:],
        ],
    )


def test_explain_with_nothing_eligible_exits_1(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog()
    result = run("explain", "norm.layer_norm", "--platform", "cpu", "--dtype", "bfloat16", "--catalog", ".")
    assert (result.code, result.out.splitlines()) == (
        1,
        [
            "norm.layer_norm on cpu: nothing eligible",
            "  torch: does not support bfloat16 (supports float32)",
        ],
    )


def test_explain_unknown_op_names_the_ops(run: Callable[..., Run], catalog: Callable[..., Path]) -> None:
    catalog()
    assert run("explain", "norm.rms", "--platform", "cpu", "--catalog", ".") == Run(
        1, "", "error: no op 'norm.rms' (did you mean 'norm.rms_norm'?). Available: norm.layer_norm, norm.rms_norm\n"
    )


def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    # `kcatalog list | head -1`: the pipe closes while the command still writes.
    script = "import sys\nfrom kcatalog.tools.cli import main\nsys.stdout.close = lambda: None\nraise SystemExit(main(['list']))"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "internal error" not in err


# -- cache ---------------------------------------------------------------------------------------------


def test_cache_shows_and_clears_the_load_cache(
    run: Callable[..., Run], catalog: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kcatalog

    directory = tmp_path / "cache"
    monkeypatch.setenv("KCATALOG_CACHE_DIR", str(directory))
    assert run("cache") == (0, f"cache: {directory} (0 entries, 0 KiB)\n", "")
    kcatalog.load_catalog([catalog()], check_targets=False)
    shown = run("cache")
    assert shown.code == 0 and shown.out.startswith(f"cache: {directory} (1 entry, ")
    assert run("cache", "--clear") == (0, f"removed 1 entry from {directory}\n", "")
    assert not list(directory.iterdir())
    monkeypatch.setenv("KCATALOG_NO_CACHE", "1")
    assert run("cache") == (0, "cache: off: KCATALOG_NO_CACHE is set\n", "")
