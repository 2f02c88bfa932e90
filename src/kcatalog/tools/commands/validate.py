"""`kcatalog validate`: check every file of the catalog's layers and report every problem."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ...codes import CODES
from ...errors import Diagnostic, Severity, did_you_mean
from ..formats import REPORTERS
from .common import UsageError, add_catalog_arguments, catalog_paths


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "validate",
        help="check catalog files and report every problem",
        description="Check catalog files and report every problem. What it caches: the index of each target "
        "module's source (what the module binds, read by parsing it, its syntax checked), keyed by the source's "
        "exact bytes and this Python's version, in the cache directory's indexes/ (KCATALOG_CACHE_DIR, else "
        "$XDG_CACHE_HOME/kcatalog or ~/.cache/kcatalog; nothing with KCATALOG_NO_CACHE=1; 'kcatalog cache "
        "--clear' removes them), so that an unchanged module is not parsed again. It never uses the load cache: "
        "every catalog file is read and validated.",
    )
    add_catalog_arguments(parser)
    parser.add_argument("--output-format", choices=sorted(REPORTERS), default="concise")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when errors are found")
    parser.add_argument("--no-targets", action="store_true", help="skip the static checks of import targets")
    parser.add_argument(
        "--import",
        dest="import_targets",
        action="store_true",
        help="deeper check: import every target (runs kernel modules' code) and compare "
        "its parameters with the op's signature",
    )
    parser.add_argument(
        "--allow-module",
        action="append",
        default=None,
        metavar="PREFIX",
        help="only allow targets under this module prefix (repeatable; on top of each layer's own list)",
    )
    parser.add_argument("--plan", metavar="FILE", help="also check this plan against the catalog")
    parser.add_argument("--strict", action="store_true", help="warnings fail too (for CI)")
    parser.add_argument(
        "--pre-commit",
        action="store_true",
        help="as the pre-commit hook runs it: the changed files follow a '--' that the hook's args end with, so "
        "that no file name is taken for an option",
    )
    parser.add_argument(
        "--error-on",
        action="append",
        default=[],
        metavar="CODES",
        help="these warning codes fail (comma-separated, repeatable), e.g. KC303",
    )
    return parser


def run(options: argparse.Namespace) -> int:
    from ...load import check_catalog

    if options.pre_commit and not options.separated:  # pre-commit appends the files after the args: no way to
        raise UsageError(  # tell a file named '--catalog=x.yaml' from an option, so refuse rather than guess
            "--pre-commit: the hook's args must end with '--', after which pre-commit appends the changed files "
            "(e.g. args: [shipped, --strict, --])"
        )
    promoted = {code.strip() for codes in options.error_on for code in codes.split(",") if code.strip()}
    unknown = sorted(promoted - set(CODES))
    if unknown:  # a misspelt code would make nothing fail, silently
        raise UsageError(f"--error-on: unknown code {', '.join(unknown)}{did_you_mean(unknown[0], CODES)}")
    _, diagnostics = check_catalog(
        catalog_paths(options),
        check_targets=not options.no_targets,
        allowed_modules=options.allow_module,
        import_targets=options.import_targets,
        plan=options.plan,
    )
    diagnostics = [_as_error(d) if options.strict or d.code in promoted else d for d in diagnostics]
    print(REPORTERS[options.output_format](diagnostics))
    failed = any(d.is_error for d in diagnostics)
    return 0 if options.exit_zero or not failed else 1


def _as_error(diagnostic: Diagnostic) -> Diagnostic:
    """A warning that `--strict` or `--error-on` makes fail: reported, and counted, as an error."""
    return dataclasses.replace(diagnostic, severity=Severity.ERROR)
