"""The pre-commit hook run by pre-commit itself, on a throwaway git repository: the README's configuration runs,
a staged file named like an option (`--catalog=good.yaml`) is validated as the file it is, and args that leave
out the final `--` are refused instead of guessed.

pre-commit builds the command as the hook's entry, then its args (the manifest's default, or the user's), then
the staged files. The hook runs as a `repo: local` hook of `language: system` with every field of this
repository's .pre-commit-hooks.yaml, `kcatalog` spelt `python -m kcatalog`: a `language: python` hook would
install kcatalog from the network."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pre_commit  # noqa: F401  # the test extra installs it; run below as `python -m pre_commit`
import pytest
import yaml
from catalog_builder import MINIMAL, child_env

HOOKS = Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml"
NORM = (
    (MINIMAL / "norm.yaml")
    .read_text(encoding="utf-8")
    .replace("    reference: torch\n", "    reference: torch\n    fake: reference\n")
)
LAYER_SETTINGS = "kcatalog: 1\n"  # a layer on top of the shipped catalog uses its backends


def local_hook(user: dict[str, object]) -> dict[str, object]:
    """This repository's hook as a local one, with the user's overrides (files, args) as pre-commit merges them."""
    [manifest] = [h for h in yaml.safe_load(HOOKS.read_text(encoding="utf-8")) if h["id"] == "kcatalog-validate"]
    entry = shlex.split(str(manifest["entry"]))
    assert entry[0] == "kcatalog" and manifest["language"] == "python"
    python = shlex.join([sys.executable, "-m", "kcatalog", *entry[1:]])
    return {**manifest, "entry": python, "language": "system", **user}


def run_pre_commit(tmp_path: Path, files: dict[str, str], user: dict[str, object]) -> subprocess.CompletedProcess[str]:
    """`pre-commit run` in a new git repository holding `files`, all staged, with the hook configured by `user`."""
    repo = tmp_path / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
        subprocess.run(["git", "add", "--", name], cwd=repo, check=True, timeout=60)
    config = {"repos": [{"repo": "local", "hooks": [local_hook(user)]}]}
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**child_env(), "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PRE_COMMIT_COLOR": "never"}
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "run"], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )


def documented_hook() -> dict[str, object]:
    """The hook's configuration as docs/tutorial/ci.md shows it (the YAML block after its marker)."""
    page = (HOOKS.parent / "docs" / "tutorial" / "ci.md").read_text(encoding="utf-8")
    block = page.split("<!-- pre-commit-config -->\n```yaml\n", 1)[1].split("```", 1)[0]
    (repo,) = yaml.safe_load(block)["repos"]
    (hook,) = repo["hooks"]
    assert repo["repo"].startswith("https://") and hook["id"] == "kcatalog-validate"
    return {key: value for key, value in hook.items() if key in ("files", "args")}


def test_the_documented_configuration_runs(tmp_path: Path) -> None:
    user = documented_hook()
    assert user == {"files": "^mycatalog/", "args": ["shipped", "--strict", "--"]}  # what the files below are for
    files = {"mycatalog/kcatalog.yaml": LAYER_SETTINGS, "mycatalog/norm.yaml": NORM}
    passed = run_pre_commit(tmp_path / "clean", files, user)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "kcatalog validate" in passed.stdout and "Passed" in passed.stdout
    typo = {**files, "mycatalog/norm.yaml": NORM.replace("rms_norm\n", "rms_nrom\n")}
    failed = run_pre_commit(tmp_path / "typo", typo, user)
    assert failed.returncode == 1
    assert (
        "mycatalog/norm.yaml:12:17: KC302 target 'kcatalog.kernels.torch.layernorm:rms_nrom': module "
        "'kcatalog.kernels.torch.layernorm' defines no 'rms_nrom' (did you mean 'rms_norm'?)"
    ) in failed.stdout.splitlines()


