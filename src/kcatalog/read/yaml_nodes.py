"""YAML text to plain Python data, keeping the node tree and a table of positions; strict and bounded."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from .. import codes
from ..errors import Diagnostic, Location
from .files import MAX_FILE_BYTES
from .location_table import LocationTable

try:  # libyaml's C parser is several times faster; fall back to pure Python where absent.
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml.composer import Composer
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser, Composer):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            Composer.__init__(self)


MAX_NODES = 500_000  # nodes after alias expansion: bounds "billion laughs" and sheer size
MAX_DEPTH = 64
MAX_EXPANDED_CHARS = 4 * MAX_FILE_BYTES  # text after alias expansion: bounds aliases of long strings
MAX_PLAIN_KEY_CHARS = 1024  # YAML 1.1's limit on implicit keys (libyaml enforces it)
MAX_NUMBER_CHARS = 100  # longer numerals are no config value; int() and YAML 1.1 base 60 are slow on them

_STR = "tag:yaml.org,2002:str"
_PLAIN_SCALAR_TAGS = {
    _STR,
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"

# Only the scalar constructors of the safe loader, used for non-string scalars. Called directly:
# SafeConstructor.construct_object would keep every node it ever built in constructed_objects.
_constructor = yaml.constructor.SafeConstructor()
_SCALAR_CONSTRUCTORS = {tag: yaml.constructor.SafeConstructor.yaml_constructors[tag] for tag in _PLAIN_SCALAR_TAGS}
# What YAML refuses to read (PyYAML's own list): found here, with its position, whichever parser runs.
_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE
_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")

# YAML 1.1's implicit scalar types, copied once so resolvers other libraries register globally do
# not change what a manifest means. Timestamps stay text (an unquoted date in a description is
# not an error) and '=' value keys are dropped.
_IMPLICIT = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag in _PLAIN_SCALAR_TAGS or tag.endswith(":merge")]
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
}

# Plain scalar -> its implicit tag. Catalogs repeat their words (names, dtypes, devices) thousands of
# times, and the rules above are fixed, so this never goes stale; its size is bounded.
_RESOLVED: dict[str, str] = {}


class _PlainResolver(yaml.resolver.BaseResolver):
    """Resolves plain scalars by their first character; no path resolvers. Part of the parse hot path."""

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass

    def resolve(self, kind: type, value: str, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode:
            return _plain_tag(value) if implicit[0] else _STR
        return _SEQ if kind is yaml.SequenceNode else _MAP


def _plain_tag(value: str) -> str:
    tag = _RESOLVED.get(value)
    if tag is None:
        tag = next((tag for tag, regexp in _IMPLICIT.get(value[:1], ()) if regexp.match(value)), _STR)
        if len(_RESOLVED) < 50_000:
            _RESOLVED[value] = tag
    return tag


def reads_as_text(plain: str) -> bool:
    """Whether `plain`, written unquoted, reads back as that text (not as a number, boolean or null): what the
    emitter (write/yaml_text.py) asks before writing a string without quotes."""
    return _plain_tag(plain) == _STR


class _Loader(_Parser, _PlainResolver):
    """Composes nodes only; plain data is built by _NodeConverter below."""

    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        _PlainResolver.__init__(self)


@dataclass(frozen=True)
class DuplicateKey:
    """A key written twice in one mapping: its diagnostic, and the paths of that key in the data (more than one
    where the mapping is reached through aliases). The data keeps the first value, so the rest of the file is still
    read; the validator leaves out the part of the file the key is in."""

    diagnostic: Diagnostic
    paths: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class ParsedFile:
    """A YAML file read into plain data, its node tree (for positions in what fails the schema), the table of
    where each key and value is written (for the stages after it), and the keys written twice."""

    path: str
    data: Any
    root: yaml.Node | None
    locations: LocationTable
    duplicates: tuple[DuplicateKey, ...] = ()


class _Refused(Exception):
    """Stops the converter at the first node plain config must not contain; carries its diagnostic."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def node_location(path: str, node: yaml.Node | None) -> Location:
    """The 1-based position where a node starts."""
    if node is None:
        return Location(path, 1, 1)
    mark = node.start_mark
    return Location(path, mark.line + 1, mark.column + 1)


