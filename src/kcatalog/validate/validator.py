"""Catalog texts to validated models plus diagnostics: YAML parsing and schema validation."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Union

import pydantic

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import Diagnostic, did_you_mean, nearest
from ..model import BrokenOps
from ..platform import DEVICES
from ..read.files import CatalogFile, SourceFile
from ..read.location_table import LocationTable
from ..read.yaml_nodes import ParsedFile, find_key_node, find_node, node_location, parse_yaml
from .mappings_schema import LAYERS_KEY, LayersFile
from .salvage import LeftOut, salvage
from .schema import (
    BACKEND_PATTERN,
    FORMAT_VERSION,
    NAME_PATTERN,
    OP_ID_PATTERN,
    PLATFORM_PATTERN,
    SIGNATURE_PATTERN,
    Manifest,
    Settings,
)
from .tables import Plan, TunedTable

# A file that is neither the settings file nor a manifest says so by its top-level key.
_KINDS: dict[str, type[TunedTable] | type[Plan] | type[LayersFile]] = {
    "tuned": TunedTable,
    "plan": Plan,
    LAYERS_KEY: LayersFile,  # layer mappings, for kernelize
}


@dataclass(frozen=True)
class ValidatedFile:
    """A catalog file that passed the schema, perhaps with parts left out for their errors: its model (of what is
    left), its node tree for positions, and the parts left out."""

    parsed: ParsedFile
    model: Manifest | Settings | LayersFile | TunedTable | Plan
    layer: int = 0  # its layer's number (read/layer_sources.py)
    left_out: tuple[LeftOut, ...] = ()

    @property
    def path(self) -> str:
        return self.parsed.path

    @property
    def locations(self) -> LocationTable:
        """Where each key and value of the file is written: what the link stages locate their diagnostics by."""
        return self.parsed.locations


@dataclass(frozen=True)
class ValidatedFiles:
    """The files that passed the schema (some with parts left out), and the ops declared in what was left out or
    lost, which the link stages treat as declared but broken."""

    files: list[ValidatedFile]
    broken: BrokenOps


def validate_sources(
    sources: Iterable[SourceFile], diagnostics: Diagnostics, *, unread: Iterable[CatalogFile] = ()
) -> ValidatedFiles:
    """The files that parse and pass the schema, each without its parts that fail it; what is wrong goes to
    `diagnostics`, so that one bad op never hides the rest of its file, nor one bad file the rest. `unread`: the
    catalog files that could not be read (reported by read/files.py), which may have declared any op."""
    validated = []
    broken = _Broken()
    broken.any_op = any(not file.is_settings for file in unread)
    for source in sources:
        parsed = parse_yaml(source.shown, source.text)
        if isinstance(parsed, Diagnostic):
            diagnostics.add(parsed)
            broken.lost(source, None)
            continue
        file = validate(parsed, is_settings=source.is_settings, diagnostics=diagnostics, layer=source.layer)
        if file is None:
            broken.lost(source, parsed)
        else:
            validated.append(file)
            broken.left_out(file)
    return ValidatedFiles(validated, broken.freeze())


def validate(
    parsed: ParsedFile, *, is_settings: bool, diagnostics: Diagnostics, layer: int = 0
) -> ValidatedFile | None:
    """One parsed file checked against its model, every schema error (and duplicate key) added to `diagnostics` at
    its position; the parts that hold them are left out (salvage.py), and None is returned when that loses the
    whole file."""
    diagnostics.extend(duplicate.diagnostic for duplicate in parsed.duplicates)
    data = parsed.data
    model_cls: type[Manifest] | type[Settings] | type[LayersFile] | type[TunedTable] | type[Plan] = (
        Settings if is_settings else Manifest
    )
    if not is_settings and isinstance(data, dict):
        model_cls = next((_KINDS[key] for key in _KINDS if key in data), Manifest)
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        what = "settings file" if is_settings else "manifest"
        diagnostics.error(
            codes.INVALID_VALUE,
            f"file is {kind}; a {what} is a mapping starting with 'kcatalog: {FORMAT_VERSION}'",
            node_location(parsed.path, parsed.root),
        )
        return None
    version = data.get("kcatalog")
    if version is not None and (type(version) is not int or version != FORMAT_VERSION):
        where = node_location(parsed.path, find_node(parsed.root, ["kcatalog"]))
        if type(version) is not int:  # also refuses `true` and `1.0`, which Python compares equal to 1
            diagnostics.error(
                codes.INVALID_VALUE,
                f"'kcatalog': format version should be the number {FORMAT_VERSION}, got {_describe_input(version)}",
                where,
            )
        elif version > FORMAT_VERSION:
            diagnostics.error(
                codes.UNSUPPORTED_VERSION,
                f"format version {version} is newer than this kcatalog reads "
                f"({FORMAT_VERSION}); upgrade kcatalog to load it",
                where,
            )
        else:
            diagnostics.error(
                codes.UNSUPPORTED_VERSION,
                f"format version {version} is not supported; this kcatalog reads version {FORMAT_VERSION}",
                where,
            )
        return None
    errors: list[Any] = []
    try:
        model = model_cls.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = [{**error, "loc": _in_data(data, error["loc"])} for error in exc.errors(include_url=False)]
        for error in errors:
            diagnostics.add(_schema_diagnostic(parsed, model_cls, error))
    else:
        if not parsed.duplicates:
            return ValidatedFile(parsed, model, layer)
    paths = [tuple(error["loc"]) for error in errors] + [path for dup in parsed.duplicates for path in dup.paths]
    salvaged = salvage(model_cls, data, paths)
    if salvaged is None:
        return None
    try:
        model = model_cls.model_validate(salvaged.data)
    except pydantic.ValidationError:  # what is left fails too (a collection left empty, say): the file is lost
        return None
    return ValidatedFile(parsed, model, layer, salvaged.left_out)


def _in_data(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """An error's `loc` as a path in the file: less the labels pydantic gives a union's members, which it puts
    where the data is a list or a scalar (where only an index, or nothing, could follow)."""
    path = []
    node = data
    for part in loc:
        if isinstance(part, str) and not isinstance(node, dict) and part != "[key]":
            continue  # a label: no key of a list or a scalar
        path.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(path)


# A manifest lost to a YAML error still names its group on a line of its own, almost always.
_GROUP_LINE = re.compile(r"^group:[ \t]*(['\"]?)([a-z][a-z0-9_]*)\1[ \t]*(?:#.*)?$", re.MULTILINE)
_OTHER_KIND_LINE = re.compile(rf"^(?:{'|'.join(map(re.escape, _KINDS))})[ \t]*:", re.MULTILINE)


class _Broken:
    """Gathers the ops that files declare but that could not be read (model.BrokenOps)."""

    def __init__(self) -> None:
        self.ops: dict[str, None] = {}
        self.groups: dict[str, None] = {}
        self.any_op = False

    def lost(self, source: SourceFile, parsed: ParsedFile | None) -> None:
        """A file lost whole: a manifest's ops are all broken; those of its group, when the group can be read (from
        its data, or from its `group:` line when it does not parse), else any op."""
        if source.is_settings:
            return
        if parsed is not None:
            data = parsed.data
            if data is None or (isinstance(data, dict) and any(key in data for key in _KINDS)):
                return  # empty, or not a manifest: declares no op
            group = data.get("group") if isinstance(data, dict) else None
            if isinstance(group, str) and re.fullmatch(NAME_PATTERN, group):
                self.groups[group] = None
                return
        else:
            if _OTHER_KIND_LINE.search(source.text):
                return
            line = _GROUP_LINE.search(source.text)
            if line is not None:
                self.groups[line[2]] = None
                return
        self.any_op = True

    def left_out(self, file: ValidatedFile) -> None:
        """The ops of a manifest's left-out parts: an op itself, the op an extension extends, or every op of the
        group when its `ops` (every op an `extends` names, when `extends`) is left out whole."""
        manifest = file.model
        if not isinstance(manifest, Manifest):
            return
        for part in file.left_out:
            key = part.path[0]
            if part.path == ("ops",):
                self.groups[manifest.group] = None
            elif key == "ops":
                self.ops[f"{manifest.group}.{part.path[1]}"] = None
            elif key == "extends" and len(part.path) == 2:
                self.ops[str(part.path[1])] = None
            elif key == "extends":
                extended = file.parsed.data.get("extends")
                if isinstance(extended, dict):
                    self.ops.update(dict.fromkeys(map(str, extended)))
                else:
                    self.any_op = True

    def freeze(self) -> BrokenOps:
        return BrokenOps(tuple(self.ops), tuple(self.groups), self.any_op)


_PATTERN_MEANING = {
    NAME_PATTERN: "should be a lower_snake_case name",
    BACKEND_PATTERN: "should be a backend name (letters, digits and '_', not starting with a digit)",
    OP_ID_PATTERN: "should be an op id '<group>.<name>'",
    SIGNATURE_PATTERN: "should be a Python signature such as '(x: Tensor, eps: float = 1e-6) -> Tensor'",
    PLATFORM_PATTERN: "should be a platform 'device' or 'device:arch' such as 'cpu' or 'cuda:9.0'",
}
_DEVICE_FIELDS = frozenset({"device", "devices", "platform_priority"})  # their values, or keys, are device kinds


def _device_hint(pattern: str, value: object, owner: object) -> str:
    """A did-you-mean for a device kind, or a platform's, that breaks its pattern by case or a typo ('CUDA').
    Against the built-in kinds: the settings that may declare more are not read yet."""
    if not isinstance(value, str):
        return ""
    if pattern == PLATFORM_PATTERN:
        device, colon, arch = value.partition(":")
        found = nearest(device, DEVICES)
        return f" (did you mean '{found}{colon}{arch}'?)" if found is not None else ""
    return did_you_mean(value, DEVICES) if pattern == NAME_PATTERN and owner in _DEVICE_FIELDS else ""


def _last_name(loc: list[Any]) -> object:
    """The last field name in `loc`: 'device' for ('backends', 'x', 'capabilities', 0, 'device')."""
    return next((part for part in reversed(loc) if isinstance(part, str)), None)


def _schema_diagnostic(parsed: ParsedFile, model_cls: type, error: Any) -> Diagnostic:
    loc = list(error["loc"])
    kind = error["type"]
    if loc and loc[-1] == "[key]":  # an invalid mapping key: point at the key itself
        loc.pop()
        node = find_node(parsed.root, loc, key=True)
        field = f"key '{loc[-1]}'"
    elif kind == "invalid_key":  # a key that is not text (`~: a`, `1: a`): its loc is the key's str()
        node = find_key_node(find_node(parsed.root, loc[:-1]), error.get("input"))
        return Diagnostic(
            codes.INVALID_VALUE,
            f"key '{node.value if node is not None else loc[-1]}': keys should be text, "
            f"got {_describe_input(error.get('input'))}",
            node_location(parsed.path, node),
        )
    else:
        node = find_node(parsed.root, loc, key=kind == "extra_forbidden")
        field = _field_label(loc)
    where = node_location(parsed.path, node)
    if kind == "extra_forbidden":
        allowed = _fields_at(model_cls, loc[:-1])
        return Diagnostic(codes.UNKNOWN_FIELD, f"unknown field '{loc[-1]}'{did_you_mean(str(loc[-1]), allowed)}", where)
    if kind == "missing":
        return Diagnostic(codes.MISSING_FIELD, f"missing required field '{loc[-1]}'", where)
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "literal_error" and isinstance(value, str):
        expected = [part.strip(" '") for part in ctx["expected"].replace(" or ", ",").split(",")]
        message = f"unknown value '{value}'{did_you_mean(value, expected)}; expected one of {', '.join(expected)}"
    elif kind == "too_short":
        wanted = ctx["min_length"]
        message = f"should have at least {wanted} item{'s' * (wanted != 1)}, got {ctx['actual_length']}"
    elif kind == "string_pattern_mismatch" and ctx.get("pattern") in _PATTERN_MEANING:
        hint = _device_hint(ctx["pattern"], value, loc[-2] if field.startswith("key ") else _last_name(loc))
        message = f"{_PATTERN_MEANING[ctx['pattern']]}, got {_describe_input(value)}{hint}"
    else:
        message = error["msg"].removeprefix("Value error, ").replace("valid tuple", "list")
        message = re.sub(r"a valid dictionary(?: or instance of \w+)?", "a mapping", message)
        message = message[:1].lower() + message[1:]
        if kind.endswith("_type") or kind == "string_pattern_mismatch":
            message += f", got {_describe_input(value)}"
    return Diagnostic(codes.INVALID_VALUE, f"{field}: {message}", where)


def _field_label(loc: list[Any]) -> str:
    """'dtypes'[1] for an item of a list field; 'name' for a field; 'file' for the whole document."""
    names = [part for part in loc if isinstance(part, str)]
    if not names:
        return "file"
    last = len(loc) - 1 - loc[::-1].index(names[-1])
    return f"'{names[-1]}'" + "".join(f"[{index}]" for index in loc[last + 1 :])


def _describe_input(value: object) -> str:
    if isinstance(value, (dict, list)):
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _fields_at(model_cls: type, loc: list[Any]) -> list[str]:
    """The field names of the model found by following `loc` through the type annotations."""
    tp: Any = model_cls
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
            field = tp.model_fields.get(part)
            if field is None:
                return []
            tp = field.annotation
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        elif typing.get_origin(tp) in (tuple, list):
            tp = typing.get_args(tp)[0]
    tp = _unwrap(tp)
    return list(tp.model_fields) if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel) else []


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin is Union or type(tp).__name__ == "UnionType":
            tp = next(arg for arg in typing.get_args(tp) if arg is not type(None))
        else:
            return tp
