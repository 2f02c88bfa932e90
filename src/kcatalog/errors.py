"""Diagnostics and the exception hierarchy: errors carry data and name what exists."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    """How bad a diagnostic is: errors fail validation, warnings do not."""

    ERROR = "error"
    WARNING = "warning"


def printable(text: str) -> str:
    """`text` with each character that is not printable (line breaks, carriage returns, ANSI escapes and other
    controls, bidirectional overrides) written as a Python escape ('\\n', '\\x1b', '\\u202e'): a file name or
    value shown in a line of output can never fake, hide or erase another line."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


@dataclass(frozen=True)
class Location:
    """A 1-based position in a catalog file."""

    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{printable(self.path)}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    """One problem found while loading a catalog, with a stable code and where it is."""

    code: str
    message: str
    location: Location | None = None
    severity: Severity = Severity.ERROR

    def __post_init__(self) -> None:
        # One line per diagnostic, whatever the input: a target or name may carry line breaks or ANSI escapes.
        if not self.message.isprintable():
            object.__setattr__(self, "message", printable(self.message))

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
    NOT_PROMISED = "not promised"  # the call requires deterministic (or batch-invariant) outputs it does not promise
    AUTO_OFF = "auto off"  # `auto: false`: only a name (backend=, an override, a plan, a table) chooses it
    RANKED_BELOW = "ranked below"  # it could run, but the deciding order puts another first
    NOT_REQUESTED = "not requested"  # the call named another backend
    STALE_TABLE = "stale table"  # a stale tuned entry chose it, and is ignored: priority puts another first


_ELIGIBLE_KINDS = frozenset(
    {RejectKind.AUTO_OFF, RejectKind.RANKED_BELOW, RejectKind.NOT_REQUESTED, RejectKind.STALE_TABLE}
)


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


# Other spellings of names kcatalog knows, as torch and serving configs write them: a hint names the known one
# where it is among the candidates (`--dtype fp16`: did you mean 'float16'?).
ALIASES: Mapping[str, str] = {
    "fp64": "float64",
    "double": "float64",
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn",  # what serving engines mean by fp8: e4m3 weights and activations
    "fp8_e4m3": "float8_e4m3fn",
    "float8_e4m3": "float8_e4m3fn",
    "e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "e5m2": "float8_e5m2",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "rocm": "hip",
    "nvidia": "cuda",
    "gpu": "cuda",  # not 'xpu', which difflib's ratio finds
}


def nearest(name: str, candidates: Iterable[str], *, typo: bool = False) -> str | None:
    """The candidate `name` most plausibly misspells, or None: the same name in another case, a known alias
    (ALIASES, or torch's `torch.float16`), else the one closest by difflib's ratio (at least 0.6). With `typo`,
    for a pool of hundreds (installed modules), only a slip of the keyboard counts: an edit distance of one per
    four characters, never 'zlib' for 'mylib'. Where several are equally close ('tpu': cpu, npu, xpu), none is
    named: the hint would be a guess."""
    folded: dict[str, str] = {}
    for candidate in candidates:
        folded.setdefault(candidate.casefold(), candidate)
    key = name.casefold().removeprefix("torch.")
    found = folded.get(key) or folded.get(ALIASES.get(key, key))
    if found is None:
        scores = _typo_scores(key, folded) if typo else _ratio_scores(key, folded)
        best = max(scores.values(), default=None)
        closest = [candidate for candidate, score in scores.items() if score == best]
        found = folded[closest[0]] if len(closest) == 1 else None
    return found if found != name else None


def _ratio_scores(key: str, candidates: Iterable[str]) -> dict[str, float]:
    """difflib's ratio of each candidate at least 0.6 from `key` (its cheap bounds first, as get_close_matches)."""
    import difflib  # only errors need it; keep it off the import path of a clean load

    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(key)
    scores = {}
    for candidate in candidates:
        matcher.set_seq1(candidate)
        if matcher.real_quick_ratio() >= 0.6 and matcher.quick_ratio() >= 0.6 and matcher.ratio() >= 0.6:
            scores[candidate] = matcher.ratio()
    return scores


def _typo_scores(key: str, candidates: Iterable[str]) -> dict[str, float]:
    """Minus the edits from `key` of each candidate within one edit per four characters of it."""
    limit = max(1, len(key) // 4)
    edits = {candidate: _edits(key, candidate, limit) for candidate in candidates}
    return {candidate: -count for candidate, count in edits.items() if count <= limit}


def _edits(a: str, b: str, limit: int) -> int:
    """Insertions, deletions, substitutions and swaps of neighbours turning `a` into `b` (Damerau-Levenshtein,
    optimal string alignment), or `limit + 1` where the lengths alone need more than `limit`."""
    if abs(len(a) - len(b)) > limit:  # most of hundreds of candidates: not worth the table
        return limit + 1
    before: list[int] = []
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            cost = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, before[j - 2] + 1)
            current.append(cost)
        before, row = row, current
    return row[-1]


def did_you_mean(name: str, candidates: Iterable[str], *, typo: bool = False) -> str:
    """A ' (did you mean 'x'?)' hint for the candidate `name` most plausibly misspells (`nearest`), or ''."""
    found = nearest(name, candidates, typo=typo)
    return f" (did you mean '{found}'?)" if found is not None else ""


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
