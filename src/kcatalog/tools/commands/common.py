"""What every subcommand shares: one way to name the catalog (positional paths and/or `--catalog`, the `shipped`
and `plugins` tokens), loading it with its diagnostics on stderr, dtype and device arguments."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from ...platform import Platform
from ...read.layer_sources import PLUGINS, SHIPPED, default_sources

if TYPE_CHECKING:
    from ...registry.catalog import Catalog

CATALOG_HELP = (
    "catalog layers, in order: directories or files, 'shipped' (the catalog shipped with kcatalog) and 'plugins' "
    "(installed kcatalog.catalogs entry points); default: shipped, plugins, then KCATALOG_PATH"
)
# An op id or glob ('layernorm.rms_norm', 'layernorm.*', 'norm*'): told apart from a catalog path given positionally.
_OP_PATTERN = re.compile(r"^[A-Za-z0-9_*?\[\]!-]*[.*?\[][A-Za-z0-9_.*?\[\]!-]*$")


class Command(Protocol):
    """A subcommand: the module tools/commands/<name>.py, declaring its parser and running on its options."""

    def add_parser(self, sub: Any) -> argparse.ArgumentParser:
        """Declare the command under `sub` (argparse's subparsers), with its catalog arguments."""
        ...

    def run(self, options: argparse.Namespace) -> int:
        """Run it; the exit code (0 clean, 1 diagnostics or failures; UsageError for 2)."""
        ...


def add_op_arguments(parser: argparse.ArgumentParser, *, device: str, dtype_help: str, backend_help: str) -> None:
    """What the commands that run ops (test, bench, tune) take: ops then PATHs, --device, --dtype, --backend, and
    the catalog's layers."""
    parser.add_argument("items", nargs="*", metavar="OP|PATH", help="op ids or globs (default: every op), then PATHs")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=device)
    parser.add_argument("--dtype", type=dtype, action="append", default=[], help=dtype_help)
    parser.add_argument("--backend", action="append", default=[], help=backend_help)
    add_catalog_arguments(parser, positional=None)


@dataclass(frozen=True)
class OpsToRun:
    """A command's catalog (loaded from its PATHs, or the default layers when `paths` is None) and the ops asked."""

    catalog: Catalog
    ops: list[str]
    paths: list[str] | None


def load_ops(options: argparse.Namespace) -> OpsToRun | None:
    """torch and the device checked, the catalog loaded (None after printing its diagnostics) and the ops
    selected: the commands that run ops (test, bench, tune) run them with torch."""
    from ..conformance import select_ops

    require_module("torch", f"kcatalog {options.command} runs kernels and", TORCH_INSTALL)
    require_device(options.device)
    given = split_ops(options.items)
    paths = catalog_paths(options, given.paths)
    catalog = load_or_report(paths)
    return None if catalog is None else OpsToRun(catalog, select_ops(catalog, given.ops), paths)


def add_catalog_arguments(parser: argparse.ArgumentParser, *, positional: str | None = "paths") -> None:
    """The catalog's layers as positional PATHs (stored in `positional`, unless None: the command's positionals
    are its own, e.g. op ids, and paths among them are told apart by `split_ops`) and a repeatable --catalog."""
    if positional is not None:
        parser.add_argument(positional, nargs="*", metavar="PATH", help=CATALOG_HELP)
    parser.add_argument(
        "--catalog", action="append", default=[], metavar="PATH", help="a catalog layer (repeatable); as PATH"
    )
    parser.add_argument(
        "--tuned",
        action="append",
        default=[],
        metavar="DIR",
        help="tuned tables on top of the layers (default: the default ones), a layer each: their entries replace "
        "those of earlier layers' tables (repeatable)",
    )


def is_catalog_path(item: str) -> bool:
    """Whether a positional argument names a catalog layer rather than an op: a token, an existing path, or
    anything that is not shaped like an op id or glob (then reported as a path that does not exist)."""
    return item in (SHIPPED, PLUGINS) or "/" in item or Path(item).exists() or not _OP_PATTERN.match(item)


@dataclass(frozen=True)
class OpsAndPaths:
    """A command's positionals split into op ids or globs and catalog paths."""

    ops: list[str]
    paths: list[str]


def split_ops(items: Sequence[str]) -> OpsAndPaths:
    """Positionals of a command that takes ops (`explain OP [PATH...]`, `test [OPS] [PATH...]`)."""
    return OpsAndPaths([i for i in items if not is_catalog_path(i)], [i for i in items if is_catalog_path(i)])


def catalog_paths(options: argparse.Namespace, positional: Sequence[str] = ()) -> list[str] | None:
    """The layers to load: positional paths (`positional`, or the `paths` argument) then --catalog ones, in the
    order given, then the --tuned ones (on top of the default layers where no other is given); None when none is
    given (the default layers)."""
    given = [*(positional or getattr(options, "paths", None) or ()), *options.catalog]
    tuned = getattr(options, "tuned", [])
    if tuned:  # a directory of tables is a layer like any other, on top of what was asked
        return [*(given or map(str, default_sources())), *tuned]
    return given or None


