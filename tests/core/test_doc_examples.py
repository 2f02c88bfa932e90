"""The examples of the README and the documentation run as written: the settings file shown whole, the validate
samples' output (line numbers included), the README's explain sample, and the worked example of a catalog of one's
own on top of the shipped one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from catalog_builder import child_env

from kcatalog.tools.cli import main

REPO = Path(__file__).resolve().parents[2]
FIRST_CATALOG = "docs/tutorial/first-catalog.md"
LAYERS_TUTORIAL = "docs/tutorial/layers.md"


def block(page: str, marker: str) -> str:
    """The fenced block right after `<!-- marker -->` in `page` (a path in the repository), without its fences."""
    text = (REPO / page).read_text(encoding="utf-8")
    match = re.search(rf"<!-- {re.escape(marker)} -->\n```[a-z]*\n(.*?)\n```\n", text, re.S)
    assert match, f"{page} has no block marked {marker}"
    return match.group(1)


def example_catalog(root: Path, manifest: str) -> None:
    """`root/catalog/`: the manifest as `layernorm.yaml`, beside the shipped settings file."""
    catalog = root / "catalog"
    catalog.mkdir()
    (catalog / "layernorm.yaml").write_text(manifest + "\n", encoding="utf-8")
    (catalog / "kcatalog.yaml").write_bytes((REPO / "catalog" / "kcatalog.yaml").read_bytes())


def test_the_settings_file_is_shown_whole() -> None:
    assert block(FIRST_CATALOG, "settings-file") + "\n" == (REPO / "catalog" / "kcatalog.yaml").read_text(
        encoding="utf-8"
    )


@pytest.mark.parametrize("page", ["README.md", FIRST_CATALOG])
def test_the_validate_sample_prints_what_the_page_shows(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    typos = (
        block(page, "manifest-example")
        .replace("      triton:\n", "      tritn:\n")
        .replace("triton.layernorm:rms_norm", "triton.layernorm:rms_nrom")
    )
    assert typos.count("tritn") == 1 and typos.count("rms_nrom") == 1
    example_catalog(tmp_path, typos)
    command, *expected = block(page, "validate-sample").splitlines()
    assert command == "$ kcatalog validate catalog/"
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "catalog/"]) == 1
    assert capsys.readouterr().out.splitlines() == expected


def test_the_readme_example_explains_what_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's manifest, typos fixed, is clean, and `explain` prints what the README shows."""
    example_catalog(tmp_path, block("README.md", "manifest-example"))
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "catalog/"]) == 0
    assert capsys.readouterr().out == "All checks passed!\n"
    command, *expected = block("README.md", "explain-sample").splitlines()
    assert command.startswith("$ kcatalog ")
    assert main(command.removeprefix("$ kcatalog ").split()) == 0
    assert capsys.readouterr().out.splitlines() == expected


def test_the_deterministic_selection_example_explains_what_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/selection.md's explain of a batch-invariant request prints what the page shows, over the shipped catalog."""
    command, *expected = block("docs/selection.md", "explain-batch-invariant").splitlines()
    assert main(command.removeprefix("$ kcatalog ").split()) == 0
    assert capsys.readouterr().out.splitlines() == expected


def test_the_layers_example_runs_verbatim(tmp_path: Path) -> None:
    """My ops in my own directory, validated and loaded with `shipped`, each layer's allow-list on its own files."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # `kcatalog` and `python` as an install has them, run by this interpreter (a symlink to a virtual
    # environment's python would find no pyvenv.cfg beside it, and run the base interpreter).
    for name, command in (("kcatalog", f'"{sys.executable}" -m kcatalog'), ("python", f'"{sys.executable}"')):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {command} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    work = tmp_path / "project"
    work.mkdir()
    env = child_env(work)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    script = block(LAYERS_TUTORIAL, "layers-example")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True, text=True)
    assert done.stderr == ""
    assert done.stdout.splitlines() == block(LAYERS_TUTORIAL, "layers-example-output").splitlines()
    assert done.returncode == 0
    # The shipped allow-list did not block `myops`; this layer's own list does govern its files.
    manifest = work / "mycatalog" / "myops.yaml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace("myops.scale:scaled_tanh_fast", "os:system"))
    refused = subprocess.run(
        [sys.executable, "-m", "kcatalog", "validate", "shipped", "mycatalog"], cwd=work, env=env, capture_output=True
    )
    assert refused.returncode == 1
    assert refused.stdout.decode().splitlines()[0] == (
        "mycatalog/myops.yaml:15:17: KC305 target 'os:system' is outside the allowed modules "
        "(kcatalog.yaml allowed_modules of layer 'mycatalog': myops)"
    )
