"""Module indexes as bytes, for a caller that keeps them between checks (the cache directory's record): so that
an unchanged source is neither parsed again nor, without bytecode, syntax-checked whole again.

Content-addressed: an index's key is a digest of everything it is computed from: the source's exact bytes, the
module's name and whether it is a package, this Python's version (branches on `sys.version_info`, what the
parser accepts) and pyresolve's own code. An index is only ever recorded for a source whose syntax was checked
(or whose bytecode vouches for it, skeleton.py), so a key found stands for "compiles, and binds this". Values
are `marshal` data of plain tuples (reading one runs no code); one that does not decode is a miss.
"""

from __future__ import annotations

import dataclasses
import marshal
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from .bindings import Binding, ClassIndex, ModuleIndex, Star
from .fingerprints import digest

FORMAT = 1


class IndexStore(Protocol):
    """Where the caller keeps indexes between checks: bytes by key (a hex digest)."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...


_CODE: list[str] = []  # pyresolve's code digest, computed once per process


def index_key(name: str, is_package: bool, source_digest: str) -> str:
    """The key of the index of this source, as this module of this Python with this pyresolve indexes it."""
    if not _CODE:
        _CODE.append(_code_digest())
    return digest(repr((FORMAT, _CODE[0], sys.version, name, is_package, source_digest)).encode())[:32]


def _code_digest() -> str:
    """pyresolve's own sources: an edit of the rules (or of this codec) makes every key new."""
    directory = Path(__file__).parent
    parts = []
    for path in sorted(directory.glob("*.py")):
        parts.append(path.name.encode())
        parts.append(path.read_bytes())
    return digest(b"\0".join(parts))


# -- the codec: each dataclass as the tuple of its fields, in order; mappings as dicts --------------------------

_BINDING_FIELDS = tuple(field.name for field in dataclasses.fields(Binding))
_CLASS_FIELDS = tuple(field.name for field in dataclasses.fields(ClassIndex))
_MODULE_FIELDS = tuple(field.name for field in dataclasses.fields(ModuleIndex))
_STAR_FIELDS = tuple(field.name for field in dataclasses.fields(Star))
_BINDINGS = frozenset({"names", "members"})  # the fields mapping names to their bindings


def encode(index: ModuleIndex) -> bytes:
    """The index as marshal data."""
    return marshal.dumps((FORMAT, _fields(index, _MODULE_FIELDS)))


def _fields(value: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    out = []
    for name in names:
        item = getattr(value, name)
        if name in _BINDINGS:
            item = {key: tuple(_binding(b) for b in bindings) for key, bindings in item.items()}
        elif name == "stars":
            item = tuple(_fields(star, _STAR_FIELDS) for star in item)
        elif type(item) is MappingProxyType:
            item = dict(item)
        out.append(item)
    return tuple(out)


def _binding(binding: Binding) -> tuple[Any, ...]:
    return tuple(
        _fields(binding.cls, _CLASS_FIELDS) if name == "cls" and binding.cls is not None else getattr(binding, name)
        for name in _BINDING_FIELDS
    )


def decode(data: bytes) -> ModuleIndex | None:
    """The index marshal data holds; None where it is not one (damaged, or of another format)."""
    try:
        found = marshal.loads(data)
        if not (type(found) is tuple and len(found) == 2 and found[0] == FORMAT):
            return None
        return _Decoder().module(found[1])
    except Exception:  # whatever the bytes are, a record that does not decode is a miss
        return None


_CLASS_AT = _BINDING_FIELDS.index("cls")


class _Decoder:
    """Rebuilds the dataclasses; identical bindings (most are a bare def or value) become one object."""

    def __init__(self) -> None:
        self._known: dict[tuple[Any, ...], Binding] = {}

    def module(self, values: tuple[Any, ...]) -> ModuleIndex:
        return ModuleIndex(*self._values(values, _MODULE_FIELDS))

    def _values(self, values: tuple[Any, ...], names: tuple[str, ...]) -> list[Any]:
        if len(values) != len(names):
            raise ValueError("fields differ")
        out = []
        for name, item in zip(names, values):
            if name in _BINDINGS:
                item = MappingProxyType({key: tuple(map(self._binding, bindings)) for key, bindings in item.items()})
            elif name == "stars":
                item = tuple(Star(*star) for star in item)
            elif type(item) is dict:
                item = MappingProxyType(item)
            out.append(item)
        return out

    def _binding(self, values: tuple[Any, ...]) -> Binding:
        cls = values[_CLASS_AT]
        if cls is None:
            known = self._known.get(values)
            if known is None:
                known = self._known[values] = Binding(*values)
            return known
        fields = list(values)
        fields[_CLASS_AT] = ClassIndex(*self._values(cls, _CLASS_FIELDS))
        return Binding(*fields)
