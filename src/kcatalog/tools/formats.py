"""Diagnostic reporters for the CLI: concise (ruff-style), json and GitHub workflow annotations."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ..errors import Diagnostic, printable


def _counts(diagnostics: Sequence[Diagnostic]) -> tuple[int, int, int]:
    errors = sum(d.is_error for d in diagnostics)
    files = len({d.location.path for d in diagnostics if d.location})
    return errors, len(diagnostics) - errors, files


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def text_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows of cells as left-aligned columns; the first row is the header. Cells are escaped (`printable`): a
    layer's directory or an exception's text can never break a row."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def concise(diagnostics: Sequence[Diagnostic]) -> str:
    """One `path:line:col: CODE message` line each, then a summary line."""
    errors, warnings, files = _counts(diagnostics)
    lines = [str(d) for d in diagnostics]
    if errors:
        extra = f" and {plural(warnings, 'warning')}" if warnings else ""
        where = f" in {plural(files, 'file')}" if files else ""
        lines.append(f"Found {plural(errors, 'error')}{extra}{where}.")
    else:
        lines.append("All checks passed!" + (f" ({plural(warnings, 'warning')})" if warnings else ""))
    return "\n".join(lines)


def as_json(diagnostics: Sequence[Diagnostic]) -> str:
    """A JSON document with every diagnostic and the counts; valid whatever happened."""
    errors, warnings, files = _counts(diagnostics)
    items = [
        {
            "code": d.code,
            "severity": d.severity.value,
            "message": d.message,
            "path": d.location.path if d.location else None,
            "line": d.location.line if d.location else None,
            "col": d.location.col if d.location else None,
        }
        for d in diagnostics
    ]
    summary = {"errors": errors, "warnings": warnings, "files": files}
    return json.dumps({"diagnostics": items, "summary": summary}, indent=2)


def _escape(text: str, *, prop: bool = False) -> str:
    text = printable(text).replace("%", "%25")  # line breaks, ANSI escapes and other controls as concise writes them
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def github(diagnostics: Sequence[Diagnostic]) -> str:
    """GitHub Actions workflow commands: `::error file=…,line=…,col=…,title=CODE::message`."""
    lines = []
    for d in diagnostics:
        props = []
        if d.location:
            loc = d.location
            props += [f"file={_escape(loc.path, prop=True)}", f"line={loc.line}", f"col={loc.col}"]
        props.append(f"title={d.code}")
        lines.append(f"::{d.severity.value} {','.join(props)}::{_escape(f'{d.code} {d.message}')}")
    return "\n".join(lines)


REPORTERS: dict[str, Callable[[Sequence[Diagnostic]], str]] = {"concise": concise, "json": as_json, "github": github}
