"""Hostile catalog files: each is refused quickly, in bounded memory, with one clear diagnostic, by the
library (check_catalog) and by the CLI (`kcatalog validate`: exit 1, no traceback). Nothing in them runs."""

from __future__ import annotations

import os
import re
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from yaml.composer import Composer
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.scanner import Scanner

import kcatalog.read.yaml_nodes  # the reader's pure-Python loader, patched below: internal on purpose
from kcatalog import Location, check_catalog
from kcatalog.read.files import MAX_FILE_BYTES  # the reader's limits, tested at and past them: internal on purpose
from kcatalog.read.yaml_nodes import MAX_DEPTH, MAX_NODES  # likewise
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

HOSTILE = "hostile.yaml"
HEAD = "kcatalog: 1\ngroup: hostile\n"  # the hostile part starts on line 3
QUICK_S = 1.0
SMALL_BYTES = 50 * 1024 * 1024
NODES_EXCEEDED = rf"KC004 more than {MAX_NODES} nodes after alias expansion"
# A refusal of very deep nesting: libyaml's own limit (KC001), Python's recursion limit (KC004), or, with a
# libyaml built without a depth limit (PyYAML 6.0.3's wheel here), kcatalog's own limit once composed (KC004).
TOO_DEEP_FOR_THE_PARSER = (
    r"(KC001 YAML syntax error: exceeded maximum nesting depth while increasing (flow|block) level"
    rf"|KC004 nesting deeper than the parser can follow \(limit {MAX_DEPTH}\)"
    rf"|KC004 nested deeper than {MAX_DEPTH} levels)"
)


