"""The `kcatalog` command line: argv in, exit code out (0 clean, 1 diagnostics, 2 usage or internal error,
130 interrupted). Each subcommand lives in tools/commands/<name>.py: `add_parser(subparsers)` declares it (its
catalog paths through `common.add_catalog_arguments`), `run(options)` runs it; COMMANDS lists them."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..errors import CatalogError, did_you_mean, printable
from .commands import (
    bench,
    cache,
    dump_registry,
    explain,
    import_registry,
    json_schemas,
    layers,
    matrix,
    plan,
    report,
    test,
    trace,
    tune,
    validate,
)
from .commands.common import INTERRUPTED, Command, UsageError

# name -> the module declaring and running it; a new command is one module and one line here.
COMMANDS: dict[str, Command] = {
    "validate": validate,
    "list": matrix,
    "layers": layers,
    "explain": explain,
    "test": test,
    "bench": bench,
    "tune": tune,
    "plan": plan,
    "trace": trace,
    "report": report,
    "cache": cache,
    "schema": json_schemas,
    "import-registry": import_registry,
    "dump-registry": dump_registry,
}


class _Parser(argparse.ArgumentParser):
    """Usage errors exit through `_UsageExit`, so `main` returns 2 instead of exiting. They are printed as every
    other error of the tool is, `error: ...`, after the usage line that names the command."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        _print_error(printable(message))  # it may quote an argument: a file name
        raise _UsageExit


class _UsageExit(Exception):
    pass


class _Version(argparse.Action):
    """`--version`: the version is read from the package metadata only when asked (that read costs tens of ms)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print kcatalog's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> NoReturn:
        from .._version import version

        print(f"kcatalog {version()}")
        parser.exit()


class _CommandParser(_Parser):
    """A subcommand's parser: its positionals (ops, catalog PATHs) and options may come in any order, as in
    `kcatalog tune OP --device cpu shipped mycat`; argparse alone takes positionals only before the first option."""

    _mixing = False  # inside parse_known_intermixed_args, whose two passes call parse_known_args (Python < 3.13)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._mixing:
            return super().parse_known_args(args, namespace)
        self._mixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = _Parser(prog="kcatalog", description="Validate, list, explain, test and report a kernel catalog.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser)
    return parser, {name: module.add_parser(sub) for name, module in COMMANDS.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting, so tests can call it."""
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's code, no traceback
        print(file=sys.stderr)  # off the line a progress bar may have left
        _print_error("interrupted")
        return INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    parser, commands = _parser()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and not args[0].startswith("-") and args[0] not in COMMANDS:  # argparse names no nearest one
            parser.error(
                f"unknown command '{args[0]}'{did_you_mean(args[0], COMMANDS)}; commands: {', '.join(COMMANDS)}"
            )
        options = _parse(parser, commands, args)
    except _UsageExit:
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0) if exc.code in (0, None) else 2
    options.argv = list(sys.argv[1:] if argv is None else argv)  # as given: what tune and plan record
    # Library warnings (fallbacks, ignored overrides) reach the user through the command's own output.
    logging.getLogger("kcatalog").addHandler(logging.NullHandler())
    try:
        return COMMANDS[options.command].run(options)
    except UsageError as exc:
        commands[options.command].print_usage(sys.stderr)
        return _fail(options, printable(str(exc)), 2)
    except BrokenPipeError:  # e.g. `kcatalog test | head`: the reader left; say nothing more
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return 1
    except CatalogError as exc:  # one line per diagnostic it carries: _print_error escapes each
        return _fail(options, str(exc), 1)
    except Exception as exc:  # never a traceback: name the failure and exit 2
        return _fail(options, printable(f"internal error: {type(exc).__name__}: {exc}"), 2)


def _parse(
    parser: argparse.ArgumentParser, commands: dict[str, argparse.ArgumentParser], args: list[str]
) -> argparse.Namespace:
    """The options; every argument after the first `--` is a positional of the command (its PATHs), never an
    option, as POSIX commands have it: pre-commit passes the changed files after the hook's args, and a file may
    be named `--catalog=x.yaml`. The intermixed parsing of Python < 3.13 reads options after a `--` (`validate --
    --exit-zero` set --exit-zero), so the split is made here. `options.separated`: whether there was a `--`."""
    cut = args.index("--") if "--" in args else len(args)
    options, extra = parser.parse_known_args(args[:cut])
    command = commands[options.command]
    listed = next((a.dest for a in command._actions if not a.option_strings and a.nargs == "*"), None)
    after = args[cut + 1 :]
    if extra or (after and listed is None):  # the subcommand's own usage, not the top-level one
        command.error(f"unrecognized arguments: {' '.join([*extra, *after] if listed is None else extra)}")
    if listed is not None:
        setattr(options, listed, [*getattr(options, listed), *after])
    options.separated = cut < len(args)
    return options


def _print_error(message: str) -> None:
    """The one form of the tool's own errors on stderr (ruff's): `error: message`. Each line is escaped
    (`printable`): a file name in it can never fake or erase a line; single-line messages come escaped whole."""
    print("error: " + "\n".join(map(printable, message.split("\n"))), file=sys.stderr)


def _fail(options: argparse.Namespace, message: str, code: int) -> int:
    _print_error(message)
    if getattr(options, "output_format", None) == "json":  # JSON output stays valid JSON, also on failure
        print(json.dumps({"error": message}))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
