"""The command-line reference: every command's `--help`, from the argparse parsers the CLI itself builds."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from kcatalog.tools import cli

INTRO = """\
# Command line

Every command and option, as `kcatalog COMMAND --help` prints them: this page is generated from the parsers the
command line itself builds (`kcatalog.tools.cli`). Exit codes: 0 clean, 1 diagnostics or failed checks, 2 a usage
or internal error, 130 interrupted.

Every command takes the catalog the same way: positional `PATH`s and/or a repeatable `--catalog PATH`, the layers in
the order given, `shipped` (the catalog inside the package) and `plugins` (installed entry points) among them. With
none, the default layers: `shipped`, `plugins`, then the directories of `KCATALOG_PATH` (see [Layers](../layers.md)).
Where a command also takes op ids (`explain`, `test`, `bench`, `tune`), a positional that is `shipped`, `plugins`, an
existing path, or not shaped like an op id or glob, is a path.

A usage error prints the subcommand's usage; Ctrl-C ends any command with exit code 130 and one line; `--device cuda`
where torch sees no CUDA device is one usage error; `--dtype` takes only the dtypes manifests may name.
"""


@contextmanager
def _help_width(columns: int) -> Iterator[None]:
    """argparse wraps help to the terminal's width (COLUMNS); the page has one width, whatever builds it."""
    saved = {name: os.environ.get(name) for name in ("COLUMNS", "NO_COLOR")}
    os.environ.update(COLUMNS=str(columns), NO_COLOR="1")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cli_page() -> str:
    """The page: `kcatalog --help`, then each command's help under its own heading."""
    with _help_width(100):
        parser, commands = cli._parser()
        parts = [INTRO, "```console\n$ kcatalog --help\n" + parser.format_help().rstrip() + "\n```\n"]
        for name, subparser in commands.items():
            parts.append(
                f"## kcatalog {name}\n\n```console\n$ kcatalog {name} --help\n{subparser.format_help().rstrip()}\n```\n"
            )
    return "\n".join(parts)
