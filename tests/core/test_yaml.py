"""The strict YAML reader: plain data only, duplicate keys refused, aliases bounded, 1-based positions."""

from __future__ import annotations

import time

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kcatalog import Diagnostic, Location
from kcatalog.read.yaml_nodes import (  # unit tests of the YAML reader: internal on purpose
    MAX_DEPTH,
    MAX_NODES,
    ParsedFile,
    find_node,
    node_location,
    parse_yaml,
)


def data(text: str) -> object:
    """The plain data of a document the reader must accept."""
    parsed = parse_yaml("m.yaml", text)
    assert isinstance(parsed, ParsedFile), parsed
    return parsed.data


def problem(text: str) -> str:
    """The one diagnostic of a document the reader must refuse, as `path:line:col: CODE message`."""
    parsed = parse_yaml("m.yaml", text)
    assert isinstance(parsed, Diagnostic), parsed
    return str(parsed)


def test_plain_scalars_keep_their_yaml_types() -> None:
    text = "s: text\ni: 0x1F\nf: 1.5e-3\nb: true\nn: ~\nq: '8.0'\nd: 2024-01-01\neq: {=: 1}\n"
    assert data(text) == {
        "s": "text",
        "i": 31,
        "f": 1.5e-3,
        "b": True,
        "n": None,
        "q": "8.0",
        "d": "2024-01-01",
        "eq": {"=": 1},
    }


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n...\n"])
def test_an_empty_document_is_none(text: str) -> None:
    assert data(text) is None


def test_explicit_document_markers_are_one_document() -> None:
    assert data("---\na: 1\n...\n") == {"a": 1}


@pytest.mark.parametrize(
    ("text", "expected", "path", "kept"),
    [
        (
            "a: 1\nb: 2\na: 3\n",
            "m.yaml:3:1: KC002 duplicate key 'a' (first defined at line 1, column 1)",
            ("a",),
            {"a": 1, "b": 2},
        ),
        (
            "ops:\n  x:\n    d: 1\n    d: 2\n",
            "m.yaml:4:5: KC002 duplicate key 'd' (first defined at line 3, column 5)",
            ("ops", "x", "d"),
            {"ops": {"x": {"d": 1}}},
        ),
        (
            "{a: 1, b: 2, a: 3}",
            "m.yaml:1:14: KC002 duplicate key 'a' (first defined at line 1, column 2)",
            ("a",),
            {"a": 1, "b": 2},
        ),
        (
            "1: a\n0x1: b\n",
            "m.yaml:2:1: KC002 duplicate key '1' (first defined at line 1, column 1)",
            (1,),
            {1: "a"},
        ),
    ],
    ids=["top-level", "nested", "flow", "same-int-spelled-twice"],
)
def test_duplicate_keys_are_reported_with_their_path_and_the_first_value_kept(
    text: str, expected: str, path: tuple[object, ...], kept: object
) -> None:
    # The rest of the file is still read: the validator leaves out only the part the key is in.
    parsed = parse_yaml("m.yaml", text)
    assert isinstance(parsed, ParsedFile)
    assert [(str(d.diagnostic), d.paths) for d in parsed.duplicates] == [(expected, (path,))]
    assert parsed.data == kept


def test_a_duplicate_key_in_an_aliased_mapping_has_every_path_it_is_reached_by() -> None:
    parsed = parse_yaml("m.yaml", "a: &m {k: 1, k: 2}\nb: *m\n")
    assert isinstance(parsed, ParsedFile)
    assert sorted(parsed.duplicates[0].paths) == [("a", "k"), ("b", "k")]


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("a: !!python/object/apply:os.system [ls]\n", "!!python/object/apply:os.system"),
        ("a: !!python/name:os.system ''\n", "!!python/name:os.system"),
        ("a: !include other.yaml\n", "!include"),
        ("a: !!binary aGVsbG8=\n", "!!binary"),
        ("a: !!set {x, y}\n", "!!set"),
        ("a: !!timestamp 2024-01-01\n", "!!timestamp"),
    ],
    ids=["python-apply", "python-name", "custom", "binary", "set", "timestamp"],
)
def test_tags_beyond_plain_yaml_are_refused(text: str, tag: str) -> None:
    assert problem(text) == f"m.yaml:1:4: KC003 unsupported YAML tag '{tag}'; manifests are plain YAML"


