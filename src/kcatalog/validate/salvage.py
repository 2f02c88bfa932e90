"""What a file with schema errors still yields: each op, extension, layer mapping or tuned op that has an error is
left out, and the rest of the file is validated and linked as if they were not there.

The part an error leaves out is the smallest one whose absence is not itself an error: an op (not a backend,
whose absence would make the op's priority, reference and policy checks report what is not wrong), or a
top-level key the model may do without. An error in what the whole file depends on (its format version, its
group, a tuned table's platform) loses the file, as does any error in a settings file or a plan.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic

from .mappings_schema import LAYERS_KEY, LayersFile
from .schema import BackendDecl, Manifest
from .tables import TunedTable

Path = tuple[Any, ...]  # mapping keys and list indices from the top of the file, as in pydantic's error `loc`

# Per file kind, the collections whose entries an error leaves out one by one.
_ENTRIES: dict[type, tuple[Path, ...]] = {
    Manifest: (("ops",), ("extends",)),
    LayersFile: ((LAYERS_KEY,),),
    TunedTable: (("tuned", "ops"),),
}
_BACKEND_KEYS = ("backends", "replaces")  # where an op or an extension lists its backends


@dataclass(frozen=True)
class LeftOut:
    """A part of a file left out for its errors (`path`: ("ops", name), ("extends", op_id), ...), and, for an op or
    an extension, those of its backends that pass the schema by themselves (by key: 'backends', 'replaces'), so
    that their own checks (known backend names, device kinds, targets) still run."""

    path: Path
    backends: Mapping[str, Mapping[str, BackendDecl]] = field(default_factory=dict)


@dataclass(frozen=True)
class Salvaged:
    """The file's data without the parts that have errors, and those parts."""

    data: dict[Any, Any]
    left_out: tuple[LeftOut, ...]


def salvage(model_cls: type[pydantic.BaseModel], data: dict[Any, Any], errors: Sequence[Path]) -> Salvaged | None:
    """The data without every part that holds one of the `errors`; None when one of them loses the whole file."""
    entries = _ENTRIES.get(model_cls)
    if entries is None:
        return None
    parts: dict[Path, None] = {}  # in the order found, each once
    for loc in errors:
        part = _part_of(model_cls, entries, loc)
        if part is None:
            return None
        parts[part] = None
    left_out = tuple(LeftOut(part, _sound_backends(data, part, errors)) for part in parts)
    pruned = _without(data, list(parts))
    return None if pruned is None else Salvaged(pruned, left_out)


def _part_of(model_cls: type[pydantic.BaseModel], entries: Sequence[Path], loc: Path) -> Path | None:
    """The part an error at `loc` leaves out: an entry of one of `entries`, or a top-level key the model does not
    require; None: the whole file."""
    for collection in entries:
        size = len(collection)
        if loc[:size] == collection and len(loc) > size:
            return loc[: size + 1]
    if not loc:
        return None
    declared = model_cls.model_fields.get(loc[0])
    return (loc[0],) if declared is None or not declared.is_required() else None


def _sound_backends(data: Any, part: Path, errors: Sequence[Path]) -> dict[str, dict[str, BackendDecl]]:
    """The backends of the op or extension at `part` that hold no error and pass the schema on their own."""
    if len(part) != 2 or part[0] not in ("ops", "extends"):
        return {}
    entry = _at(data, part)
    found: dict[str, dict[str, BackendDecl]] = {}
    for key in _BACKEND_KEYS:
        given = entry.get(key) if isinstance(entry, dict) else None
        if not isinstance(given, dict):
            continue
        sound = {}
        for name, raw in given.items():
            path = (*part, key, name)
            if not isinstance(name, str) or any(loc[: len(path)] == path for loc in errors):
                continue
            try:
                sound[name] = BackendDecl.model_validate(raw)
            except pydantic.ValidationError:
                continue  # a name pydantic reported under another path: left out with its op
        if sound:
            found[key] = sound
    return found


def _at(data: Any, path: Path) -> Any:
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _without(data: dict[Any, Any], parts: Collection[Path]) -> dict[Any, Any] | None:
    """A copy of `data` without the keys at `parts` (copying only the mappings on their way); None when a part is
    not a key of a mapping (an error pydantic located otherwise: the file is then lost)."""
    tree: dict[Any, Any] = {}  # the parts as a tree of keys: None marks a key to leave out
    for part in parts:
        node = tree
        for key in part[:-1]:
            child = node.setdefault(key, {})
            if child is None:  # a shorter part leaves this one out already
                break
            node = child
        else:
            node[part[-1]] = None
    return _prune(data, tree)


def _prune(data: Any, tree: dict[Any, Any]) -> dict[Any, Any] | None:
    if not isinstance(data, dict) or any(key not in data for key in tree):
        return None
    out = {}
    for key, value in data.items():
        if key not in tree:
            out[key] = value
        elif tree[key] is not None:
            pruned = _prune(value, tree[key])
            if pruned is None:
                return None
            out[key] = pruned
    return out