@pytest.mark.parametrize("hostile", ["--catalog=good.yaml", "--plan=good.yaml", "-h.yaml"])
def test_a_file_named_like_an_option_is_validated_as_a_file(hostile: str, tmp_path: Path) -> None:
    """A catalog at the repository's root: pre-commit passes its files as they are named, with no './'."""
    bad = "kcatalog: 1\ngroup: hostile\nops: 3\n"  # an error the hook must find
    files = {"kcatalog.yaml": (MINIMAL / "kcatalog.yaml").read_text(encoding="utf-8"), "norm.yaml": NORM, hostile: bad}
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "good.yaml").write_text(NORM.replace("group: norm", "group: good"), encoding="utf-8")
    failed = run_pre_commit(tmp_path, files, {"files": r"^[^/]+\.ya?ml$"})  # the manifest's default args: [--]
    assert failed.returncode == 1, failed.stdout + failed.stderr  # taken for an option, it passed: exit 0
    assert failed.stdout.splitlines()[-3:-1] == [
        f"{hostile}:3:6: KC103 'ops': input should be a mapping, got int 3",
        "Found 1 error in 1 file.",
    ]


def test_args_without_the_final_dashes_are_refused(tmp_path: Path) -> None:
    """The README's configuration before: with the files appended, nothing can tell them from options."""
    user = {"files": "^mycatalog/", "args": ["shipped", "--strict"]}
    files = {"mycatalog/kcatalog.yaml": LAYER_SETTINGS, "mycatalog/norm.yaml": NORM}
    refused = run_pre_commit(tmp_path, files, user)
    assert refused.returncode == 1  # pre-commit's own code for a failed hook; kcatalog exited 2
    assert (
        "error: --pre-commit: the hook's args must end with '--', after which pre-commit appends the changed files "
        "(e.g. args: [shipped, --strict, --])"
    ) in refused.stdout.splitlines()


# -- the same rules, through main(): what pre-commit relies on ---------------------------------------------------


def test_after_dashes_every_argument_is_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kcatalog.tools.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "kcatalog.yaml").write_bytes((MINIMAL / "kcatalog.yaml").read_bytes())
    (tmp_path / "--strict.yaml").write_text(NORM, encoding="utf-8")
    (tmp_path / "--exit-zero").mkdir()  # a directory named like an option: a layer, not --exit-zero
    (tmp_path / "--exit-zero" / "kcatalog.yaml").write_text("kcatalog: 1\nbackends: 3\n", encoding="utf-8")
    assert main(["validate", "--no-targets", "--", "kcatalog.yaml", "--strict.yaml"]) == 0
    assert capsys.readouterr().out == "All checks passed!\n"
    assert main(["validate", "kcatalog.yaml", "--no-targets", "--strict.yaml", "--", "--exit-zero"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "error: unrecognized arguments: --strict.yaml"
    assert main(["validate", "--no-targets", "--", "--exit-zero"]) == 1  # read as the layer it is, and refused
    assert capsys.readouterr().out.startswith("--exit-zero/kcatalog.yaml:2:")


def test_positionals_may_come_between_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`validate LAYER --strict FILE...`, as pre-commit calls a hook whose args hold no '--': the split at '--'
    keeps the commands' intermixed parsing (argparse alone stops at the option: 'unrecognized arguments')."""
    from kcatalog.tools.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "kcatalog.yaml").write_text(LAYER_SETTINGS, encoding="utf-8")
    (tmp_path / "norm.yaml").write_text(NORM, encoding="utf-8")
    assert main(["validate", "shipped", "--strict", "kcatalog.yaml", "norm.yaml"]) == 0
    assert capsys.readouterr().out == "All checks passed!\n"
    assert main(["import-registry", "--out", "out", "--", "pkg:registry"]) == 2  # no list of positionals there
    assert capsys.readouterr().err.splitlines()[-1] == ("error: unrecognized arguments: pkg:registry")