def load_or_report(paths: Sequence[str] | None) -> Catalog | None:
    """The catalog, or None after printing its diagnostics to stderr."""
    from ...load import check_catalog
    from ..formats import concise

    catalog, diagnostics = check_catalog(paths)
    if catalog is None:
        print(concise(diagnostics), file=sys.stderr)
    return catalog


def dtype(text: str) -> str:
    """An argparse type: a dtype the manifests may name (float32, bfloat16, ...), else a usage error."""
    import typing

    from ...validate.schema import DType

    known = typing.get_args(DType)
    if text not in known:
        from ...errors import did_you_mean

        raise argparse.ArgumentTypeError(
            f"unknown dtype '{text}'{did_you_mean(text, known)}; known: {', '.join(known)}"
        )
    return text


def shape_sizes(text: str) -> dict[str, int]:
    """An argparse type: `E=128,H=2048` as sizes by name (an op's table key, the sizes to tune at), else a usage
    error saying which part is wrong."""
    sizes: dict[str, int] = {}
    for part in text.split(","):
        name, equals, value = part.strip().partition("=")
        name, value = name.strip(), value.strip()
        if not equals or not name.isidentifier() or not value.isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"'{part}' is not NAME=SIZE (sizes by name, e.g. E=128,H=2048)")
        if name in sizes:
            raise argparse.ArgumentTypeError(f"'{name}' is given twice")
        sizes[name] = int(value)
    return sizes


class UsageError(Exception):
    """A command's arguments cannot work here: printed as `error: ...` with the command's usage, exit 2."""


INTERRUPTED = 130  # what a shell reports for a command ended by Ctrl-C (128 + SIGINT)


def write_output(path: str | Path, text: str) -> None:
    """Write a file the command was asked for (--html, --json, --out); a UsageError saying why it cannot be.

    A regular file is written whole or not at all (write/atomic.py: a temporary beside it, then renamed over it),
    so that Ctrl-C or a full disk never leaves half a file where a complete one was, and a link planted beside it
    is never followed; anything else (/dev/stdout) is written to."""
    from ...write.atomic import write_file

    target = Path(path)
    try:
        if target.exists() and not target.is_file():
            target.write_text(text, encoding="utf-8")
            return
        write_file(target, text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def command_line(options: argparse.Namespace, *, drop: Sequence[str] = (), add: Sequence[str] = ()) -> str:
    """The command as it was run (for a file's provenance, or to say how to run it again), less the arguments in
    `drop`, plus those of `add` it lacks."""
    argv = [arg for arg in options.argv if arg not in drop]
    command = shlex.join(["kcatalog", *argv, *(arg for arg in add if arg not in argv)])
    return _LONE_SURROGATE.sub(_escaped_surrogate, command)


# Bytes of an argument that are not UTF-8 come in as lone surrogates (U+DC80..U+DCFF), which no file can hold.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def platform_of_catalog(catalog: Catalog, text: str) -> Platform:
    """A --platform value, parsed once the catalog is loaded: its settings may declare more device kinds."""
    try:
        return Platform.parse(text, catalog.devices)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


# What to install for torch: its CPU build first on a machine without a GPU, or pip pulls the multi-GB CUDA one.
TORCH_INSTALL = (
    "pip install 'kcatalog[torch]' (on a machine without a GPU, first: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu)"
)


def require_module(module: str, needs: str, install: str) -> ModuleType:
    """The module imported, or a UsageError saying that `needs` ('kcatalog bench runs kernels and', '--plot')
    needs it and how to install it (`install`): the one way a command says an optional dependency is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").partition(".")[0] == module
        why = "is not installed" if missing else f"cannot be imported ({type(exc).__name__}: {exc})"
        raise UsageError(f"{needs} needs {module}, which {why} here: {install}") from None


def require_device(device: str) -> None:
    """UsageError unless the device can be used here (a CUDA device for `cuda`), saying what to pass instead."""
    if device != "cuda":
        return
    torch = require_module("torch", "--device cuda", TORCH_INSTALL)
    if not torch.cuda.is_available():
        build = f"; torch {torch.__version__} is a CPU-only build" if _cpu_only(torch) else ""
        raise UsageError(
            f"--device cuda: no CUDA device is available here (torch.cuda.is_available() is False{build}); "
            "pass --device cpu to run on the CPU"
        )


def _cpu_only(torch: ModuleType) -> bool:
    """Whether this torch was built for neither CUDA nor ROCm."""
    return torch.version.cuda is None and getattr(torch.version, "hip", None) is None
