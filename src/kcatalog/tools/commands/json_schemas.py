"""`kcatalog schema`: write the JSON Schemas generated from the models where told (`--out DIR`), or `--check` a
directory of them; never into the installed package, whose copies are the ones it was built with."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import UsageError


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "schema", help="write the JSON Schemas generated from the models (--out DIR), or --check a directory of them"
    )
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help="write the schemas here (in a source checkout: --out schemas/)"
    )
    parser.add_argument(
        "--check",
        type=Path,
        nargs="?",
        const=True,  # --check alone: the package's own schemas (only read)
        metavar="DIR",
        help="exit 1 if the schemas in DIR are stale or missing (default DIR: those the package ships)",
    )
    return parser


def run(options: argparse.Namespace) -> int:
    from ...read.files import display_path
    from ...validate.jsonschema import shipped_schema_dir, stale_schemas, write_schemas

    if options.check is not None:
        if options.out is not None:
            raise UsageError("give --out DIR to write the schemas, or --check [DIR] to compare them; not both")
        directory = shipped_schema_dir() if options.check is True else options.check
        stale = stale_schemas(directory)
        shown = display_path(directory.resolve())  # a source checkout's shipped schemas are its schemas/
        for name in stale:
            print(
                f"{directory / name}: stale or missing; regenerate with `kcatalog schema --out {shown}`",
                file=sys.stderr,
            )
        if not stale:
            print("Schemas are up to date.")
        return 1 if stale else 0
    if options.out is None:
        raise UsageError(
            f"give --out DIR to write the schemas (in a source checkout: --out schemas/); "
            f"the package's own are in {shipped_schema_dir()}"
        )
    try:
        written = write_schemas(options.out)
    except OSError as exc:
        raise UsageError(f"cannot write {options.out}: {exc.strerror or exc}") from None
    for path in written:
        print(f"wrote {path}")
    return 0
