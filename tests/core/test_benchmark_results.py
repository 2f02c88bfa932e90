"""Every results file the docs, the benchmarks and the code name is in benchmarks/results/, which holds the current
figures only (earlier runs are in git history)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
#: `results/NAME`, as the docs and the scripts write it.
PATH = re.compile(r"results/([\w.{},*]*[\w}*])")
#: A bare results file name in a .md file: `kernels_h200_gaps.md`, `kernelize_h200.{json,txt}`, `model_h200.*`.
BARE = re.compile(
    r"(?<![/\w])((?:\w+_h200\w*|load_waves_triton\d+|rank_consistency_\w+)[\w{},]*(?:\.\*|\.\{[a-z,]+\}|\.[a-z]+)?)"
)


def sources() -> list[Path]:
    found = [REPO / "README.md", REPO / "SECURITY.md"]
    for folder in ("docs", "benchmarks", "src"):
        found += [p for p in (REPO / folder).rglob("*") if p.suffix in (".md", ".py")]
    return [p for p in found if p.is_file()]


def expand(name: str) -> list[str]:
    """`a_{1,2}.{json,txt}` -> the four names."""
    parts = re.split(r"(\{[^}]*\})", name)
    options = [part[1:-1].split(",") if part.startswith("{") else [part] for part in parts]
    return ["".join(choice) for choice in itertools.product(*options)]


def test_every_results_file_named_exists() -> None:
    names = {p.name for p in RESULTS.iterdir()}
    stems = {name.split(".")[0] for name in names}

    def exists(name: str) -> bool:
        name = name.removesuffix(".*")
        return name in names or ("." not in name and name in stems)  # no suffix: a stem (`--out results/tune_h200`)

    missing = []
    for source in sources():
        text = source.read_text(encoding="utf-8")
        found = [m.group(1) for m in PATH.finditer(text)]
        if source.suffix == ".md":
            # A results file's "History" names the earlier runs, which git keeps.
            current = text.split("\n## History")[0] if source.parent == RESULTS else text
            found += [m.group(1) for m in BARE.finditer(current)]
        rel = source.relative_to(REPO)
        missing += [f"{rel}: {name}" for pattern in found for name in expand(pattern) if not exists(name)]
    assert not missing, "results files named but not in benchmarks/results/:\n" + "\n".join(sorted(set(missing)))
