"""Pages of the documentation site generated from the code at build time (never committed): the command line from its
parsers, the diagnostic codes from `kcatalog.codes` with examples from the test suite, the file formats from the JSON
Schemas, the Python API from docstrings. The MkDocs hook (docs/hooks/reference.py) adds them to the site;
tests/core/test_docs.py checks their links."""

from __future__ import annotations

import sys

from .project import REPO, Project, read_project

# The pages describe this checkout's code, whatever kcatalog is installed (mkdocstrings reads src/ too: mkdocs.yml).
sys.path.insert(0, str(REPO / "src"))

from .api import api_page  # noqa: E402
from .cli import cli_page  # noqa: E402
from .diagnostics import diagnostics_page  # noqa: E402
from .formats import format_pages  # noqa: E402
from .kernels import kernels_page  # noqa: E402
from .links import DOCS, to_repository  # noqa: E402

PROJECT = read_project()
#: Files of the repository's root the site shows as pages of their own: site page -> the file.
SHOWN = {"contributing.md": "CONTRIBUTING.md", "changelog.md": "CHANGELOG.md", "security.md": "SECURITY.md"}


def pages(project: Project = PROJECT) -> dict[str, str]:
    """Every page the build adds to docs/, by its path in the site: the reference pages, and the files of SHOWN
    (their links made right for where the site shows them)."""
    shown = {
        page: to_repository((REPO / file).read_text(encoding="utf-8"), REPO / file, page, project, SHOWN)
        for page, file in SHOWN.items()
    }
    return {
        **shown,
        "reference/cli.md": cli_page(),
        "reference/diagnostics.md": diagnostics_page(project),
        **format_pages(project),
        "reference/kernels.md": kernels_page(),
        "reference/api.md": api_page(),
    }


def page_markdown(markdown: str, page: str, project: Project = PROJECT) -> str:
    """A page of docs/ as the site shows it: its links to repository files outside docs/ made addresses."""
    return to_repository(markdown, DOCS / page, page, project, SHOWN)


__all__ = ["DOCS", "PROJECT", "REPO", "SHOWN", "Project", "page_markdown", "pages"]