def parse_yaml(path: str, text: str) -> ParsedFile | Diagnostic:
    """Parse one YAML document into dicts, lists and scalars; a diagnostic instead of raising."""
    bad = _NON_PRINTABLE.search(text)
    if bad is not None:
        line, col = _position(text, bad.start())
        return Diagnostic(
            codes.YAML_SYNTAX,
            f"YAML syntax error: control character U+{ord(bad.group()):04X} is not allowed",
            Location(path, line, col),
        )
    try:
        loader = _Loader(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        return _syntax_diagnostic(path, text, exc)
    except yaml.YAMLError as exc:
        return Diagnostic(codes.YAML_SYNTAX, f"invalid YAML: {' '.join(str(exc).split())}", Location(path, 1, 1))
    except RecursionError:
        return Diagnostic(
            codes.FILE_REFUSED, f"nesting deeper than the parser can follow (limit {MAX_DEPTH})", Location(path, 1, 1)
        )
    if root is None:
        return ParsedFile(path, None, None, LocationTable(path, None, None, {}, {}))
    converter = _NodeConverter(path)
    try:
        data = converter.convert(root, 0)
    except _Refused as refused:
        return refused.diagnostic
    locations = LocationTable(path, data, root, converter.mappings, converter.sequences)
    duplicates: tuple[DuplicateKey, ...] = ()
    if converter.duplicates:
        found = _paths_of(data, {id(mapping) for mapping, _, _ in converter.duplicates})
        duplicates = tuple(
            DuplicateKey(diagnostic, tuple((*at, key) for at in found[id(mapping)]))
            for mapping, key, diagnostic in converter.duplicates
        )
    return ParsedFile(path, data, root, locations, duplicates)


def _paths_of(data: Any, wanted: set[int]) -> dict[int, list[tuple[Any, ...]]]:
    """Every path at which each wanted container (by identity) is reached; only run when a key is duplicated, and
    bounded by the node budget, which counts aliases at their expanded size."""
    found: dict[int, list[tuple[Any, ...]]] = {number: [] for number in wanted}
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if id(value) in found:
            found[id(value)].append(path)
        if type(value) is dict:
            stack.extend((item, (*path, key)) for key, item in value.items())
        elif type(value) is list:
            stack.extend((item, (*path, index)) for index, item in enumerate(value))
    return found


def _syntax_diagnostic(path: str, text: str, exc: yaml.MarkedYAMLError) -> Diagnostic:
    mark = exc.problem_mark or exc.context_mark
    location = _mark_location(path, text, mark.line, mark.column) if mark else Location(path, 1, 1)
    problem = exc.problem or "invalid YAML"
    if "expected a single document" in (exc.context or "") or "but found another document" in problem:
        return Diagnostic(
            codes.UNSUPPORTED_YAML, "multiple YAML documents in one file; a manifest is one document", location
        )
    if mark and _char_at(text, mark.line, mark.column) == "\t":
        return Diagnostic(
            codes.YAML_SYNTAX,
            "YAML syntax error: tab character where YAML expects indentation; indent with spaces",
            location,
        )
    long_key = _long_key(text, mark.line) if mark and "mapping values are not allowed" in problem else None
    if long_key is not None:
        column, length = long_key
        return Diagnostic(
            codes.YAML_SYNTAX,
            f"YAML syntax error: a key of {length} characters; YAML allows at most {MAX_PLAIN_KEY_CHARS} in a key "
            "written without '? '",
            Location(path, location.line, column),
        )
    context = f" {exc.context}" if exc.context and exc.context not in problem else ""
    return Diagnostic(codes.YAML_SYNTAX, f"YAML syntax error: {problem}{context}", location)


def _long_key(text: str, line: int) -> tuple[int, int] | None:
    """(1-based column, length) of a key over YAML's limit for implicit keys on that line, if there is one."""
    lines = _LINE_BREAK.split(text)
    if line >= len(lines):
        return None
    content = lines[line]
    indent = len(content) - len(content.lstrip(" -"))
    key = content[indent:].partition(": ")[0].removesuffix(":")
    return (indent + 1, len(key)) if len(key) > MAX_PLAIN_KEY_CHARS else None


def _position(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of a character index, counting line breaks as YAML does."""
    breaks = list(_LINE_BREAK.finditer(text, 0, index))
    return len(breaks) + 1, index - (breaks[-1].end() if breaks else 0) + 1


def _mark_location(path: str, text: str, line: int, column: int) -> Location:
    """A parser mark as a location; one past the last line (libyaml's end of input when the file lacks a
    final line break) becomes the end of the last line."""
    lines = _LINE_BREAK.split(text)
    if line >= len(lines):
        return Location(path, len(lines), len(lines[-1]) + 1)
    return Location(path, line + 1, column + 1)


def _char_at(text: str, line: int, column: int) -> str:
    lines = text.split("\n", line + 1)
    return lines[line][column : column + 1] if line < len(lines) else ""


class _NodeConverter:
    """Walks composed nodes into plain data, rejecting what plain config must not contain."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.budget = MAX_NODES
        self.chars = MAX_EXPANDED_CHARS
        # Collections already converted, by node identity: an alias reuses the value and is
        # charged its expanded size (nodes and characters), so alias bombs are refused in linear time.
        self.done: dict[int, tuple[Any, int, int]] = {}
        # Each container's nodes, by the identity of the plain value it became: the file's LocationTable.
        self.mappings: dict[int, dict[Any, tuple[yaml.Node, yaml.Node]]] = {}
        self.sequences: dict[int, list[yaml.Node]] = {}
        # (the mapping, the key, its diagnostic) for each key written twice: reported, the first value kept.
        self.duplicates: list[tuple[dict[Any, Any], Any, Diagnostic]] = []

    def refuse(self, code: str, message: str, node: yaml.Node) -> _Refused:
        return _Refused(Diagnostic(code, message, node_location(self.path, node)))

    def convert(self, node: yaml.Node, depth: int) -> Any:
        # Plain strings are nearly every node: they take the first branch and nothing else.
        if node.tag == _STR and type(node) is yaml.ScalarNode:
            self.budget -= 1
            self.chars -= len(node.value)
            return node.value
        tag = node.tag
        if type(node) is yaml.ScalarNode:
            if tag in _PLAIN_SCALAR_TAGS:
                self.budget -= 1
                return self._scalar(node, tag)
        elif (tag == _MAP and type(node) is yaml.MappingNode) or (tag == _SEQ and type(node) is yaml.SequenceNode):
            return self._collection(node, depth)
        shown = "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag
        raise self.refuse(codes.UNSUPPORTED_YAML, f"unsupported YAML tag '{shown}'; manifests are plain YAML", node)

    def _scalar(self, node: yaml.ScalarNode, tag: str) -> Any:
        """An int, float, bool or null (or an explicitly tagged str); a diagnostic when the value does not fit."""
        shown = "!!" + tag.removeprefix("tag:yaml.org,2002:")
        if len(node.value) > MAX_NUMBER_CHARS:
            raise self.refuse(
                codes.FILE_REFUSED,
                f"{shown} scalar of {len(node.value)} characters, over the {MAX_NUMBER_CHARS}-character limit",
                node,
            )
        try:
            return _SCALAR_CONSTRUCTORS[tag](_constructor, node)
        except (ValueError, LookupError, ArithmeticError):  # '!!int abc', '!!bool maybe', an empty '!!int'
            raise self.refuse(codes.UNSUPPORTED_YAML, f"'{node.value}' is not a valid {shown} value", node) from None

    def _collection(self, node: yaml.Node, depth: int) -> Any:
        if depth >= MAX_DEPTH:
            raise self.refuse(codes.FILE_REFUSED, f"nested deeper than {MAX_DEPTH} levels", node)
        seen = self.done.get(id(node))
        if seen is not None:
            value, size, chars = seen
            self.budget -= size
            self.chars -= chars
        else:
            before, chars_before = self.budget, self.chars
            if type(node) is yaml.MappingNode:
                value = self._mapping(node, depth + 1)
            else:
                value = [self.convert(item, depth + 1) for item in node.value]
                self.sequences[id(value)] = node.value
            self.done[id(node)] = (value, before - self.budget + 1, chars_before - self.chars)
            self.budget -= 1
        if self.budget < 0:
            raise self.refuse(codes.FILE_REFUSED, f"more than {MAX_NODES} nodes after alias expansion", node)
        if self.chars < 0:
            raise self.refuse(
                codes.FILE_REFUSED, f"more than {MAX_EXPANDED_CHARS} characters of text after alias expansion", node
            )
        return value

    def _mapping(self, node: yaml.MappingNode, depth: int) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        entries: dict[Any, tuple[yaml.Node, yaml.Node]] = {}  # each key's (key node, value node)
        self.mappings[id(result)] = entries
        convert = self.convert
        for key_node, value_node in node.value:
            if key_node.tag == _STR and type(key_node) is yaml.ScalarNode:
                key = key_node.value
                self.budget -= 1
                self.chars -= len(key)
            elif key_node.tag == _MERGE:
                raise self.refuse(
                    codes.UNSUPPORTED_YAML, "merge keys ('<<') are not supported; write the fields out", key_node
                )
            else:
                key = convert(key_node, depth)
                if isinstance(key, (dict, list)):
                    raise self.refuse(codes.UNSUPPORTED_YAML, "mapping keys must be scalars", key_node)
            if key in result:  # a key repeated through an alias is the very same node: look it up, not for it
                first = entries[key][0].start_mark
                where = f"line {first.line + 1}, column {first.column + 1}"
                message = f"duplicate key '{key}' (first defined at {where})"
                self.duplicates.append(
                    (result, key, Diagnostic(codes.DUPLICATE_KEY, message, node_location(self.path, key_node)))
                )
                continue
            entries[key] = (key_node, value_node)
            result[key] = convert(value_node, depth)
        return result


def find_node(root: yaml.Node | None, loc: Sequence[Any], *, key: bool = False) -> yaml.Node | None:
    """The node at a path of mapping keys and list indices (the key node itself when `key`).

    Stops at the deepest node that exists, so a missing field points at its parent mapping.
    """
    node = root
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.value == str(part):
                    node = key_node if (last and key) else value_node
                    break
            else:
                return node
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
        else:
            return node
    return node


def find_key_node(mapping: yaml.Node | None, key: Any) -> yaml.Node | None:
    """The key node of a mapping whose plain value is `key` (None, a number, a bool), or None."""
    if not isinstance(mapping, yaml.MappingNode):
        return None
    for key_node, _ in mapping.value:
        tag = key_node.tag
        if type(key_node) is yaml.ScalarNode and tag != _STR and tag in _SCALAR_CONSTRUCTORS:
            try:
                value = _SCALAR_CONSTRUCTORS[tag](_constructor, key_node)
            except (ValueError, LookupError, ArithmeticError):
                continue
            if value == key and type(value) is type(key):
                return key_node
    return None
