"""A registry dump converted into catalog files: one manifest per op group plus a settings file.

Only what the registry states is written: no signature, dtype, description or reference is invented (the
format leaves them optional). What the format cannot express is a diagnostic (KC7xx) naming the spec, and the
spec is left out rather than written with less than it said (a capability dropped would widen where it runs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import codes
from ..errors import Diagnostic, Severity
from ..model import Capability
from ..platform import DEVICES, contending
from ..read.files import SETTINGS_FILE
from ..validate.schema import ARCH_PATTERN, BACKEND_PATTERN, CUDA_ARCH_RE, NAME_PATTERN, OP_ID_PATTERN, TARGET_RE
from ..write.yaml_text import Flow, document
from .source import RegistryDump

HEADER = "# Imported by `kcatalog import-registry`"
_NAME = re.compile(NAME_PATTERN)
_ARCH = re.compile(ARCH_PATTERN)
# A group is written to <group>.yaml: it must fit in a file name (255 bytes on the common file systems) and not
# be the settings file's.
MAX_FILE_NAME_BYTES = 255
_SUFFIX = ".yaml"
_BACKEND = re.compile(BACKEND_PATTERN)
_OP_ID = re.compile(OP_ID_PATTERN)
# Capability fields the format maps: registries spell the CUDA window either way.
_ARCH_FIELDS = {
    "min_cuda_arch": "min_arch",
    "min_arch": "min_arch",
    "max_cuda_arch": "max_arch",
    "max_arch": "max_arch",
}


@dataclass
class _Op:
    group: str
    name: str
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)  # backend -> {target, capabilities, auto}
    priority: tuple[str, ...] | None = None
    platform_priority: dict[str, tuple[str, ...]] = field(default_factory=dict)
    priority_from: str = ""  # which spec or attribute gave it, for a conflict's message


@dataclass(frozen=True)
class ConvertedCatalog:
    """The catalog files (name -> text, the settings file 'kcatalog.yaml' first; none when no spec could be
    written), what could not be expressed, and how many ops and specs were written."""

    files: dict[str, str]
    diagnostics: tuple[Diagnostic, ...]
    ops: int
    specs: int

    @property
    def failed(self) -> bool:
        """Whether anything was left out (an error diagnostic)."""
        return any(d.is_error for d in self.diagnostics)


class _RegistryConverter:
    """One registry dump being converted into manifests and settings, with what it could not express."""

    def __init__(self, dump: RegistryDump, manual: Sequence[str]) -> None:
        self.dump = dump
        self.manual = tuple(manual)
        self.diagnostics: list[Diagnostic] = []
        self.ops: dict[str, _Op] = {}
        self.backends: dict[str, list[bool]] = {}  # backend -> each spec's `auto` (True when not given)
        self.devices: dict[str, None] = {}  # device kinds declared beyond the built-in ones
        self.not_imported: dict[str, int] = {}  # attribute -> how many specs carried it

    def manual_backends(self) -> set[str]:
        """Backends kept out of auto-selection in the settings: named so, or `auto: false` on every spec."""
        return {*self.manual, *(name for name, autos in self.backends.items() if not any(autos))}

    def report(self, code: str, message: str, severity: Severity = Severity.ERROR) -> None:
        self.diagnostics.append(Diagnostic(code, message, None, severity))

    def add_spec(self, index: int, spec: Mapping[str, Any]) -> None:
        op_id, backend, target = spec.get("op"), spec.get("backend"), spec.get("target")
        label = f"spec {index} (op {op_id!r}, backend {backend!r})"
        if not (isinstance(op_id, str) and isinstance(backend, str) and isinstance(target, str)):
            missing = [
                name for name, value in (("op", op_id), ("backend", backend), ("target", target)) if value is None
            ]
            what = f"has no {', '.join(missing)}" if missing else "has an op, backend or target that is not text"
            self.report(codes.REGISTRY_SPEC_INCOMPLETE, f"{label} {what}; left out")
            return
        if not _OP_ID.fullmatch(op_id):
            self.report(
                codes.REGISTRY_NAME_UNSUPPORTED,
                f"{label}: op id {op_id!r} is not '<group>.<name>' in lower_snake_case; left out",
            )
            return
        file_name = op_id.partition(".")[0] + _SUFFIX
        if file_name == SETTINGS_FILE or len(file_name.encode()) > MAX_FILE_NAME_BYTES:
            why = (
                f"would be written to {SETTINGS_FILE}, the settings file"
                if file_name == SETTINGS_FILE
                else f"makes a file name of {len(file_name)} characters, over the {MAX_FILE_NAME_BYTES} that file "
                "systems allow"
            )
            self.report(codes.REGISTRY_NAME_UNSUPPORTED, f"{label}: its group {why}; left out")
            return
        if not _BACKEND.fullmatch(backend):
            self.report(
                codes.REGISTRY_NAME_UNSUPPORTED,
                f"{label}: backend name {backend!r} is not an identifier (letters, digits, '_'); left out",
            )
            return
        if not TARGET_RE.fullmatch(target):
            self.report(
                codes.REGISTRY_TARGET_MALFORMED, f"{label}: target {target!r} is not 'package.module:attr'; left out"
            )
            return
        group, _, name = op_id.partition(".")
        op = self.ops.setdefault(op_id, _Op(group, name))
        if backend in op.backends:
            first = op.backends[backend]["index"]
            self.report(
                codes.REGISTRY_DUPLICATE_SPEC,
                f"{label}: a second spec for backend '{backend}' of op '{op_id}' (the first is spec {first}); "
                "the registry keeps one of them depending on import order; left out",
            )
            return
        capabilities = self.capabilities(label, spec.get("capabilities", []))
        if capabilities is None:
            return
        auto = spec.get("auto")
        if auto is not None and not isinstance(auto, bool):
            self.report(codes.REGISTRY_SPEC_INCOMPLETE, f"{label}: auto {auto!r} is not true or false; left out")
            return
        op.backends[backend] = {"index": index, "target": target, "capabilities": capabilities, "auto": auto}
        self.backends.setdefault(backend, []).append(auto is not False)
        if spec.get("priority") is not None:
            self.set_priority(op_id, spec["priority"], label)
        for attr in spec.get("not_imported", {}):
            self.not_imported[attr] = self.not_imported.get(attr, 0) + 1

    def capabilities(self, label: str, value: Any) -> list[dict[str, Any]] | None:
        """The spec's capabilities as the format writes them, or None (reported) when one cannot be."""
        if not isinstance(value, list):
            self.report(
                codes.REGISTRY_CAPABILITY_UNMAPPED, f"{label}: capabilities {value!r} are not a list of items; left out"
            )
            return None
        out = []
        for item in value:
            problem, capability = self.capability(item)
            if problem:
                self.report(codes.REGISTRY_CAPABILITY_UNMAPPED, f"{label}: capability {item!r}: {problem}; left out")
                return None
            out.append(capability)
        return out

    def capability(self, item: Any) -> tuple[str, dict[str, Any]]:
        if not isinstance(item, Mapping):
            return "not an item with a device", {}
        device = item.get("device")
        if not isinstance(device, str) or not _NAME.fullmatch(device):
            return f"device {device!r} is not a device name in lower case", {}
        out: dict[str, Any] = {"device": device}
        for key, raw in item.items():
            if key == "device" or raw is None:
                continue
            if key in _ARCH_FIELDS:
                arch = _arch_text(raw)
                if arch is None:
                    return f"{key} {raw!r} is not a CUDA arch such as (9, 0) or '9.0'", {}
                if device != "cuda":
                    return f"{key} applies to cuda in the catalog format, not {device}", {}
                if _ARCH_FIELDS[key] in out:
                    return f"{key} repeats the {_ARCH_FIELDS[key]} already given", {}
                out[_ARCH_FIELDS[key]] = arch
            elif key == "archs" and isinstance(raw, list) and raw and all(isinstance(a, str) for a in raw):
                bad = [arch for arch in raw if not _ARCH.fullmatch(arch)]
                if bad:
                    return (
                        f"archs {', '.join(map(repr, bad))}: not architecture names (letters, digits and "
                        "'_.:+-', as 'gfx942')",
                        {},
                    )
                out["archs"] = raw
            else:
                return f"field {key!r} ({raw!r}) has no equivalent in the catalog format", {}
        low, high = out.get("min_arch"), out.get("max_arch")
        if low and high and _arch_key(low) > _arch_key(high):
            return f"min_arch {low} is above max_arch {high}, so no device matches", {}
        self.declare(device)
        return "", out

    def declare(self, device: str) -> None:
        """A device kind kcatalog does not know is declared in the settings, with a warning saying so."""
        if device not in DEVICES and device not in self.devices:
            self.devices[device] = None
            self.report(
                codes.REGISTRY_DEVICE_DECLARED,
                f"device '{device}' is not one kcatalog knows ({', '.join(DEVICES)}); declared under 'devices' "
                "in the imported settings",
                Severity.WARNING,
            )

    def set_priority(self, op_id: str, value: Any, source: str) -> None:
        op = self.ops.get(op_id)
        if op is None:
            self.report(
                codes.REGISTRY_PRIORITY_UNMAPPED,
                f"{source} gives a priority for op {op_id!r}, which has no spec written; not imported",
                Severity.WARNING,
            )
            return
        if isinstance(value, Mapping):
            per_device = {}
            for device, order in value.items():
                names = self.order(order, f"{source} ({device!r})")
                if names is None:
                    return
                if not _NAME.fullmatch(device):
                    self.report(
                        codes.REGISTRY_PRIORITY_UNMAPPED,
                        f"{source}: device {device!r} of a per-device priority is not a device name; not imported",
                    )
                    return
                self.declare(device)
                per_device[device] = names
            priority, platform_priority = None, per_device
        else:
            names = self.order(value, source)
            if names is None:
                return
            priority, platform_priority = names, {}
        if op.priority_from and (op.priority, op.platform_priority) != (priority, platform_priority):
            self.report(
                codes.REGISTRY_PRIORITY_UNMAPPED,
                f"{source} gives op '{op_id}' a priority other than the one {op.priority_from} gives; "
                "the first is kept",
                Severity.WARNING,
            )
            return
        op.priority, op.platform_priority, op.priority_from = priority, platform_priority, source

    def order(self, value: Any, source: str) -> tuple[str, ...] | None:
        if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
            self.report(
                codes.REGISTRY_PRIORITY_UNMAPPED,
                f"{source}: priority {value!r} is not a list of backend names; not imported",
            )
            return None
        bad = [name for name in value if not _BACKEND.fullmatch(name)]
        if bad:
            self.report(
                codes.REGISTRY_PRIORITY_UNMAPPED,
                f"{source}: priority names {', '.join(map(repr, bad))}, not backend names; not imported",
            )
            return None
        return tuple(value)


