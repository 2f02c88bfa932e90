"""`kcatalog dump-registry`: a Python kernel registry as JSON, for `import-registry --from-json` elsewhere."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ...migrate.source import RegistryDump, RegistryError, read_registry
from ..formats import plural
from .common import UsageError, write_output


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "dump-registry", help="write a Python kernel registry as JSON, for import-registry"
    )
    parser.add_argument("registry", metavar="MODULE:OBJECT")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE", help="default: standard output")
    return parser


def read_live(reference: str) -> RegistryDump:
    """The registry 'package.module:object', imported with the working directory on sys.path (as `python -m`
    has it: the registry may live here); a UsageError when it cannot be read."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return read_registry(reference)
    except RegistryError as exc:
        raise UsageError(str(exc)) from None


def run(options: argparse.Namespace) -> int:
    """Write the registry as JSON (stdout, or --out FILE)."""
    dump = read_live(options.registry)
    text = dump.to_json()
    if options.out is None:
        sys.stdout.write(text)
        return 0
    write_output(options.out, text)
    print(f"Wrote {plural(len(dump.specs), 'spec')} of {dump.source} to {options.out}", file=sys.stderr)
    return 0
