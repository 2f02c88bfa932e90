"""Why a target does not resolve: the problems the static resolution passes around, which of several to
report, how one is phrased inside another, and the diagnostic a target's problem becomes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .. import codes
from ..errors import Diagnostic, Severity

UNVERIFIABLE = "not verifiable statically"


def quote(text: str) -> str:
    """Text from a target, quoted: repr escapes newlines and other control characters."""
    return repr(text)


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a name does not resolve: a code and a message without the target's prefix."""

    code: str
    text: str
    bare: bool = False  # a problem of the target's own module, reported as "module 'x' ..." without prefix
    # The modules the name was imported from (`from m import n`, star imports), in order, before its resolution
    # stopped: where the object really comes from, as far as the sources show it (the allow-lists apply to them).
    through: tuple[str, ...] = ()

    @property
    def is_warning(self) -> bool:
        return self.code in codes.TARGET_WARNINGS


def diagnostic(target: str, problem: Problem) -> Diagnostic:
    """The target's problem as a diagnostic: an error, or a warning where the target may still work here."""
    message = problem.text if problem.bare else f"target {quote(target)}: {problem.text}"
    severity = Severity.WARNING if problem.is_warning else Severity.ERROR
    return Diagnostic(problem.code, message, None, severity)


def pick(problems: Iterable[Problem]) -> Problem:
    """Of several ways a name fails, the one to report: one that may still work here (a warning) first."""
    listed = list(problems)
    warning = next((p for p in listed if p.is_warning), None)
    return warning or listed[-1]


def reason(text: str) -> str:
    """A problem's text as the reason inside another message (which says 'not verifiable' once, at its end)."""
    return text.removesuffix(f"; {UNVERIFIABLE}")


def one_line(text: str) -> str:
    """No raw line breaks in a message."""
    return text.replace("\r", "\\r").replace("\n", "\\n")
