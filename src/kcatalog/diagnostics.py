"""The one place the stages write what they find: a sink of diagnostics, in the order they were found."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .errors import Diagnostic, Location, Severity


class Diagnostics:
    """Every diagnostic a load has found so far, in the order found; read, validate, link and load write here.

    A stage never returns diagnostics nor raises the first one: it adds to the sink it is given and goes on, so
    that one run reports every problem in every file. `sorted()` is the order output shows them in.
    """

    __slots__ = ("_found",)

    def __init__(self, found: Iterable[Diagnostic] = ()) -> None:
        self._found = list(found)

    def add(self, diagnostic: Diagnostic) -> None:
        """Add one diagnostic."""
        self._found.append(diagnostic)

    def extend(self, diagnostics: Iterable[Diagnostic]) -> None:
        """Add several, in their order."""
        self._found.extend(diagnostics)

    def error(self, code: str, message: str, location: Location | None = None) -> None:
        """Add an error: `code` (codes.py), the message, and where it is (None: no one place)."""
        self._found.append(Diagnostic(code, message, location))

    def warning(self, code: str, message: str, location: Location | None = None) -> None:
        """Add a warning: reported, but the catalog still loads."""
        self._found.append(Diagnostic(code, message, location, Severity.WARNING))

    @property
    def has_errors(self) -> bool:
        """Whether any diagnostic so far is an error."""
        return any(d.is_error for d in self._found)

    def errors_since(self, mark: int) -> bool:
        """Whether any diagnostic added after `mark` (an earlier `len()`) is an error."""
        return any(d.is_error for d in self._found[mark:])

    def since(self, mark: int) -> list[Diagnostic]:
        """The diagnostics added after `mark` (an earlier `len()`), in the order found."""
        return self._found[mark:]

    def sorted(self) -> list[Diagnostic]:
        """Every diagnostic ordered by file, position and code (stable: the order found breaks ties)."""
        return sorted(self._found, key=Diagnostic.sort_key)

    def __iter__(self) -> Iterator[Diagnostic]:
        return iter(self._found)

    def __len__(self) -> int:
        return len(self._found)

    def __repr__(self) -> str:
        return f"Diagnostics({self._found!r})"
