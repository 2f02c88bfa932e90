"""Where each part of a parsed file is written: paths of mapping keys and list indices to locations.

The YAML reader (yaml_nodes.py) fills the table in the one walk that turns nodes into plain data: each mapping's
(key node, value node) by key, each list's item nodes, both by the identity of the plain container they became.
A lookup follows the path through the plain data, one dict hop per part; nothing walks the node tree again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..errors import Location

Path = Sequence[Any]  # mapping keys and list indices, from the top of the file: ("ops", "rms_norm", "dtypes", 1)


class _Mark(Protocol):
    line: int
    column: int


class _Node(Protocol):
    start_mark: _Mark


class LocationTable:
    """A parsed file's positions by path: `key(path)` is where the last key of `path` is written, `value(path)`
    where what it holds starts. A path that goes further than the file stops at the deepest part written, so a
    field left out points at the mapping it would be in."""

    __slots__ = ("_found", "_mappings", "_path", "_sequences")

    def __init__(
        self,
        path: str,
        data: Any,
        root: _Node | None,
        mappings: Mapping[int, Mapping[Any, tuple[_Node, _Node]]],
        sequences: Mapping[int, Sequence[_Node]],
    ) -> None:
        self._path = path
        self._mappings = mappings
        self._sequences = sequences
        # Each path asked about (and its prefixes) -> (key node, value node, plain value, whether all of it is
        # written): the link stages ask about many paths below one op, so each prefix is followed once.
        self._found: dict[tuple[Any, ...], tuple[_Node | None, _Node | None, Any, bool]] = {
            (): (root, root, data, True)
        }

    def key(self, path: Path) -> Location:
        """Where the key that ends `path` is written (a list item: where the item starts)."""
        return self._at(self._entry(path if type(path) is tuple else tuple(path))[0])

    def value(self, path: Path) -> Location:
        """Where the value at `path` starts (`()`: the whole document)."""
        return self._at(self._entry(path if type(path) is tuple else tuple(path))[1])

    def _entry(self, path: tuple[Any, ...]) -> tuple[_Node | None, _Node | None, Any, bool]:
        found = self._found.get(path)
        if found is not None:
            return found
        _, node, data, complete = self._entry(path[:-1])
        part = path[-1]
        found = (node, node, None, False)  # stops at the deepest part written
        if complete:
            if type(data) is dict:
                entries = self._mappings.get(id(data))
                entry = entries.get(part) if entries is not None else None
                if entry is not None:
                    found = (entry[0], entry[1], data[part], True)
            elif type(data) is list and type(part) is int and 0 <= part < len(data):
                item = self._sequences[id(data)][part]
                found = (item, item, data[part], True)
        self._found[path] = found
        return found

    def _at(self, node: _Node | None) -> Location:
        if node is None:
            return Location(self._path, 1, 1)
        mark = node.start_mark
        return Location(self._path, mark.line + 1, mark.column + 1)
