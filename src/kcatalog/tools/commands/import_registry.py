"""`kcatalog import-registry`: a Python kernel registry (or its JSON dump) into catalog files, one manifest per
op group and a settings file (migrate/ converts; this writes)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...migrate.source import RegistryError, read_json
from ...read.files import SETTINGS_FILE
from ...write.atomic import replace_files
from ..formats import plural
from ..schema_refs import modeline
from .common import UsageError
from .dump_registry import read_live

if TYPE_CHECKING:
    from ...errors import Diagnostic
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
    """Convert, check what would be written and write it; exit 1 when something could not be expressed (and was
    left out) or what would be written does not validate (then nothing is), 2 on usage errors."""
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
    stale = _replaced(options.out, converted, force=options.force)
    texts = {name: f"{modeline(_schema(name), options.out / name)}\n{text}" for name, text in converted.files.items()}
    for diagnostic in converted.diagnostics:
        print(diagnostic)
    refused = _refusals(options.out, texts)
    if refused:
        for diagnostic in refused:
            print(diagnostic)
        print(
            f"error: the catalog would not validate ({plural(len(refused), 'error')} above); nothing written to "
            f"{options.out}",
            file=sys.stderr,
        )
        return 1
    _write(options.out, texts, stale)
    left_out = sum(1 for d in converted.diagnostics if d.is_error)
    print(
        f"Wrote {plural(len(converted.files), 'file')} to {options.out}: {plural(converted.ops, 'op')}, "
        f"{plural(converted.specs, 'backend spec')} of {plural(len(dump.specs), 'registry spec')}"
        + (f"; {plural(left_out, 'problem')} left something out." if left_out else ".")
    )
    print(f"Next: kcatalog validate {options.out}")
    return 1 if converted.failed else 0


def _schema(name: str) -> str:
    return "settings.v1.json" if name == SETTINGS_FILE else "manifest.v1.json"


def _replaced(directory: Path, converted: ConvertedCatalog, *, force: bool) -> list[str]:
    """The files of an earlier import in `directory` that this one does not rewrite (removed with the write); a
    UsageError when the directory holds files an import did not write, or an earlier import without --force."""
    try:
        present = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml")) if directory.is_dir() else []
    except OSError as exc:
        raise UsageError(f"cannot read {directory}: {exc.strerror or exc}") from None
    foreign = [p.name for p in present if not _written_by_import(p)]
    if foreign:
        raise UsageError(f"{directory} holds catalog files that import-registry did not write ({', '.join(foreign)})")
    if present and not force:
        raise UsageError(f"{directory} holds an earlier import; give --force to replace it")
    return [p.name for p in present if p.name not in converted.files]


def _refusals(directory: Path, texts: dict[str, str]) -> list[Diagnostic]:
    """The errors `kcatalog validate` would find in the files about to be written (checked in memory, the targets
    left to that command: the registry's packages need not be installed here)."""
    from ...load import check_texts

    return [d for d in check_texts(directory, texts, check_targets=False).diagnostics if d.is_error]


def _write(directory: Path, texts: dict[str, str], stale: list[str]) -> None:
    """Every file, and the earlier import's files left over removed, all at once or not at all."""
    created = not directory.exists()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        replace_files(directory, texts, remove=stale)
    except OSError as exc:
        if created:
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise UsageError(f"cannot write {directory}: {exc.strerror or exc}; nothing written") from None


def _written_by_import(path: Path) -> bool:
    """Whether an import wrote the file: its header on the first line, or the second, below the schema's modeline."""
    from ...migrate.convert import HEADER

    try:
        with path.open(encoding="utf-8") as file:
            return any(file.readline().startswith(HEADER) for _ in range(2))
    except (OSError, UnicodeDecodeError):
        return False
