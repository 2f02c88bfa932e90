"""The typed model as plain values that `marshal` writes and reads fast (as Python's .pyc files are), derived
from the dataclasses' fields: a field added to the model needs no edit here.

A dataclass becomes a list `[class number, field values...]` in field order, an enum `[ENUM, number, value]`,
a mapping a dict, a tuple a tuple. A Location names its file by its number in the cache entry's file list, so
positions survive a change of working directory: they are shown relative to wherever the loader runs. An
object met twice is encoded once, and equal tuples and strings are stored once; marshal keeps that sharing,
so decoding builds each shared object (a capability set used by many backends) once too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from types import MappingProxyType
from typing import Any

from ..errors import Diagnostic, Location, Severity
from ..model import (
    BackendInfo,
    Backward,
    BrokenOps,
    Capability,
    CatalogSettings,
    Dispatch,
    Environment,
    Importable,
    KernelSpec,
    KeyDim,
    LayerClass,
    LayerCondition,
    LayerMapping,
    LayerPolicy,
    LinkedCatalog,
    ModuleFingerprint,
    OpInfo,
    Parameters,
    Policy,
    Promise,
    Promised,
    Required,
    SourceDigests,
    StalePolicy,
    Target,
    TargetChecks,
    TargetRole,
    TunedBucket,
    TunedOp,
)

# The types an entry may hold. Their order numbers them: it may change freely, since an entry is only read
# back by the same kcatalog code that wrote it (the cache key fingerprints kcatalog's modules).
MODEL_TYPES: tuple[type, ...] = (
    Diagnostic,
    Capability,
    KernelSpec,
    OpInfo,
    BackendInfo,
    Policy,
    LayerPolicy,
    CatalogSettings,
    LinkedCatalog,
    ModuleFingerprint,
    TargetChecks,
    LayerCondition,
    LayerClass,
    LayerMapping,
    TunedBucket,
    TunedOp,
    Target,
    Importable,
    Parameters,
    Dispatch,
    BrokenOps,
    Promised,
    Required,
    Environment,
    SourceDigests,
    KeyDim,
    Backward,
)
ENUM_TYPES: tuple[type[Enum], ...] = (Severity, TargetRole, StalePolicy, Promise)
_LOCATION = -1
_ENUM = -2
_PLAIN = (str, int, float, bool, type(None))


class Codec:
    """Encodes model values for one cache entry and decodes them back; `files` are the entry's shown paths."""

    def __init__(self, files: Sequence[str], types: Sequence[type] = MODEL_TYPES) -> None:
        self.files = files
        self.types = tuple(types)
        self._numbers = {cls: number for number, cls in enumerate(self.types)}
        self._fields = [tuple(f.name for f in dataclasses.fields(cls) if f.init) for cls in self.types]
        self._builders = [_builder(cls, names) for cls, names in zip(self.types, self._fields)]

    def encode(self, value: Any) -> Any:
        """`value` as plain, marshal-able values."""
        file_numbers = {path: number for number, path in enumerate(self.files)}
        seen: dict[int, tuple[Any, Any]] = {}  # id -> (the object, kept alive so its id stays unique; its code)
        same: dict[Any, Any] = {}

        def encode(value: Any) -> Any:
            kind = type(value)
            if kind in _PLAIN:
                return same.setdefault(value, value) if kind is str else value
            hit = seen.get(id(value))
            if hit is not None:
                return hit[1]
            out: Any
            if kind is Location:
                out = [_LOCATION, file_numbers[value.path], value.line, value.col]
            elif kind in self._numbers:
                number = self._numbers[kind]
                out = [number, *(encode(getattr(value, name)) for name in self._fields[number])]
            elif isinstance(value, Enum):
                out = [_ENUM, ENUM_TYPES.index(type(value)), value.value]
            elif isinstance(value, tuple):
                out = tuple(encode(item) for item in value)
                if all(type(item) in _PLAIN for item in out):  # hashable for certain: store equal ones once
                    # by value and type: (1,) == (True,) == (1.0,), but a default of True is no default of 1
                    out = same.setdefault((tuple(map(type, out)), out), out)
            elif isinstance(value, Mapping):
                out = {encode(key): encode(item) for key, item in value.items()}
            else:
                raise TypeError(f"the load cache cannot store a {kind.__name__}")
            seen[id(value)] = (value, out)
            return out

        return encode(value)

    def decode(self, data: Any) -> Any:
        """The value `encode` turned into `data`; mappings come back read-only."""
        files, builders, plain = self.files, self._builders, _PLAIN
        done: dict[int, Any] = {}

        def decode(data: Any) -> Any:
            kind = type(data)
            if kind in plain:
                return data
            hit = done.get(id(data))
            if hit is not None:
                return hit
            out: Any
            if kind is list:
                tag = data[0]
                if tag == _LOCATION:
                    out = Location(files[data[1]], data[2], data[3])
                elif tag == _ENUM:
                    out = ENUM_TYPES[data[1]](data[2])
                else:
                    out = builders[tag]([item if type(item) in plain else decode(item) for item in data[1:]])
            elif kind is tuple:
                out = tuple([item if type(item) in plain else decode(item) for item in data])
            elif kind is dict:
                out = MappingProxyType(
                    {key: item if type(item) in plain else decode(item) for key, item in data.items()}
                )
            else:
                raise TypeError(f"unexpected {kind.__name__} in a cache entry")
            done[id(data)] = out
            return out

        return decode(data)


def _builder(cls: type, names: tuple[str, ...]) -> Callable[[list[Any]], Any]:
    """Rebuild an instance of a frozen dataclass from its init fields' values as `encode` wrote them, without
    calling its __init__ (a frozen one sets each field through object.__setattr__: most of a warm load's time);
    fields it does not take (init=False) get their default factory's value, as __init__ would give them. Its
    __post_init__, if any, ran when the value was first made: what was stored is its result."""
    factories: list[tuple[str, Callable[[], Any]]] = []
    for f in dataclasses.fields(cls):
        if f.init:
            continue
        if f.default_factory is dataclasses.MISSING:
            raise TypeError(f"the load cache cannot rebuild {cls.__name__}.{f.name}: no default factory")
        factories.append((f.name, f.default_factory))
    new = object.__new__

    def build(values: list[Any]) -> Any:
        if len(values) != len(names):  # an entry of another layout: a miss, as calling __init__ would make it
            raise TypeError(f"{cls.__name__} takes {len(names)} fields; the entry holds {len(values)}")
        obj: Any = new(cls)
        state = obj.__dict__
        state.update(zip(names, values))
        for name, factory in factories:
            state[name] = factory()
        return obj

    return build
