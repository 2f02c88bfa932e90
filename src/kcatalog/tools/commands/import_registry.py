"""`kcatalog import-registry`: a Python kernel registry (or its JSON dump) into catalog files, one manifest per
op group and a settings file (migrate/ converts; this writes)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...migrate.source import RegistryError, read_json
from ...read.files import SETTINGS_FILE
from ..formats import plural
from ..schema_refs import modeline
from .common import UsageError
from .dump_registry import read_live

if TYPE_CHECKING:
    from ...migrate.convert import ConvertedCatalog


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "import-registry", help="write a catalog from a Python kernel registry (all_specs())"
    )
    parser.add_argument(
        "registry", nargs="?", metavar="MODULE:OBJECT", help="the registry object, e.g. pkg.kernels:registry"
    )
    parser.add_argument(
        "--from-json", type=Path, metavar="FILE", help="read a dump written by `kcatalog dump-registry`"
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory to write the catalog into")
    parser.add_argument(
        "--priority", metavar="A,B,C", help="default backend order, best first (default: the registry's, or as seen)"
    )
    parser.add_argument(
        "--no-auto",
        action="append",
        default=[],
        metavar="BACKEND",
        help="keep this backend out of auto-selection (auto: false; repeatable)",
    )
    parser.add_argument("--force", action="store_true", help="replace the files of an earlier import in DIR")
    return parser


def run(options: argparse.Namespace) -> int:
    """Convert and write; exit 1 when something could not be expressed (and was left out), 2 on usage errors."""
    if (options.registry is None) == (options.from_json is None):
        raise UsageError("give one registry: MODULE:OBJECT, or --from-json FILE")
    priority = None
    if options.priority is not None:
        priority = [name.strip() for name in options.priority.split(",") if name.strip()]
    if options.from_json is None:
        dump = read_live(options.registry)
    else:
        try:
            dump = read_json(options.from_json)
        except RegistryError as exc:
            raise UsageError(str(exc)) from None
    known = {*dump.backends, *(spec.get("backend") for spec in dump.specs)}  # also enum members no spec uses
    unknown = [name for name in [*(priority or ()), *options.no_auto] if name not in known]
    if unknown:
        raise UsageError(f"{', '.join(map(repr, unknown))}: not a backend of the registry")
    from ...migrate.convert import convert  # the schema's patterns: pydantic, only for this command

    converted = convert(dump, priority=priority, manual=options.no_auto)
    if not converted.files:
        for diagnostic in converted.diagnostics:
            print(diagnostic)
        print(f"error: none of the {plural(len(dump.specs), 'registry spec')} could be written", file=sys.stderr)
        return 1
    problem = write_catalog(options.out, converted, force=options.force)
    if problem:
        raise UsageError(problem)
    for diagnostic in converted.diagnostics:
        print(diagnostic)
    left_out = sum(1 for d in converted.diagnostics if d.is_error)
    print(
        f"Wrote {plural(len(converted.files), 'file')} to {options.out}: {plural(converted.ops, 'op')}, "
        f"{plural(converted.specs, 'backend spec')} of {plural(len(dump.specs), 'registry spec')}"
        + (f"; {plural(left_out, 'problem')} left something out." if left_out else ".")
    )
    print(f"Next: kcatalog validate {options.out}")
    return 1 if converted.failed else 0


def write_catalog(directory: Path, converted: ConvertedCatalog, *, force: bool) -> str | None:
    """Write the files into `directory`; the reason it refuses (files there that an import did not write, or an
    earlier import's without --force), or None. An earlier import's files not rewritten now are removed."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        present = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml"))
        foreign = [p.name for p in present if not _written_by_import(p)]
        if foreign:
            return f"{directory} holds catalog files that import-registry did not write ({', '.join(foreign)})"
        if present and not force:
            return f"{directory} holds an earlier import; give --force to replace it"
        for path in present:
            if path.name not in converted.files:
                path.unlink()
        for name, text in converted.files.items():
            path = directory / name
            schema = "settings.v1.json" if name == SETTINGS_FILE else "manifest.v1.json"
            temporary = directory / f".{name}.tmp"
            temporary.write_text(f"{modeline(schema, path)}\n{text}", encoding="utf-8")
            temporary.replace(path)
    except OSError as exc:
        return f"cannot write {directory}: {exc}"
    return None


def _written_by_import(path: Path) -> bool:
    """Whether an import wrote the file: its header on the first line, or the second, below the schema's modeline."""
    from ...migrate.convert import HEADER

    try:
        with path.open(encoding="utf-8") as file:
            return any(file.readline().startswith(HEADER) for _ in range(2))
    except (OSError, UnicodeDecodeError):
        return False
