"""`kcatalog schema`: write the JSON Schemas generated from the models, or `--check` that they are fresh."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "schema", help="write the JSON Schemas generated from the models, or check them"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed schemas are stale")
    parser.add_argument("--dir", type=Path, default=None, help="schema directory (default: the shipped schemas/)")
    return parser


def run(options: argparse.Namespace) -> int:
    from ...validate.jsonschema import shipped_schema_dir, stale_schemas, write_schemas

    directory = options.dir or shipped_schema_dir()
    if options.check:
        stale = stale_schemas(directory)
        for name in stale:
            print(f"{directory / name}: stale or missing; run `kcatalog schema` to regenerate", file=sys.stderr)
        if not stale:
            print("Schemas are up to date.")
        return 1 if stale else 0
    for path in write_schemas(directory):
        print(f"wrote {path}")
    return 0
