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

    __slots__ = ("_data", "_mappings", "_path", "_root", "_sequences")

    def __init__(
        self,
        path: str,
        data: Any,
        root: _Node | None,
        mappings: Mapping[int, Mapping[Any, tuple[_Node, _Node]]],
        sequences: Mapping[int, Sequence[_Node]],
    ) -> None:
        self._path = path
        self._data = data
        self._root = root
        self._mappings = mappings
        self._sequences = sequences

    def key(self, path: Path) -> Location:
        """Where the key that ends `path` is written (a list item: where the item starts)."""
        return self._at(self._find(path, key=True))

    def value(self, path: Path) -> Location:
        """Where the value at `path` starts (`()`: the whole document)."""
        return self._at(self._find(path, key=False))

    def _find(self, path: Path, *, key: bool) -> _Node | None:
        data, node = self._data, self._root
        last = len(path) - 1
        for index, part in enumerate(path):
            if type(data) is dict:
                entries = self._mappings.get(id(data))
                entry = entries.get(part) if entries is not None else None
                if entry is None:
                    return node
                node = entry[0] if (key and index == last) else entry[1]
                data = data[part]
            elif type(data) is list and type(part) is int and 0 <= part < len(data):
                node = self._sequences[id(data)][part]
                data = data[part]
            else:
                return node
        return node

    def _at(self, node: _Node | None) -> Location:
        if node is None:
            return Location(self._path, 1, 1)
        mark = node.start_mark
        return Location(self._path, mark.line + 1, mark.column + 1)
