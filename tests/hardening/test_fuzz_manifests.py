"""Fuzzing: mutants of the shipped catalog and of clean corpus cases never make check_catalog raise.

Either it returns a catalog, or None with at least one error diagnostic; every located diagnostic points at a
real line (1-based, within the file) and column of one of the catalog's files; load_catalog raises only
CatalogError, carrying the same diagnostics. Mutations act on the YAML text (truncate, insert bytes, characters
or YAML syntax, duplicate a key line), on the parsed structure (delete, rename or retype a key, splice a value
from elsewhere) and on the files (swap, drop, move into a subdirectory, rename to the settings file's name).

KCATALOG_FUZZ_SCALE=10 runs ten times the examples (the default is about 2,000 in all, under a minute).
"""

from __future__ import annotations

import copy
import itertools
import os
import re
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from catalog_builder import Workspace
from hypothesis import HealthCheck, Phase, event, find, given, settings
from hypothesis import strategies as st

from kcatalog import CatalogError, check_catalog, load_catalog

REPO = Path(__file__).resolve().parents[2]
CLEAN_CORPUS_CASES = [
    "clean_minimal",
    "clean_extends_other_group",
    "anchors_and_aliases_ok",
    "clean_utf8_bom",
    "yml_suffix",
    "op_priority_names_extension_backend",
]
SEEDS: dict[str, dict[str, bytes]] = {
    "shipped": {path.name: path.read_bytes() for path in sorted((REPO / "catalog").glob("*.yaml"))},
    **{
        case: {
            path.name: path.read_bytes()
            for path in sorted((REPO / "tests" / "corpus" / case).iterdir())
            if path.suffix in (".yaml", ".yml")
        }
        for case in CLEAN_CORPUS_CASES
    },
}
SCALE = float(os.environ.get("KCATALOG_FUZZ_SCALE", "1"))
Files = dict[str, bytes]  # path relative to the catalog directory -> contents
Draw = Callable[[st.SearchStrategy[Any]], Any]


def fuzz(count: int) -> settings:
    """Hypothesis settings for `count` examples (times KCATALOG_FUZZ_SCALE); every example writes files."""
    return settings(
        max_examples=max(1, int(count * SCALE)),
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# -- text mutations -----------------------------------------------------------------------------------------------

YAML_SYNTAX = [
    "&a ",
    "*a",
    "*a :",
    "? ",
    "- ",
    "-",
    "[",
    "]",
    "{",
    "}",
    ": ",
    ":",
    ", ",
    "#",
    "'",
    '"',
    "|\n",
    ">-\n",
    "!!str ",
    "!!int ",
    "!!float ",
    "!!bool ",
    "!!null ",
    "!!map ",
    "!!seq ",
    "!local ",
    "~",
    "<<: ",
    "---\n",
    "...\n",
    "%YAML 1.1\n",
    "%TAG ! tag:x,2024:\n",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "  ",
    "\\",
    "\\x00",
    "\u2028",
    "\x85",
    "\ufeff",
    "null",
    "true",
    "yes",
    "1e400",
    ".nan",
    "0x1F",
    "0o17",
    "1:30",
    "2024-01-01",
    "=",
    "%",
    "@",
    "`",
]
KEY_LINE = re.compile(rb"^[ \t]*(?:- )?[A-Za-z_\"'][^:\n]*:(?:[ \t]|$)", re.MULTILINE)


def truncate(draw: Draw, files: Files) -> Files:
    name = draw(st.sampled_from(sorted(files)))
    return {**files, name: files[name][: draw(st.integers(0, len(files[name])))]}


def insert(draw: Draw, files: Files) -> Files:
    name = draw(st.sampled_from(sorted(files)))
    data = files[name]
    at = draw(st.integers(0, len(data)))
    inserted = draw(
        st.one_of(
            st.binary(min_size=1, max_size=6),
            st.text(min_size=1, max_size=6).map(str.encode),
            st.sampled_from(YAML_SYNTAX).map(str.encode),
        )
    )
    return {**files, name: data[:at] + inserted + data[at:]}


def duplicate_key_line(draw: Draw, files: Files) -> Files:
    name = draw(st.sampled_from(sorted(files)))
    lines = list(KEY_LINE.finditer(files[name]))
    if not lines:
        return files
    line = draw(st.sampled_from(lines))
    end = files[name].find(b"\n", line.end())
    end = len(files[name]) if end < 0 else end + 1
    copied = files[name][line.start() : end]
    where = draw(st.sampled_from([line.start(), end]))  # right before or right after itself
    return {**files, name: files[name][:where] + copied.rstrip(b"\n") + b"\n" + files[name][where:]}


TEXT_MUTATIONS = [truncate, insert, duplicate_key_line]


# -- structure mutations ----------------------------------------------------------------------------------------

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML has it: several times faster
SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

SCALARS = st.one_of(st.text(max_size=12), st.integers(), st.floats(), st.booleans(), st.none())
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=8), SCALARS, max_size=3))