def test_plain_tags_are_allowed() -> None:
    assert data("a: !!str 5\nb: !!int '7'\nc: !!float 1\n") == {"a": "5", "b": 7, "c": 1.0}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "base: &b {x: 1}\nitem:\n  <<: *b\n",
            "m.yaml:3:3: KC003 merge keys ('<<') are not supported; write the fields out",
        ),
        ("a: 1\n---\nb: 2\n", "m.yaml:2:1: KC003 multiple YAML documents in one file; a manifest is one document"),
        ("? [a, b]\n: 1\n", "m.yaml:1:3: KC003 mapping keys must be scalars"),
        (
            "a:\n\tb: 1\n",
            "m.yaml:2:1: KC001 YAML syntax error: tab character where YAML expects indentation; indent with spaces",
        ),
        (
            "a: [1, 2\n",
            "m.yaml:2:1: KC001 YAML syntax error: did not find expected ',' or ']' while parsing a flow sequence",
        ),
    ],
    ids=["merge-key", "two-documents", "list-as-key", "tab", "unclosed-flow"],
)
def test_structure_problems(text: str, expected: str) -> None:
    assert problem(text) == expected


def laughs(levels: int, width: int = 10) -> str:
    """The 'billion laughs' document: each level is `width` aliases of the one before."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_alias_expansion_is_bounded() -> None:
    text = laughs(9)  # 10**9 strings once expanded
    start = time.perf_counter()
    result = problem(text)
    elapsed = time.perf_counter() - start
    assert result.startswith("m.yaml:") and f"KC004 more than {MAX_NODES} nodes after alias expansion" in result
    assert elapsed < 1.0, f"refusing an alias bomb took {elapsed:.2f} s; expansion is not bounded"


def test_aliases_within_the_budget_are_expanded() -> None:
    loaded = data(laughs(3, width=3))
    assert loaded["l2"] == [[["lol"] * 3] * 3] * 3


def nested(kind: str, levels: int) -> str:
    if kind == "list":
        return "[" * levels + "]" * levels
    leaf = "1" if kind == "map-int-leaf" else "x"
    return "{a: " * levels + leaf + "}" * levels


@pytest.mark.parametrize("kind", ["list", "map-int-leaf", "map-str-leaf"])
def test_nesting_up_to_the_limit_is_accepted(kind: str) -> None:
    assert isinstance(parse_yaml("m.yaml", nested(kind, MAX_DEPTH)), ParsedFile)


@pytest.mark.parametrize(
    "kind",
    [
        # The depth check counts from 0 and only runs for non-string nodes: 65 levels pass unless an int leaf
        # makes a 66th.
        "list",
        "map-int-leaf",
        "map-str-leaf",
    ],
)
def test_nesting_beyond_the_limit_is_refused(kind: str) -> None:
    assert f"KC004 nested deeper than {MAX_DEPTH} levels" in problem(nested(kind, MAX_DEPTH + 1))


def test_positions_are_one_based() -> None:
    parsed = parse_yaml("m.yaml", "a: 1\nb:\n  - x\n  - {c: y}\n")
    assert isinstance(parsed, ParsedFile)
    root = parsed.root
    assert node_location("m.yaml", root) == Location("m.yaml", 1, 1)
    assert node_location("m.yaml", find_node(root, ["b", 0])) == Location("m.yaml", 3, 5)
    assert node_location("m.yaml", find_node(root, ["b", 1, "c"])) == Location("m.yaml", 4, 9)
    assert node_location("m.yaml", find_node(root, ["b", 1, "c"], key=True)) == Location("m.yaml", 4, 6)
    assert node_location("m.yaml", None) == Location("m.yaml", 1, 1)


def test_find_node_stops_at_the_deepest_existing_node() -> None:
    parsed = parse_yaml("m.yaml", "a:\n  b: 1\n")
    assert isinstance(parsed, ParsedFile)
    missing = find_node(parsed.root, ["a", "nope", "deeper"])
    assert node_location("m.yaml", missing) == Location("m.yaml", 2, 3)  # the mapping under 'a'


def test_problem_positions_are_one_based() -> None:
    assert problem("!!python/none x\n").startswith("m.yaml:1:1: KC003 ")


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
documents = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=75, deadline=None)
@given(documents)
def test_what_pyyaml_dumps_reads_back_unchanged(document: object) -> None:
    text = yaml.safe_dump({"doc": document})
    assert data(text) == {"doc": document}