def convert(
    dump: RegistryDump, *, priority: Sequence[str] | None = None, manual: Sequence[str] = ()
) -> ConvertedCatalog:
    """The catalog files for a registry dump. `priority` is the default backend order (default: the registry's
    own default order if it has one, else none: each op's backends rank in the order the registry declared
    them, with a warning for each op whose backends can run on one platform and that has no order of its own);
    `manual` names backends kept out of auto-selection (as are backends whose every spec says `auto: false`)."""
    converter = _RegistryConverter(dump, manual)
    for index, spec in enumerate(dump.specs):
        converter.add_spec(index, spec)
    default = _registry_priority(converter, dump.priority)
    for op_id, ranked in dump.class_priority.items():  # what the specs' classes rank by (class_priority.py)
        converter.set_priority(op_id, list(ranked.order), ranked.source)
    for attr, count in converter.not_imported.items():
        converter.report(
            codes.REGISTRY_ATTRIBUTE_NOT_IMPORTED,
            f"attribute {attr!r} of {count} spec{'s' * (count != 1)} is not read by the importer; not imported",
            Severity.WARNING,
        )
    order = tuple(priority) if priority is not None else default or ()
    if not order:
        _report_unordered(converter)
    if not any(op.backends for op in converter.ops.values()):  # a catalog needs a backend: write nothing
        return ConvertedCatalog({}, tuple(converter.diagnostics), 0, 0)
    named = _named_orders(converter)
    files = {SETTINGS_FILE: _settings_text(converter, order, named)}
    groups: dict[str, list[_Op]] = {}
    for op in converter.ops.values():
        if op.backends:
            groups.setdefault(op.group, []).append(op)
    for group, ops in groups.items():
        files[group + _SUFFIX] = _manifest_text(dump.source, group, ops, named, converter.manual_backends())
    specs = sum(len(op.backends) for op in converter.ops.values())
    return ConvertedCatalog(
        files, tuple(converter.diagnostics), sum(1 for op in converter.ops.values() if op.backends), specs
    )