def typo(draw: Draw, word: str) -> str:
    """A near miss of `word`: one character dropped, doubled, swapped with the next, or replaced."""
    if not word:
        return draw(st.text(min_size=1, max_size=8))
    i = draw(st.integers(0, len(word) - 1))
    kind = draw(st.sampled_from(["drop", "double", "swap", "replace", "case"]))
    if kind == "drop":
        return word[:i] + word[i + 1 :]
    if kind == "double":
        return word[:i] + word[i] + word[i:]
    if kind == "swap" and i + 1 < len(word):
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == "case":
        return word.swapcase()
    return word[:i] + draw(st.sampled_from(string.ascii_lowercase + "_-. ")) + word[i + 1 :]


def paths(document: Any) -> list[tuple[Any, ...]]:
    """Every path (keys and indices) from the root to a value below it; shared or recursive parts once."""
    found: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), document)]
    seen: set[int] = set()
    while stack:
        path, node = stack.pop()
        if not isinstance(node, (dict, list)) or id(node) in seen:
            continue
        seen.add(id(node))
        for key, value in node.items() if isinstance(node, dict) else enumerate(node):
            found.append((*path, key))
            stack.append(((*path, key), value))
    return found


def at(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


def delete(draw: Draw, document: Any, path: tuple[Any, ...]) -> None:
    del at(document, path[:-1])[path[-1]]


def rename(draw: Draw, document: Any, path: tuple[Any, ...]) -> None:
    parent, old = at(document, path[:-1]), path[-1]
    if not isinstance(parent, dict):
        return
    new = typo(draw, old) if isinstance(old, str) and draw(st.booleans()) else draw(st.text(max_size=12))
    items = [(new if key == old else key, value) for key, value in parent.items()]
    parent.clear()
    parent.update(items)


def retype(draw: Draw, document: Any, path: tuple[Any, ...]) -> None:
    at(document, path[:-1])[path[-1]] = draw(VALUES)


def splice(draw: Draw, document: Any, path: tuple[Any, ...]) -> None:
    source = draw(st.sampled_from(paths(document)))
    at(document, path[:-1])[path[-1]] = copy.deepcopy(at(document, source))


def structural(edit: Callable[[Draw, Any, tuple[Any, ...]], None]) -> Callable[[Draw, Files], Files]:
    """A mutation that parses one file, edits the document at a random path and dumps it back."""

    def mutate(draw: Draw, files: Files) -> Files:
        name = draw(st.sampled_from(sorted(files)))
        try:
            document = yaml.load(files[name], Loader=SafeLoader)
        except (yaml.YAMLError, ValueError, LookupError, ArithmeticError, RecursionError):
            return files  # an earlier mutation broke the file; this one has nothing to edit
        found = paths(document)
        if not found:
            return files
        edit(draw, document, draw(st.sampled_from(found)))
        return {**files, name: yaml.dump(document, Dumper=SafeDumper, sort_keys=False, allow_unicode=True).encode()}

    mutate.__name__ = edit.__name__
    return mutate


STRUCTURE_MUTATIONS = [structural(edit) for edit in (delete, rename, retype, splice)]


# -- file mutations -----------------------------------------------------------------------------------------------


def swap(draw: Draw, files: Files) -> Files:
    if len(files) < 2:
        return files
    a, b = draw(st.lists(st.sampled_from(sorted(files)), min_size=2, max_size=2, unique=True))
    return {**files, a: files[b], b: files[a]}


def drop(draw: Draw, files: Files) -> Files:
    name = draw(st.sampled_from(sorted(files)))
    return {key: value for key, value in files.items() if key != name}


def move(draw: Draw, files: Files) -> Files:
    """Into a subdirectory, or onto another name: the settings file's, a .yml one, or one that is not YAML."""
    name = draw(st.sampled_from(sorted(files)))
    new = draw(st.sampled_from([f"sub/{name}", "kcatalog.yaml", "sub/kcatalog.yaml", "extra.yml", f"{name}.txt"]))
    rest = {key: value for key, value in files.items() if key != name}
    return {**rest, new: files[name]}


FILE_MUTATIONS = [swap, drop, move]


# -- the property -------------------------------------------------------------------------------------------------


@st.composite
def mutants(draw: Draw, mutations: list[Callable[[Draw, Files], Files]], most: int = 3) -> Files:
    """A seed catalog with 1..`most` mutations drawn from `mutations` applied in turn."""
    seed = draw(st.sampled_from(sorted(SEEDS)))
    files = dict(SEEDS[seed])
    applied = draw(st.lists(st.sampled_from(mutations), min_size=1, max_size=most))
    for mutation in applied:
        if files:  # `drop` may have removed the last file
            files = mutation(draw, files)
    event(f"seed {seed}")
    return files


@pytest.fixture(scope="module")
def directories(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Files], Path]:
    """`write(files)`: a fresh catalog directory for each example, all in one module-wide workspace."""
    workspace = Workspace(tmp_path_factory.mktemp("fuzz"))  # catalogs only: its site/ never goes on sys.path
    counter = itertools.count()

    def write(files: Files) -> Path:
        return workspace.files(files, name=f"example-{next(counter)}")

    return write