def laughs(levels: int = 9, width: int = 10) -> str:
    """'Billion laughs': each level is `width` aliases of the one before; 10**9 strings once expanded."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return HEAD + "\n".join(lines) + "\n"


def quadratic(items: int = 20_000, refs: int = 20_000) -> str:
    """One huge anchored list referenced many times: small file, items * refs nodes once expanded."""
    return HEAD + f"big: &big [{', '.join(['lol'] * items)}]\nrefs: [{', '.join(['*big'] * refs)}]\n"


@dataclass(frozen=True)
class Case:
    """hostile.yaml's contents ('MARKER' is replaced by a path that must never be created) and the one
    diagnostic line it must produce, as an anchored regular expression."""

    content: str | bytes
    expected: str


CASES: dict[str, Case] = {
    "billion-laughs": Case(laughs(), rf"^{HOSTILE}:\d+:\d+: {NODES_EXCEEDED}$"),
    "quadratic-blowup": Case(quadratic(), rf"^{HOSTILE}:3:6: {NODES_EXCEEDED}$"),
    "recursive-alias": Case(HEAD + "x: &a [*a]\n", rf"^{HOSTILE}:3:4: KC004 nested deeper than {MAX_DEPTH} levels$"),
    "nested-100": Case(
        HEAD + "x: " + "[" * 100 + "]" * 100 + "\n", rf"^{HOSTILE}:3:\d+: KC004 nested deeper than {MAX_DEPTH} levels$"
    ),
    "nested-10000-flow-sequences": Case(
        HEAD + "x: " + "[" * 10_000 + "]" * 10_000 + "\n", rf"^{HOSTILE}:3:\d+: {TOO_DEEP_FOR_THE_PARSER}$"
    ),
    "nested-10000-unclosed": Case(
        HEAD + "x: " + "[" * 10_000 + "\n",
        rf"^{HOSTILE}:(3:\d+: {TOO_DEEP_FOR_THE_PARSER}|4:1: KC001 YAML syntax error: did not find expected node "
        r"content while parsing a flow node)$",
    ),
    "nested-10000-flow-mappings": Case(
        HEAD + "x: " + "{a: " * 10_000 + "}" * 10_000 + "\n", rf"^{HOSTILE}:3:\d+: {TOO_DEEP_FOR_THE_PARSER}$"
    ),
    "nested-10000-block-sequences": Case(
        HEAD + "x:\n  " + "- " * 10_000 + "x\n", rf"^{HOSTILE}:4:\d+: {TOO_DEEP_FOR_THE_PARSER}$"
    ),
    "python-object-apply": Case(
        HEAD + "ops: !!python/object/apply:os.system [touch MARKER]\n",
        rf"^{HOSTILE}:3:6: KC003 unsupported YAML tag '!!python/object/apply:os\.system'; "
        r"manifests are plain YAML$",
    ),
    "python-object-new": Case(
        HEAD + "ops: !!python/object/new:os.system [touch MARKER]\n",
        rf"^{HOSTILE}:3:6: KC003 unsupported YAML tag '!!python/object/new:os\.system'; "
        r"manifests are plain YAML$",
    ),
    "python-exec-in-nested-value": Case(
        HEAD + "ops:\n  op:\n    description: !!python/object/apply:builtins.exec\n"
        "      - \"open('MARKER', 'w').close()\"\n",
        rf"^{HOSTILE}:5:18: KC003 unsupported YAML tag '!!python/object/apply:builtins\.exec'; manifests are plain YAML$",
    ),
    "python-tag-on-a-key": Case(
        HEAD + "? !!python/object/apply:os.system [touch MARKER]\n: x\n",
        rf"^{HOSTILE}:3:3: KC003 unsupported YAML tag '!!python/object/apply:os\.system'; "
        r"manifests are plain YAML$",
    ),
    "python-name": Case(
        HEAD + "ops: !!python/name:os.system ''\n",
        rf"^{HOSTILE}:3:6: KC003 unsupported YAML tag '!!python/name:os\.system'; manifests are plain YAML$",
    ),
    "python-module": Case(
        HEAD + "ops: !!python/module:os ''\n",
        rf"^{HOSTILE}:3:6: KC003 unsupported YAML tag '!!python/module:os'; manifests are plain YAML$",
    ),
    "non-utf8-latin1": Case(
        HEAD.encode() + b"description: caf\xe9\n",
        rf"^{HOSTILE}:3:17: KC005 file is not UTF-8: byte 0xe9 cannot be decoded$",
    ),
    "utf16-le-bom": Case(
        HEAD.encode("utf-16"), rf"^{HOSTILE}:1:1: KC005 file is not UTF-8: byte 0xff cannot be decoded$"
    ),
    "utf16-be-bom": Case(
        b"\xfe\xff" + HEAD.encode("utf-16-be"),
        rf"^{HOSTILE}:1:1: KC005 file is not UTF-8: byte 0xfe cannot be decoded$",
    ),
    "utf32-bom": Case(HEAD.encode("utf-32"), rf"^{HOSTILE}:1:1: KC005 file is not UTF-8: byte 0xff cannot be decoded$"),
}
# The other refusals, timed in the same way, that cannot be a table row: the file over the size limit, NUL
# bytes, symlinks, special files.


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    """A path a hostile file would create if any of it ran; the test fails if it exists afterwards."""
    path = tmp_path / "MARKER-created-by-hostile-yaml"
    yield path
    assert not path.exists(), "hostile YAML ran code"


@pytest.fixture
def hostile_dir(workspace: Workspace, marker: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str | bytes], Path]:
    """`write(content)`: a catalog of the clean settings plus hostile.yaml, made the working directory."""

    def write(content: str | bytes) -> Path:
        workspace.minimal(with_manifest=False)
        raw = content.encode() if isinstance(content, str) else content
        directory = workspace.files({HOSTILE: raw.replace(b"MARKER", str(marker).encode())})
        monkeypatch.chdir(directory)
        return directory

    return write


def refused_quickly(expected: str, within_s: float = QUICK_S) -> None:
    """check_catalog on the working directory: no catalog, exactly the one expected diagnostic, in time."""
    start = time.perf_counter()
    catalog, diagnostics = check_catalog(["."])
    elapsed = time.perf_counter() - start
    assert catalog is None
    assert len(diagnostics) == 1, [str(d) for d in diagnostics]
    assert re.match(expected, str(diagnostics[0])), str(diagnostics[0])
    assert elapsed < within_s, f"refusing took {elapsed:.2f} s"


def cli_refuses(expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`kcatalog validate .`: exit 1, the one diagnostic line and the summary on stdout, nothing on stderr."""
    code = main(["validate", "."])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert len(lines) == 2, out
    assert re.match(expected, lines[0]), lines[0]
    assert lines[1] == "Found 1 error in 1 file."


@pytest.mark.parametrize("case", list(CASES))
def test_check_catalog_refuses_hostile_yaml(case: str, hostile_dir: Callable[[str | bytes], Path]) -> None:
    hostile_dir(CASES[case].content)
    refused_quickly(CASES[case].expected)


