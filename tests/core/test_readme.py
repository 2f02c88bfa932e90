"""The README is the package's front page, on PyPI too: short, its set-up commands where `.ci/run` reads them (the
CPU-only torch advice before them), and every link absolute and alive, since relative links break in a long
description."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
sys.path.insert(0, str(REPO / "docs" / "hooks"))

from docgen import PROJECT, pages  # noqa: E402
from docgen.links import find_links  # noqa: E402

RAW = "https://raw.githubusercontent.com/" + PROJECT.repository.removeprefix("https://github.com/") + "/main/"


def ci_command(marker: str) -> str:
    """A set-up command as `.ci/run` reads it: its own `readme_command` function, run by bash on the README."""
    ci_run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    [function] = [line for line in ci_run.splitlines() if line.startswith("readme_command()")]
    done = subprocess.run(
        ["bash", "-c", f"{function}\nreadme_command {marker}"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_ci_finds_the_two_set_up_commands() -> None:
    assert ci_command("install-command") == "pip install -e . && kcatalog validate && kcatalog list"
    test_command = ci_command("test-command")
    assert test_command.startswith("pip install -e '.[test]' && ")
    # The documentation site builds in the test command, warnings as errors.
    assert test_command.endswith(" && pytest && mkdocs build --strict")


def test_the_cpu_only_torch_advice_comes_before_the_set_up_commands() -> None:
    advice = README.index("pip install torch --index-url https://download.pytorch.org/whl/cpu")
    assert advice < README.index("<!-- install-command -->") < README.index("<!-- test-command -->")


def test_the_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) < 200
    assert PROJECT.documentation in README


def site_page(url: str) -> str | None:
    """The docs page (a path under docs/, as the site builds it) an address of the documentation site names."""
    path = url.removeprefix(PROJECT.documentation).partition("#")[0].strip("/")
    return f"{path}.md" if path else "index.md"


def test_every_link_is_absolute_and_names_what_exists() -> None:
    generated = set(pages())
    problems = []
    for link in find_links(README):
        where = f"README.md:{link.line}: {link.target}"
        if not link.absolute:
            problems.append(f"{where}: relative, which breaks in the package's long description")
        elif link.target.startswith((PROJECT.blob(""), PROJECT.tree(""), RAW)):
            path = link.path.removeprefix(PROJECT.blob("")).removeprefix(PROJECT.tree("")).removeprefix(RAW)
            if not (REPO / path).exists():
                problems.append(f"{where}: no {path} in the repository")
        elif link.target.startswith(PROJECT.documentation):
            page = site_page(link.target)
            if not (page in generated or (REPO / "docs" / page).is_file()):
                problems.append(f"{where}: no page docs/{page}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("file", ["README.md", "CONTRIBUTING.md", ".pre-commit-hooks.yaml"])
def test_no_placeholder_for_the_repository(file: str) -> None:
    text = (REPO / file).read_text(encoding="utf-8")
    assert not re.search(r"<[^>]*(git URL|repository's URL)[^>]*>", text)
