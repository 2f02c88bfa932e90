"""The JSON Schemas generated from the models, as committed under schemas/ for editors."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from ..write.atomic import write_file
from .mappings_schema import LayersFile
from .schema import Manifest, Settings
from .tables import Plan, TunedTable
from .trace_schema import TraceFile

_MODELS: dict[str, type[BaseModel]] = {
    "manifest.v1.json": Manifest,
    "settings.v1.json": Settings,
    "layers.v1.json": LayersFile,
    "tuned.v1.json": TunedTable,
    "plan.v1.json": Plan,
    "trace.v1.json": TraceFile,
}


def shipped_schema_dir() -> Path:
    """schemas/ as shipped with the package (the repo's schemas/ in a source checkout)."""
    return Path(__file__).resolve().parent.parent / "schemas"


def render_schemas() -> dict[str, str]:
    """File name to JSON text for every schema, generated from the pydantic models."""
    documents = {}
    for name, model in _MODELS.items():
        schema = model.model_json_schema()
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": name, **schema}
        documents[name] = json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
    return documents


def stale_schemas(directory: Path) -> list[str]:
    """Names of schema files in `directory` that are missing or differ from the models."""
    stale = []
    for name, text in render_schemas().items():
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale


def write_schemas(directory: Path) -> list[Path]:
    """Write every schema into `directory`; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_schemas().items():
        path = directory / name
        write_file(path, text)
        written.append(path)
    return written