@pytest.mark.parametrize("case", list(CASES))
def test_validate_command_refuses_hostile_yaml(
    case: str, hostile_dir: Callable[[str | bytes], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hostile_dir(CASES[case].content)
    cli_refuses(CASES[case].expected, capsys)


@pytest.mark.parametrize("case", ["billion-laughs", "quadratic-blowup"])
def test_alias_bombs_are_refused_in_bounded_memory(case: str, hostile_dir: Callable[[str | bytes], Path]) -> None:
    hostile_dir(CASES[case].content)
    tracemalloc.start()  # slows allocation several times: the time limit is checked without it, above
    try:
        catalog, diagnostics = check_catalog(["."])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert catalog is None and re.match(CASES[case].expected, str(diagnostics[0]))
    assert peak < SMALL_BYTES, f"peak {peak / 2**20:.0f} MiB while refusing"


class _PurePythonLoader(Reader, Scanner, Parser, Composer, kcatalog.read.yaml_nodes._PlainResolver):
    """The loader kcatalog builds where PyYAML lacks libyaml: its composer recurses in Python."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        kcatalog.read.yaml_nodes._PlainResolver.__init__(self)


@pytest.mark.parametrize(
    "case", ["nested-10000-flow-sequences", "nested-10000-flow-mappings", "nested-10000-block-sequences"]
)
def test_deep_nesting_without_libyaml_is_refused_not_a_recursion_error(
    case: str, hostile_dir: Callable[[str | bytes], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kcatalog.read.yaml_nodes, "_Loader", _PurePythonLoader)
    hostile_dir(CASES[case].content)
    # PyYAML's Python scanner is quadratic in open flow levels; the composer's RecursionError stops it
    # about 500 levels in, so this costs a few seconds at most, whatever the file's depth.
    refused_quickly(
        rf"^{HOSTILE}:1:1: KC004 nesting deeper than the parser can follow \(limit {MAX_DEPTH}\)$", within_s=10.0
    )


# -- size --------------------------------------------------------------------------------------------------------


def test_a_file_over_the_size_limit_is_refused_unread(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = workspace.minimal(with_manifest=False)
    with open(directory / HOSTILE, "wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)  # sparse: quick to write, and the size check must come before reading
    monkeypatch.chdir(directory)
    expected = rf"^{HOSTILE}:1:1: KC004 file is {MAX_FILE_BYTES + 1} bytes, over the {MAX_FILE_BYTES}-byte limit$"
    refused_quickly(expected)
    cli_refuses(expected, capsys)


def test_a_file_exactly_at_the_size_limit_is_read(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = workspace.minimal()
    text = HEAD + "# "
    (directory / HOSTILE).write_text(text + "x" * (MAX_FILE_BYTES - len(text) - 1) + "\n", encoding="utf-8")
    assert (directory / HOSTILE).stat().st_size == MAX_FILE_BYTES
    monkeypatch.chdir(directory)
    catalog, diagnostics = check_catalog(["."])
    assert diagnostics == []
    assert catalog is not None and catalog.ops() == ["norm.rms_norm"]


# -- encodings and control characters ----------------------------------------------------------------------------


def test_a_utf8_byte_order_mark_is_accepted(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = workspace.minimal()
    manifest = directory / "norm.yaml"
    manifest.write_bytes(b"\xef\xbb\xbf" + manifest.read_bytes())
    monkeypatch.chdir(directory)
    catalog, diagnostics = check_catalog(["."])
    assert diagnostics == []
    assert catalog is not None
    assert catalog.info("norm.rms_norm").location == Location("norm.yaml", 4, 3)  # the BOM shifts no column
    assert main(["validate", "."]) == 0
    assert capsys.readouterr() == ("All checks passed!\n", "")


NUL = HEAD.encode() + b"description: n\x00rm\n"  # the NUL is on line 3, column 15


def test_nul_bytes_are_refused(hostile_dir: Callable[[str | bytes], Path], capsys: pytest.CaptureFixture[str]) -> None:
    hostile_dir(NUL)
    refused_quickly(rf"^{HOSTILE}:\d+:\d+: KC001 .*(#x0000|U\+0000)")
    code = main(["validate", "."])
    out, err = capsys.readouterr()
    assert (code, err) == (1, "") and "Traceback" not in out
    assert out.splitlines()[-1] == "Found 1 error in 1 file."


@pytest.mark.parametrize(
    ("content", "where", "char"),
    [
        (NUL, "3:15", "U+0000"),
        (HEAD.encode() + b"description: \x01\n", "3:14", "U+0001"),
        (HEAD.encode() + "description: éé\x7f\n".encode(), "3:16", "U+007F"),
    ],
    ids=["nul", "soh", "del-after-multibyte"],
)
def test_a_control_character_gets_one_diagnostic_line_at_its_position(
    content: bytes,
    where: str,
    char: str,
    hostile_dir: Callable[[str | bytes], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    hostile_dir(content)
    expected = rf"^{HOSTILE}:{where}: KC001 YAML syntax error: control character {re.escape(char)} is not allowed$"
    refused_quickly(expected)
    cli_refuses(expected, capsys)


# -- symlinks and special files ----------------------------------------------------------------------------------


def test_a_symlink_to_a_file_outside_the_catalog_is_refused_unread(
    workspace: Workspace,
    tmp_path: Path,
    marker: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    directory = workspace.minimal()
    outside = tmp_path / "outside.yaml"
    outside.write_text(HEAD + f"ops: !!python/object/apply:os.system [touch {marker}]\n", encoding="utf-8")
    (directory / "link.yaml").symlink_to(outside)
    monkeypatch.chdir(directory)
    expected = rf"^link\.yaml:1:1: KC005 symlink leaves the catalog directory \(points to '{re.escape(str(outside))}'\); refused$"
    refused_quickly(expected)  # one diagnostic: the target's own content (a python tag) was never parsed
    cli_refuses(expected, capsys)


def test_a_symlink_to_a_directory_outside_the_catalog_is_not_followed(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = workspace.minimal()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "vendor.yaml").write_text(HEAD + "ops: !!python/name:os.system ''\n", encoding="utf-8")
    (directory / "vendor").symlink_to(outside, target_is_directory=True)
    monkeypatch.chdir(directory)
    catalog, diagnostics = check_catalog(["."])
    assert diagnostics == []
    assert catalog is not None and catalog.ops() == ["norm.rms_norm"]


def test_a_symlink_to_a_file_inside_the_catalog_is_read_once(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = workspace.minimal()
    (directory / "alias.yaml").symlink_to("norm.yaml")
    monkeypatch.chdir(directory)
    catalog, diagnostics = check_catalog(["."])
    assert diagnostics == []  # not 'op declared more than once'
    assert catalog is not None and catalog.ops() == ["norm.rms_norm"]


def test_directory_symlink_loops_end(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = workspace.minimal()
    (directory / "loop").symlink_to(".", target_is_directory=True)
    (directory / "sub").mkdir()
    (directory / "sub" / "up").symlink_to("..", target_is_directory=True)
    (directory / "sub" / "absolute").symlink_to(directory, target_is_directory=True)
    monkeypatch.chdir(directory)
    start = time.perf_counter()
    catalog, diagnostics = check_catalog(["."])
    assert time.perf_counter() - start < QUICK_S
    assert diagnostics == []
    assert catalog is not None and catalog.ops() == ["norm.rms_norm"]
    assert main(["validate", "."]) == 0
    assert capsys.readouterr() == ("All checks passed!\n", "")


def test_a_catalog_path_that_is_a_symlink_loop_is_a_diagnostic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "loop").symlink_to("loop")
    monkeypatch.chdir(tmp_path)
    catalog, diagnostics = check_catalog(["loop"])
    assert catalog is None
    assert "KC006 path 'loop' does not exist" in [str(d) for d in diagnostics]
    assert main(["validate", "loop"]) == 1
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_an_unreadable_manifest_symlink_is_reported(
    kind: str, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = workspace.minimal()
    if kind == "loop":
        (directory / "a.yaml").symlink_to("b.yaml")
        (directory / "b.yaml").symlink_to("a.yaml")
    else:
        (directory / "a.yaml").symlink_to("gone.yaml")
    monkeypatch.chdir(directory)
    catalog, diagnostics = check_catalog(["."])
    assert catalog is None
    assert [d.code for d in diagnostics][:1] == ["KC005"]
    assert diagnostics[0].location == Location("a.yaml", 1, 1)


def test_special_files_are_never_opened(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = workspace.minimal()
    fifo = directory / "fifo.yaml"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes
    monkeypatch.chdir(directory)
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(check_catalog(["."])), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader so the test run can end
        with open(fifo, "w"):
            pass
        worker.join(10)
        pytest.fail("check_catalog opened a FIFO and blocked")
    catalog, diagnostics = result[0]  # type: ignore[misc]
    assert diagnostics == []
    assert catalog is not None and catalog.ops() == ["norm.rms_norm"]