def _report_unordered(converter: _RegistryConverter) -> None:
    """A warning for each op whose backends can run on one platform and that no order ranks: declaration order
    decides, which the registry may not have meant (SGLang's selector refuses to choose among several)."""
    manual = converter.manual_backends()
    for op_id, op in converter.ops.items():
        if op.priority is not None or op.platform_priority:
            continue
        automatic = {
            name: tuple(_capability(cap) for cap in entry["capabilities"])
            for name, entry in op.backends.items()
            if entry["auto"] is not False and name not in manual
        }
        rivals = contending(automatic)
        if rivals:
            converter.report(
                codes.REGISTRY_ORDER_MISSING,
                f"op '{op_id}' has backends {', '.join(rivals)} that can run on one platform and the registry gives "
                "no order for them: the first declared that can run is chosen; give --priority A,B,... for a "
                "default order",
                Severity.WARNING,
            )


def _capability(cap: Mapping[str, Any]) -> Capability:
    archs = cap.get("archs")
    return Capability(cap["device"], cap.get("min_arch"), cap.get("max_arch"), None if archs is None else tuple(archs))


def _registry_priority(converter: _RegistryConverter, value: Any) -> tuple[str, ...] | None:
    """The registry's `priority` attribute: a default order (a list), or op -> order (or op -> {device: order})."""
    if value is None:
        return None
    if isinstance(value, list):
        return converter.order(value, "the registry's priority")
    if not isinstance(value, Mapping):
        converter.report(
            codes.REGISTRY_PRIORITY_UNMAPPED,
            f"the registry's priority {value!r} is neither a list nor a mapping of op to list; not imported",
        )
        return None
    for op_id, order in value.items():
        converter.set_priority(str(op_id), order, "the registry's priority")
    return None


