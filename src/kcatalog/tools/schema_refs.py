"""Which JSON Schema a file kcatalog writes names in its first line, so that an editor finds it from where the
file lands: a relative path inside the source tree that holds the schemas (they travel together), else the
published copy's URL (a relative path into an installed package or another machine's checkout would dangle)."""

from __future__ import annotations

import os
from pathlib import Path

# Where the project publishes schemas/ (its repository, as pyproject's project URLs name it); one file per name.
SCHEMA_BASE_URL = "https://raw.githubusercontent.com/kcatalog/kcatalog/main/schemas/"


def schema_reference(name: str, written_to: Path | None) -> str:
    """What a file written at `written_to` (None: printed, destination unknown) names as its schema `name`
    ('tuned.v1.json'): a relative path when it lands in the tree that holds the shipped schemas, else the URL."""
    from ..validate.jsonschema import shipped_schema_dir

    schemas = shipped_schema_dir().resolve()  # in a source checkout: the repository's schemas/
    if written_to is not None:
        directory = written_to.resolve().parent
        if directory.is_relative_to(schemas.parent):
            return Path(os.path.relpath(schemas / name, directory)).as_posix()
    return SCHEMA_BASE_URL + name


def schema_comment(name: str, written_to: Path | None) -> str:
    """The text of the yaml-language-server comment naming the schema: a written file's first comment."""
    return f"yaml-language-server: $schema={schema_reference(name, written_to)}"


def modeline(name: str, written_to: Path | None) -> str:
    """The first line of a written file: the yaml-language-server comment naming its schema."""
    from ..write.yaml_text import comment

    return comment(schema_comment(name, written_to))
