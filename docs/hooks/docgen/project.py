"""The project's addresses, read from pyproject.toml's [project.urls]: the one place they are written."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the docs extra installs tomli there
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Project:
    """Where the repository and the documentation site live."""

    repository: str
    documentation: str

    def blob(self, path: str) -> str:
        """The address of a file of the repository, as its main branch has it."""
        return f"{self.repository}/blob/main/{path}"

    def tree(self, path: str) -> str:
        """The address of a directory of the repository."""
        return f"{self.repository}/tree/main/{path}"


def read_project() -> Project:
    """The addresses pyproject.toml names."""
    urls = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    return Project(urls["Repository"].rstrip("/"), urls["Documentation"])
