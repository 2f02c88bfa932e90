"""A Python kernel registry read into plain data: from the live object (`all_specs()`), or from its JSON dump.

The data stays as the registry has it (enums as their values, tuples as lists, unknown attributes kept), so
that a registry whose import needs a GPU machine can be dumped there and converted anywhere, and everything
the conversion cannot express is still there to be reported. Read with it, at the registry's own import: every
name its backend enum declares, and the orders its specs' classes rank their backends by (class_priority.py).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .class_priority import ClassOrder, class_orders, enum_members

DUMP_FORMAT = 1  # the "kcatalog_registry_dump" version of the JSON below
MAX_DEPTH = 64  # levels of arrays and objects a dump may nest, as catalog files may (a registry's specs nest ~4)

# Attributes of a spec the conversion reads; any other public attribute is reported as not imported.
SPEC_FIELDS = ("op", "backend", "target", "capabilities", "priority", "auto")


class RegistryError(ValueError):
    """The registry cannot be read: not importable, no `all_specs()`, or a dump that is not one."""


@dataclass(frozen=True)
class RegistryDump:
    """A registry as plain JSON values: its specs (each a mapping of the attributes found), the registry's
    own `priority` attribute (a default order, or op -> order, or op -> {device: order}), if it has one, every
    backend name its backend type declares (an enum's members, also those no spec uses), and the orders its
    specs' classes rank their backends by (op -> ClassOrder; see class_priority.py)."""

    source: str
    specs: tuple[dict[str, Any], ...]
    priority: Any = None
    backends: tuple[str, ...] = ()
    class_priority: Mapping[str, ClassOrder] = field(default_factory=dict)

    def to_json(self) -> str:
        """The dump as `kcatalog dump-registry` writes it and `import-registry --from-json` reads it."""
        document = {
            "kcatalog_registry_dump": DUMP_FORMAT,
            "source": self.source,
            "priority": self.priority,
            "backends": list(self.backends),
            "class_priority": {
                op: {"order": list(order.order), "from": order.source} for op, order in self.class_priority.items()
            },
            "specs": list(self.specs),
        }
        return json.dumps(document, indent=1) + "\n"


def read_registry(reference: str) -> RegistryDump:
    """Import 'package.module:object' (the object path may be dotted) and read its specs."""
    module_name, sep, attr_path = reference.partition(":")
    if not sep or not module_name or not attr_path:
        raise RegistryError(f"registry {reference!r} is not 'package.module:object'")
    try:
        obj: Any = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            obj = getattr(obj, attr)
    except Exception as exc:  # the registry's own import code may raise anything
        raise RegistryError(f"cannot import registry {reference!r}: {type(exc).__name__}: {exc}") from exc
    return dump_registry(obj, reference)


def dump_registry(registry: Any, source: str) -> RegistryDump:
    """Read any object with `all_specs()` whose items have `op`, `backend`, `target` and `capabilities`."""
    all_specs = getattr(registry, "all_specs", None)
    if not callable(all_specs):
        raise RegistryError(f"registry {source!r} ({type(registry).__name__}) has no all_specs() method")
    try:
        found = list(all_specs())
    except Exception as exc:
        raise RegistryError(f"{source}.all_specs() raised {type(exc).__name__}: {exc}") from exc
    try:
        items = [_attributes(item) for item in found]
        specs = tuple(map(_spec, items))
        members = enum_members(item.get("backend") for item in items)
        backends = tuple(
            dict.fromkeys([*members.values(), *(s["backend"] for s in specs if isinstance(s.get("backend"), str))])
        )
        targets = [
            (s["op"], s["target"]) for s in specs if isinstance(s.get("op"), str) and isinstance(s.get("target"), str)
        ]
        orders = class_orders(targets, members, backends)
        return RegistryDump(source, specs, plain(getattr(registry, "priority", None)), backends, orders)
    except RegistryError as exc:
        raise RegistryError(f"registry {source!r}: {exc}") from None
    except Exception as exc:  # the registry's own objects: a property or __repr__ may raise anything
        raise RegistryError(f"registry {source!r} cannot be read: {type(exc).__name__}: {exc}") from exc


def read_json(path: Path) -> RegistryDump:
    """A dump written by `kcatalog dump-registry`; RegistryError saying what is wrong with it otherwise."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RegistryError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    except RecursionError:  # the decoder recurses per array or object
        raise RegistryError(f"{path}: not a registry dump: nested deeper than the JSON parser can follow") from None
    except ValueError as exc:  # an integer longer than int() converts (sys.get_int_max_str_digits())
        raise RegistryError(f"{path}: not a registry dump: {str(exc).partition('; use sys.')[0]}") from None
    deep = _deeper_than(document, MAX_DEPTH)
    if deep is not None:  # the conversion walks values recursively: bounded here, as catalog files are
        raise RegistryError(f"{path}: not a registry dump: {deep} is nested deeper than {MAX_DEPTH} levels")
    if not isinstance(document, dict) or document.get("kcatalog_registry_dump") != DUMP_FORMAT:
        raise RegistryError(
            f'{path}: not a registry dump (a JSON object with "kcatalog_registry_dump": {DUMP_FORMAT}, '
            "as `kcatalog dump-registry` writes)"
        )
    specs = document.get("specs")
    if not isinstance(specs, list) or not all(isinstance(spec, dict) for spec in specs):
        raise RegistryError(f'{path}: "specs" should be a list of objects')
    backends = document.get("backends", [])
    if not isinstance(backends, list) or not all(isinstance(name, str) for name in backends):
        raise RegistryError(f'{path}: "backends" should be a list of backend names')
    orders = document.get("class_priority", {})
    if not isinstance(orders, dict) or not all(_is_class_order(entry) for entry in orders.values()):
        raise RegistryError(
            f'{path}: "class_priority" should map op ids to '
            '{"order": [backend names], "from": "module:Class.priority"}'
        )
    class_priority = {str(op): ClassOrder(tuple(e["order"]), e["from"]) for op, e in orders.items()}
    return RegistryDump(
        str(document.get("source") or path), tuple(specs), document.get("priority"), tuple(backends), class_priority
    )


def _deeper_than(document: Any, limit: int) -> str | None:
    """Where `document` holds arrays or objects more than `limit` levels deep (its first keys there:
    '["specs"][0]["not_imported"]["x"][0]...'), or None; counted without recursing."""
    stack: list[tuple[Any, int, tuple[Any, Any] | None]] = [(document, 0, None)]  # (value, depth, (key, parent))
    while stack:
        value, depth, trail = stack.pop()
        if not isinstance(value, (dict, list)):
            continue
        if depth >= limit:
            keys = []
            while trail is not None:
                keys.append(trail[0])
                trail = trail[1]
            shown = "".join(f"[{json.dumps(key)}]" if isinstance(key, str) else f"[{key}]" for key in keys[:-6:-1])
            return shown + "..." * (len(keys) > 5)
        items = value.items() if isinstance(value, dict) else enumerate(value)
        stack.extend((item, depth + 1, (key, trail)) for key, item in items)
    return None


def _is_class_order(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("from"), str)
        and isinstance(entry.get("order"), list)
        and all(isinstance(name, str) for name in entry["order"])
    )


def _spec(fields: Mapping[str, Any]) -> dict[str, Any]:
    spec = {name: plain(fields[name]) for name in SPEC_FIELDS if name in fields}
    if "capabilities" in spec:
        spec["capabilities"] = _capabilities(fields["capabilities"])
    extra = {name: plain(value) for name, value in fields.items() if name not in SPEC_FIELDS and value is not None}
    if extra:
        spec["not_imported"] = extra
    return spec


def _capabilities(value: Any) -> Any:
    """A list of capability mappings: a single capability (it has a device) is a list of one."""
    if value is None:
        return []
    if _has_device(value):
        return [plain(value)]
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return plain(value)  # reported by the conversion
    items = [plain(item) for item in value]
    if isinstance(value, (set, frozenset)):  # no order of its own: a stable one
        items.sort(key=lambda item: json.dumps(item, sort_keys=True))
    return items


def _has_device(value: Any) -> bool:
    return (isinstance(value, Mapping) and "device" in value) or (
        not isinstance(value, Mapping) and hasattr(value, "device")
    )


def _attributes(obj: Any) -> dict[str, Any]:
    """An object's public data attributes: a mapping's items, a dataclass's or named tuple's fields, else vars."""
    if isinstance(obj, Mapping):
        return {str(key): value for key, value in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if not f.name.startswith("_")}
    if isinstance(obj, tuple) and hasattr(obj, "_asdict"):
        return dict(obj._asdict())
    names: list[str] = list(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    found = {}
    for name in dict.fromkeys(names):
        if name.startswith("_"):
            continue
        value = getattr(obj, name, None)
        if not callable(value) or isinstance(value, enum.Enum):
            found[name] = value
    return found


def plain(value: Any, depth: int = 0) -> Any:
    """A registry value as JSON values: enums as their values, tuples and sets as lists, objects as mappings;
    RegistryError where it nests deeper than a dump may (an object that refers to itself does, endlessly)."""
    if depth > MAX_DEPTH:
        raise RegistryError(f"a registry value is nested deeper than {MAX_DEPTH} levels (or refers to itself)")
    inner = depth + 1
    if isinstance(value, enum.Enum):
        return plain(value.value, inner)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {str(plain(key, inner)): plain(item, inner) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_asdict"):
        return [plain(item, inner) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(item, inner) for item in value), key=lambda item: json.dumps(item, sort_keys=True))
    attributes = _attributes(value)
    return {name: plain(item, inner) for name, item in attributes.items()} if attributes else repr(value)