def lines_in(content: bytes) -> int:
    """An upper bound of the file's line count as YAML counts lines (\\r, NEL, LS and PS break lines too)."""
    text = content.decode("utf-8", "replace")
    return 1 + sum(text.count(brk) for brk in ("\n", "\r", "\x85", "\u2028", "\u2029"))


def check_behaves(directory: Path, *, check_targets: bool) -> None:
    """The property: check_catalog answers (catalog xor errors, located diagnostics); load_catalog agrees."""
    catalog, diagnostics = check_catalog([directory], check_targets=check_targets)
    errors = [d for d in diagnostics if d.is_error]
    assert (catalog is None) == bool(errors), [str(d) for d in diagnostics]
    files = {path.resolve(): path for path in directory.resolve().rglob("*") if path.is_file()}
    for diagnostic in diagnostics:
        location = diagnostic.location
        if location is None:
            continue
        path = (Path.cwd() / location.path).resolve()
        assert path in files, f"{diagnostic} names no catalog file"
        assert location.line >= 1 and location.col >= 1, str(diagnostic)
        assert location.line <= lines_in(files[path].read_bytes()), f"{diagnostic}: past the end of the file"
    try:
        loaded = load_catalog([directory], check_targets=check_targets)
    except CatalogError as exc:
        assert catalog is None
        assert list(exc.diagnostics) == diagnostics
    else:
        assert catalog is not None
        assert loaded.ops() == catalog.ops()
    event("refused" if catalog is None else "accepted")


@pytest.mark.parametrize(
    "mutation", TEXT_MUTATIONS + STRUCTURE_MUTATIONS + FILE_MUTATIONS, ids=lambda mutation: mutation.__name__
)
def test_every_mutation_changes_catalogs(mutation: Callable[[Draw, Files], Files]) -> None:
    seeds = list(SEEDS.values())
    find(
        mutants([mutation], most=1),
        lambda files: files not in seeds,
        settings=settings(
            max_examples=50, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
        ),
    )


def test_seeds_are_clean(workspace: Workspace) -> None:
    for seed, files in SEEDS.items():
        directory = workspace.files(files, name=seed)
        catalog, diagnostics = check_catalog([directory])
        assert catalog is not None and [d for d in diagnostics if d.is_error] == [], seed


@fuzz(700)
@given(files=mutants(TEXT_MUTATIONS), check_targets=st.sampled_from([False] * 7 + [True]))
def test_text_mutants_never_crash(files: Files, check_targets: bool, directories: Callable[[Files], Path]) -> None:
    check_behaves(directories(files), check_targets=check_targets)


@fuzz(900)
@given(files=mutants(STRUCTURE_MUTATIONS), check_targets=st.sampled_from([False] * 7 + [True]))
def test_structure_mutants_never_crash(files: Files, check_targets: bool, directories: Callable[[Files], Path]) -> None:
    check_behaves(directories(files), check_targets=check_targets)


@fuzz(400)
@given(
    files=mutants(TEXT_MUTATIONS + STRUCTURE_MUTATIONS + FILE_MUTATIONS, most=4),
    check_targets=st.sampled_from([False] * 7 + [True]),
)
def test_mixed_mutants_never_crash(files: Files, check_targets: bool, directories: Callable[[Files], Path]) -> None:
    check_behaves(directories(files), check_targets=check_targets)


# -- what the fuzzer found, as plain tests ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("kcatalog: 1\nb", "2:2"),
        ("kcatalog: 1\nbackends: [torch", "2:17"),
    ],
    ids=["plain-key", "unclosed-flow"],
)
def test_a_problem_at_the_end_of_the_file_points_inside_it(
    text: str, where: str, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace.files({"kcatalog.yaml": text}))
    catalog, diagnostics = check_catalog(["."])
    assert catalog is None
    assert [str(d).partition(" KC")[0] for d in diagnostics] == [f"kcatalog.yaml:{where}:"]
