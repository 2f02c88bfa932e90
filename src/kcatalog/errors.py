"""Diagnostics and the exception hierarchy: errors carry data and name what exists."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    """How bad a diagnostic is: errors fail validation, warnings do not."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Location:
    """A 1-based position in a catalog file."""

    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    """One problem found while loading a catalog, with a stable code and where it is."""

    code: str
    message: str
    location: Location | None = None
    severity: Severity = Severity.ERROR

    def __post_init__(self) -> None:
        # One line per diagnostic, whatever the input: a target or name may carry line breaks.
        if "\n" in self.message or "\r" in self.message:
            escaped = self.message.replace("\r", "\\r").replace("\n", "\\n")
            object.__setattr__(self, "message", escaped)

    @property
    def is_error(self) -> bool:
        """True for errors, False for warnings."""
        return self.severity is Severity.ERROR

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        label = "" if self.is_error else "warning: "
        return f"{where}{self.code} {label}{self.message}"

    def sort_key(self) -> tuple[str, int, int, str]:
        """Order by file, position, then code, so output is stable whatever the file order."""
        loc = self.location
        return (loc.path, loc.line, loc.col, self.code) if loc else ("", 0, 0, self.code)


class RejectKind(str, Enum):
    """Why a backend does not run for a call: what a program switches on (`explain --output-format json`)."""

    CAPABILITY = "capability"  # no capability of the backend matches the platform (device, architecture)
    REQUIRES = "requires"  # a distribution it requires is not installed
    DTYPE = "dtype"  # it does not support the call's dtype
    IMPORT_FAILED = "import failed"  # its import failed on first use: the next eligible backend runs
    GATE = "gate"  # its per-call gate (`eligible:`) refuses this call
    AUTO_OFF = "auto off"  # `auto: false`: only a name (backend=, an override, a plan, a table) chooses it
    RANKED_BELOW = "ranked below"  # it could run, but the deciding order puts another first
    NOT_REQUESTED = "not requested"  # the call named another backend


_ELIGIBLE_KINDS = frozenset({RejectKind.AUTO_OFF, RejectKind.RANKED_BELOW, RejectKind.NOT_REQUESTED})


@dataclass(frozen=True)
class Rejected:
    """A backend that will not run, why (`kind`, and the prose `reason`)."""

    backend: str
    reason: str
    kind: RejectKind

    @property
    def eligible(self) -> bool:
        """Whether it could run here: only the choice of another backend keeps it out."""
        return self.kind in _ELIGIBLE_KINDS


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A ' (did you mean 'x'?)' hint for the nearest candidate, or '' when none is close."""
    import difflib  # only errors need it; keep it off the import path of a clean load

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def listing(names: Iterable[str], limit: int = 20) -> str:
    """'a, b, c' capped at `limit` names, or '(none)'."""
    names = list(names)
    shown = ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")
    return shown or "(none)"


class CatalogError(Exception):
    """Base class of kcatalog's errors. A failed load carries every diagnostic it found."""

    def __init__(self, message: str, diagnostics: Sequence[Diagnostic] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.diagnostics = tuple(diagnostics)

    def __str__(self) -> str:
        return self.message

    @classmethod
    def from_diagnostics(cls, diagnostics: Sequence[Diagnostic]) -> CatalogError:
        """One error for a failed load, its message listing every error diagnostic."""
        errors = [d for d in diagnostics if d.is_error]
        lines = "\n".join(f"  {d}" for d in errors)
        noun = "error" if len(errors) == 1 else "errors"
        return cls(f"catalog has {len(errors)} {noun}:\n{lines}", diagnostics)


class UnknownOpError(CatalogError, KeyError):
    """No such op in the catalog. Subclasses KeyError so mapping-style callers keep working."""

    def __init__(self, op: str, available: Sequence[str]) -> None:
        self.op = op
        self.available = tuple(available)
        super().__init__(f"no op '{op}'{did_you_mean(op, self.available)}. Available: {listing(self.available)}")


class UnknownBackendError(CatalogError, KeyError):
    """The op exists but has no backend of that name."""

    def __init__(self, op: str, backend: str, available: Sequence[str], declared_at: Location | None) -> None:
        self.op = op
        self.backend = backend
        self.available = tuple(available)
        self.declared_at = declared_at
        where = f" (declared at {declared_at})" if declared_at else ""
        super().__init__(
            f"no '{backend}' backend for op '{op}'{where}{did_you_mean(backend, self.available)}; "
            f"available: {', '.join(self.available)}"
        )


class NoEligibleBackendError(CatalogError):
    """No backend of the op can run here; `rejected` says why for each one."""

    def __init__(self, op: str, platform: str, rejected: Sequence[Rejected]) -> None:
        self.op = op
        self.platform = platform
        self.rejected = tuple(rejected)
        reasons = "; ".join(f"{r.backend}: {r.reason}" for r in self.rejected)
        super().__init__(f"no backend of op '{op}' can run on {platform}: {reasons}")


class KernelImportError(CatalogError, ImportError):
    """Importing a backend's target failed on first use."""

    def __init__(self, op: str, backend: str, target: str, cause: BaseException, what: str | None = None) -> None:
        self.op = op  # the op id (or, for a layer mapping's forward, the mapping's name)
        self.backend = backend
        self.target = target
        what = what or f"backend '{backend}' of op '{op}'"
        super().__init__(f"cannot load {what} from '{target}': {type(cause).__name__}: {cause}")


class NamespaceTakenError(CatalogError):
    """Some of the torch op names asked for are taken in that namespace: by other code, by another Catalog, or by
    this Catalog's own ops registered there with the other `traced`. Another namespace takes them."""


class InconsistentSelectionError(CatalogError):
    """Ranks resolved some ops differently: `differing` maps each op to what each rank chose."""

    def __init__(self, differing: dict[str, list[str]]) -> None:
        self.differing = differing
        lines = []
        for op, per_rank in differing.items():
            groups: dict[str, list[int]] = {}
            for rank, chosen in enumerate(per_rank):
                groups.setdefault(chosen, []).append(rank)
            parts = [f"rank{'s' * (len(r) > 1)} {', '.join(map(str, r))}: {chosen}" for chosen, r in groups.items()]
            lines.append(f"  {op}: " + "; ".join(parts))
        super().__init__(
            f"ranks resolved {len(differing)} op{'s' * (len(differing) != 1)} differently:\n" + "\n".join(lines)
        )