def _named_orders(converter: _RegistryConverter) -> dict[tuple[str, ...], str]:
    """Each distinct per-op order, named in first-seen order: ops refer to the settings' list by name, so that a
    shared order may name backends a given op lacks, as registries' shared tuples do."""
    named: dict[tuple[str, ...], str] = {}
    for op in converter.ops.values():
        for order in (op.priority, *op.platform_priority.values()):
            if order is not None and order not in named:
                named[order] = f"order_{len(named) + 1}"
    return named


def _settings_text(converter: _RegistryConverter, order: tuple[str, ...], named: dict[tuple[str, ...], str]) -> str:
    backends = dict.fromkeys([*converter.backends, *order, *(n for o in named for n in o), *converter.manual])
    manual = converter.manual_backends()
    data: dict[str, Any] = {
        "kcatalog": 1,
        "backends": {name: Flow({"auto": False}) if name in manual else {} for name in backends},
        "priority": list(order),
    }
    if named:
        data["priorities"] = {name: list(names) for names, name in named.items()}
    if converter.devices:
        data["devices"] = list(converter.devices)
    comments = [f"{HEADER.removeprefix('# ')} from {converter.dump.source}."]
    if not order:
        comments.append("No default order: each op's backends rank in the order the registry declared them.")
    return document(data, comments=comments)


def _manifest_text(source: str, group: str, ops: list[_Op], named: dict[tuple[str, ...], str], manual: set[str]) -> str:
    written: dict[str, Any] = {}
    for op in ops:
        entry: dict[str, Any] = {}
        if op.priority is not None:
            entry["priority"] = named[op.priority]
        if op.platform_priority:
            entry["platform_priority"] = {device: named[order] for device, order in op.platform_priority.items()}
        backends: dict[str, Any] = {}
        for backend, spec in op.backends.items():
            fields: dict[str, Any] = {"target": spec["target"]}
            if spec["capabilities"]:
                fields["capabilities"] = [Flow(cap) for cap in spec["capabilities"]]
            if spec["auto"] is False and backend not in manual:  # else the settings say it for the backend
                fields["auto"] = False
            backends[backend] = fields
        entry["backends"] = backends
        written[op.name] = entry
    comments = [
        f"{HEADER.removeprefix('# ')} from {source}.",
        "The registry declares no signature, dtypes, description or reference, so none is written: an op",
        "without a signature takes any arguments, and its handle dispatches on the first one.",
    ]
    return document({"kcatalog": 1, "group": group, "ops": written}, comments=comments)


def _arch_text(value: Any) -> str | None:
    """(9, 0), [9, 0] or '9.0' as '9.0'; None for anything else."""
    if isinstance(value, list) and len(value) == 2 and all(type(v) is int and v >= 0 for v in value):
        text = f"{value[0]}.{value[1]}"
    elif isinstance(value, str):
        text = value.strip()
    else:
        return None
    return text if CUDA_ARCH_RE.fullmatch(text) else None


def _arch_key(arch: str) -> tuple[int, ...]:
    return tuple(int(part) for part in arch.split("."))
