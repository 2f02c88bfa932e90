"""Validated files to the typed model: merge, conflicts, references, priorities, samples, policy.

Everything here depends only on the files' contents, so its result can be cached; the checks that
depend on this machine or the caller (targets, allow-list, `require=`, overrides) are in check/.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import yaml

from .. import codes
from ..errors import Diagnostic, Location, Severity, did_you_mean
from ..model import (
    FAKE_REFERENCE,
    Capability,
    CatalogLayer,
    CatalogSettings,
    KernelSpec,
    LinkedCatalog,
    OpInfo,
)
from ..platform import DEVICES, Platform
from ..read.yaml_nodes import children, find_node, node_location
from ..validate.schema import Backend, Manifest, Op, Settings
from ..validate.validator import ValidatedFile
from .layers import known_backends, layer_name, merge_settings
from .mappings import link_mappings
from .op_fields import check_op_fields
from .signature import signature_params
from .torch_schema import torch_op_name, torch_schema


@dataclass
class _PendingOp:
    """An op while its files are linked: its backends grow with extensions, then it is frozen into OpInfo."""

    file: ValidatedFile
    name: str
    op_id: str
    op: Op
    location: Location
    specs: dict[str, KernelSpec] = field(default_factory=dict)
    torch_schema: str | None = None
    torch_problems: list[Diagnostic] = field(default_factory=list)
    # The op's orders with names of the settings' priority lists resolved (see _Linker.resolve_priorities).
    priority: tuple[str, ...] | None = None
    platform_priority: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def freeze(self, group: str, layer: str) -> OpInfo:
        op = self.op
        return OpInfo(
            id=self.op_id,
            group=group,
            description=op.description,
            signature=op.signature,
            reference=op.reference,
            dtypes=op.dtypes,
            mutates=op.mutates,
            tolerance=MappingProxyType({dtype: value for dtype, value in op.tolerance.items()}),
            priority=self.priority,
            platform_priority=MappingProxyType(self.platform_priority),
            dispatch_arg=op.dispatch_arg,
            samples_json=None if op.samples is None else op.samples.model_dump_json(),
            location=self.location,
            backends=MappingProxyType(dict(self.specs)),
            fake=op.fake,
            torch_schema=self.torch_schema,
            torch_problems=tuple(self.torch_problems),
            layer=layer,
        )


class _Linker:
    """Collects diagnostics while assembling ops from validated files."""

    def __init__(
        self,
        files: Sequence[ValidatedFile],
        settings_found: bool,
        diagnostics: list[Diagnostic],
        layers: Sequence[CatalogLayer] = (),
    ) -> None:
        self.files = files
        self.settings_found = settings_found  # a settings file was read, even if it failed the schema
        self.diagnostics = diagnostics
        self.layers = layers
        self.settings: CatalogSettings | None = None  # every layer's settings merged (link/layers.py)
        self.known: tuple[str, ...] = ()
        self.devices: tuple[str, ...] = DEVICES  # the built-in device kinds, and those the settings declare
        self.pending: dict[str, _PendingOp] = {}
        self.ops: dict[str, OpInfo] = {}
        self.layer_allow_lists: Mapping[int, tuple[str, ...] | None] = {}  # each layer's, for its own files' specs
        self.replaced: dict[tuple[str, str], KernelSpec] = {}  # (op, backend) -> the spec that replaced it
        self.declared: list[KernelSpec] = []

    def allow_lists(self, file: ValidatedFile) -> tuple[tuple[str, ...], ...]:
        """The allow-lists a target declared in `file` must satisfy: its own layer's, if it has one."""
        prefixes = self.layer_allow_lists.get(file.layer)
        return () if prefixes is None else (prefixes,)

    def layer(self, file: ValidatedFile) -> str:
        return layer_name(self.layers, file.layer)

    def error(self, code: str, message: str, location: Location | None) -> None:
        self.diagnostics.append(Diagnostic(code, message, location))

    def error_at(self, file: ValidatedFile, node: yaml.Node | None, code: str, message: str) -> None:
        self.error(code, message, node_location(file.path, node))

    # -- settings -------------------------------------------------------------------------------

    def link_settings(self) -> None:
        found = [f for f in self.files if isinstance(f.model, Settings)]
        if not found and self.settings_found:
            return  # the settings file's own diagnostics say what is wrong with it
        if not found:
            self.error(
                codes.SETTINGS_FILE,
                "no catalog settings file (kcatalog.yaml) among the paths; it declares the known "
                "backends, their priority and the policy",
                None,
            )
            return
        chosen: dict[int, ValidatedFile] = {}  # one settings file per layer
        for extra in found:
            first = chosen.setdefault(extra.layer, extra)
            if first is not extra:
                self.error(
                    codes.SETTINGS_FILE,
                    f"second catalog settings file; the first is {first.path}",
                    node_location(extra.path, extra.parsed.root),
                )
        files = [chosen[number] for number in sorted(chosen)]
        self.known = tuple(known_backends(files, self.layers, self.diagnostics))
        merged = merge_settings(files, self.layers, self.known, self.check_names, self.diagnostics)
        self.settings, self.layer_allow_lists = merged.settings, merged.allow_lists
        if not self.known:
            self.error(
                codes.SETTINGS_FILE,
                "no settings file among the layers declares a backend; at least one must declare the known "
                "backends, their priority and the policy",
                None,
            )
        self.devices = (*DEVICES, *(d for d in self.settings.devices if d not in DEVICES))
        for file in files:
            assert isinstance(file.model, Settings)
            for device in file.model.platform_priority:
                self.check_device(device, file, find_node(file.parsed.root, ["platform_priority", device], key=True))
            policy_node = children(file.parsed.root).get("policy", (None, None))[1]
            platforms_node = children(policy_node).get("required_platforms", (None, None))[1]
            for index, text in enumerate(file.model.policy.required_platforms):
                try:
                    Platform.parse(text, self.devices)
                except ValueError as exc:
                    item = platforms_node.value[index] if platforms_node is not None else None
                    self.error(codes.INVALID_VALUE, str(exc), node_location(file.path, item))

    def check_names(
        self,
        names: Sequence[str],
        file: ValidatedFile,
        path: Sequence[str],
        what: str,
        allowed: Sequence[str] | None = None,
    ) -> None:
        """Every name must be a known backend (or one of `allowed`); the error points at the list item."""
        allowed = self.known if allowed is None else allowed
        node = file.parsed.root
        for part in path:
            node = children(node).get(part, (None, None))[1]
        for index, name in enumerate(names):
            if name in allowed:
                continue
            item = node.value[index] if node is not None and index < len(node.value) else node
            if allowed is not self.known and name in self.known:
                message = f"backend '{name}' in {what} is not a backend of the op; its backends: {', '.join(allowed)}"
            else:
                message = (
                    f"unknown backend '{name}' in {what}{did_you_mean(name, allowed)}; known: {', '.join(allowed)}"
                )
            self.error(codes.UNKNOWN_BACKEND, message, node_location(file.path, item))

    def check_device(self, device: str, file: ValidatedFile, node: yaml.Node | None) -> None:
        """A device kind must be built in or declared in the settings' `devices`; the error points at `node`."""
        if device in self.devices:
            return
        self.error_at(
            file,
            node,
            codes.UNKNOWN_DEVICE,
            f"unknown device '{device}'{did_you_mean(device, self.devices)}; known: {', '.join(self.devices)} "
            "(declare more under 'devices' in the catalog settings)",
        )

    # -- ops ------------------------------------------------------------------------------------

    def link_ops(self) -> None:
        manifests = [(f, f.model) for f in self.files if isinstance(f.model, Manifest)]
        groups: dict[str, str] = {}
        for file, manifest in manifests:
            op_nodes = children(children(file.parsed.root).get("ops", (None, None))[1])
            for name, op in manifest.ops.items():
                key_node, value_node = op_nodes[name]
                op_id = f"{manifest.group}.{name}"
                location = node_location(file.path, key_node)
                specs = self.backend_specs(file, op_id, op.dtypes, op.backends, value_node)
                self.declare_fake(file, op_id, op, value_node)
                policy = self.settings.policy if self.settings is not None else None
                check_op_fields(file, op_id, op, location, value_node, policy, self.diagnostics)
                if op_id in self.pending:
                    earlier = self.pending[op_id]
                    self.error(
                        codes.DUPLICATE_OP,
                        f"op '{op_id}' already declared at {earlier.location}{self.across(earlier.file, file)}",
                        location,
                    )
                    continue
                pending = self.pending[op_id] = _PendingOp(file, name, op_id, op, location, specs)
                self.link_torch_op(pending, value_node)
                groups[op_id] = manifest.group
        for replacing in (False, True):  # every added backend first, so that one may be replaced too
            for file, manifest in manifests:
                self.link_extensions(file, manifest, replacing=replacing)
        for pending in self.pending.values():  # after extensions, which may add the backends an order names
            self.resolve_priorities(pending)
        self.check_torch_names()
        if self.settings is not None and self.settings.policy.torch_ops:
            self.diagnostics.extend(d for pending in self.pending.values() for d in pending.torch_problems)
        self.ops = {
            op_id: pending.freeze(groups[op_id], self.layer(pending.file)) for op_id, pending in self.pending.items()
        }

    # -- as torch ops ---------------------------------------------------------------------------------

    def link_torch_op(self, pending: _PendingOp, op_node: yaml.Node) -> None:
        """The op's torch.library schema, its fake target (declared, so that its target is checked like every
        other), and why it cannot become a torch op (kept on the op; warnings where the policy asks)."""
        op, op_id, file = pending.op, pending.op_id, pending.file
        entries = children(op_node)
        if op.signature is None:
            pending.torch_problems.append(
                Diagnostic(
                    codes.TORCH_SCHEMA_UNSUPPORTED,
                    f"op '{op_id}' cannot be a torch op: it declares no signature to derive a schema from",
                    pending.location,
                    Severity.WARNING,
                )
            )
            return
        try:
            params = signature_params(op.signature)
        except ValueError:
            return  # reported by check_arguments
        if any(name not in params for name in op.mutates):
            return  # reported by check_arguments
        try:
            schema = torch_schema(op.signature, op.mutates)
        except ValueError as exc:
            pending.torch_problems.append(
                Diagnostic(
                    codes.TORCH_SCHEMA_UNSUPPORTED,
                    f"op '{op_id}' cannot be a torch op: {exc}",
                    node_location(file.path, entries["signature"][1]),
                    Severity.WARNING,
                )
            )
            return
        pending.torch_schema = schema.schema
        if op.fake is None and not schema.returns_nothing:
            returns = schema.schema.rpartition(" -> ")[2]
            pending.torch_problems.append(
                Diagnostic(
                    codes.TORCH_FAKE_MISSING,
                    f"op '{op_id}' returns {returns} but declares no fake implementation, so torch.compile "
                    f"cannot trace it as a torch op; declare 'fake: {FAKE_REFERENCE}' where its torch reference "
                    "runs on meta tensors, or 'fake: package.module:attr'",
                    pending.location,
                    Severity.WARNING,
                )
            )

    def declare_fake(self, file: ValidatedFile, op_id: str, op: Op, op_node: yaml.Node) -> None:
        """A fake given as a target is declared with the backends, so that it is checked as every target is."""
        if op.fake is None or op.fake == FAKE_REFERENCE:
            return
        key_node, value_node = children(op_node)["fake"]
        self.declared.append(
            KernelSpec(
                op=op_id,
                backend="fake",
                target=op.fake,
                requires=(),
                capabilities=(),
                dtypes=op.dtypes,
                location=node_location(file.path, key_node),
                target_location=node_location(file.path, value_node),
                allowed_modules=self.allow_lists(file),
                layer=self.layer(file),
            )
        )

    def check_torch_names(self) -> None:
        """Two ops whose ids differ only in where the dot is ('a_b.c', 'a.b_c') would be one torch op."""
        first: dict[str, str] = {}
        for op_id, pending in self.pending.items():
            name = torch_op_name(op_id)
            other = first.setdefault(name, op_id)
            if other != op_id:
                pending.torch_problems.append(
                    Diagnostic(
                        codes.TORCH_NAME_COLLISION,
                        f"op '{op_id}' and op '{other}' (declared at {self.pending[other].location}) "
                        f"would both be torch op '{name}'",
                        pending.location,
                        Severity.WARNING,
                    )
                )

    def resolve_priorities(self, pending: _PendingOp) -> None:
        """An op's own orders must name its backends; a name of a settings list stands for that list, which
        may name backends the op lacks (selection ranks only the op's own)."""
        op, op_id, name, backends = pending.op, pending.op_id, pending.name, list(pending.specs)
        pending.priority = self.priority_list(
            pending, op.priority, ("ops", name, "priority"), f"priority of op '{op_id}'", backends
        )
        for device, order in op.platform_priority.items():
            key = find_node(pending.file.parsed.root, ["ops", name, "platform_priority", device], key=True)
            self.check_device(device, pending.file, key)
            resolved = self.priority_list(
                pending,
                order,
                ("ops", name, "platform_priority", device),
                f"{device} priority of op '{op_id}'",
                backends,
            )
            if resolved is not None:
                pending.platform_priority[device] = resolved

    def priority_list(
        self,
        pending: _PendingOp,
        order: tuple[str, ...] | str | None,
        path: tuple[str, ...],
        what: str,
        backends: list[str],
    ) -> tuple[str, ...] | None:
        if order is None or not isinstance(order, str):
            if order is not None:
                self.check_names(order, pending.file, path, what, allowed=backends)
            return order
        named = self.settings.priorities if self.settings is not None else {}
        if order not in named and self.settings is not None:
            self.error_at(
                pending.file,
                find_node(pending.file.parsed.root, list(path)),
                codes.UNKNOWN_PRIORITY_LIST,
                f"{what} names priority list '{order}', which the settings do not declare"
                f"{did_you_mean(order, named)}; declared: {', '.join(named) or 'none'}",
            )
        return named.get(order)

    def across(self, earlier: ValidatedFile, later: ValidatedFile) -> str:
        """Where two definitions come from different layers, both layers' names (for a duplicate's message)."""
        if earlier.layer == later.layer:
            return ""
        return f" by layer '{self.layer(earlier)}'; layer '{self.layer(later)}' declares it again"

    def link_extensions(self, file: ValidatedFile, manifest: Manifest, *, replacing: bool) -> None:
        """An extension's added backends (or, `replacing`, its replacements) merged into the op it extends."""
        ext_nodes = children(children(file.parsed.root).get("extends", (None, None))[1])
        for op_id, extension in manifest.extends.items():
            key_node, value_node = ext_nodes[op_id]
            pending = self.pending.get(op_id)
            if pending is None:
                if not replacing:
                    self.error(
                        codes.EXTENDS_UNKNOWN_OP,
                        f"extends op '{op_id}', which no manifest declares{did_you_mean(op_id, self.pending)}",
                        node_location(file.path, key_node),
                    )
                continue
            given = extension.replaces if replacing else extension.backends
            key = "replaces" if replacing else "backends"
            added = self.backend_specs(file, op_id, pending.op.dtypes, given, value_node, key=key)
            specs = pending.specs
            for name, spec in added.items():
                if replacing:
                    self.replace(pending, spec, file)
                elif name in specs:
                    earlier = specs[name]
                    across = (
                        f" by layer '{earlier.layer}'; layer '{spec.layer}' lists it under 'replaces' to swap it"
                        if earlier.layer != spec.layer
                        else ""
                    )
                    self.error(
                        codes.DUPLICATE_BACKEND,
                        f"backend '{name}' of op '{op_id}' already declared at {earlier.location}{across}",
                        spec.location,
                    )
                else:
                    specs[name] = spec

    def replace(self, pending: _PendingOp, spec: KernelSpec, file: ValidatedFile) -> None:
        """`spec` takes the place of the op's backend of its name; one backend is replaced at most once."""
        op_id, name, specs = pending.op_id, spec.backend, pending.specs
        if name not in specs:
            self.error(
                codes.REPLACES_UNKNOWN_BACKEND,
                f"replaces backend '{name}' of op '{op_id}', which the op does not have"
                f"{did_you_mean(name, specs)}; its backends: {', '.join(specs)}",
                spec.location,
            )
            return
        earlier = self.replaced.get((op_id, name))
        if earlier is not None:
            self.error(
                codes.DUPLICATE_BACKEND,
                f"backend '{name}' of op '{op_id}' already replaced at {earlier.location}"
                + (
                    f" by layer '{earlier.layer}'; layer '{spec.layer}' replaces it again"
                    if earlier.layer != spec.layer
                    else ""
                ),
                spec.location,
            )
            return
        self.replaced[(op_id, name)] = specs[name] = spec

    def backend_specs(
        self,
        file: ValidatedFile,
        op_id: str,
        op_dtypes: tuple[str, ...] | None,
        backends: Mapping[str, Backend],
        op_node: yaml.Node,
        *,
        key: str = "backends",
    ) -> dict[str, KernelSpec]:
        specs: dict[str, KernelSpec] = {}
        backend_nodes = children(children(op_node).get(key, (None, None))[1])
        for name, backend in backends.items():
            key_node, value_node = backend_nodes[name]
            location = node_location(file.path, key_node)
            if self.settings is not None and name not in self.known:
                self.error(
                    codes.UNKNOWN_BACKEND,
                    f"unknown backend '{name}' in op '{op_id}'{did_you_mean(name, self.known)}; "
                    f"known: {', '.join(self.known)}",
                    location,
                )
            extra = [d for d in backend.dtypes or () if op_dtypes is not None and d not in op_dtypes]
            if extra and op_dtypes is not None:
                self.error_at(
                    file,
                    children(value_node)["dtypes"][1],
                    codes.DTYPE_NOT_OF_OP,
                    f"backend '{name}' of op '{op_id}' lists {', '.join(extra)}, not among the op's "
                    f"dtypes ({', '.join(op_dtypes)})",
                )
            for index, capability in enumerate(backend.capabilities):
                self.check_device(capability.device, file, find_node(value_node, ["capabilities", index, "device"]))
            info = self.settings.backends.get(name) if self.settings is not None else None
            specs[name] = KernelSpec(
                op=op_id,
                backend=name,
                target=backend.target,
                requires=backend.requires,
                capabilities=tuple(Capability(c.device, c.min_arch, c.max_arch, c.archs) for c in backend.capabilities),
                dtypes=backend.dtypes or op_dtypes,
                location=location,
                target_location=node_location(file.path, children(value_node)["target"][1]),
                allowed_modules=self.allow_lists(file),
                auto=backend.auto if backend.auto is not None else info is None or info.auto,
                layer=self.layer(file),
                traceable=backend.traceable,
                eligible=backend.eligible,
            )
            self.declared.append(specs[name])
            if backend.eligible is not None:  # the gate's target is checked statically like every target
                gate_key, gate_value = children(value_node)["eligible"]
                self.declared.append(
                    dataclasses.replace(
                        specs[name],
                        backend=f"{name} (eligible)",
                        target=backend.eligible,
                        location=node_location(file.path, gate_key),
                        target_location=node_location(file.path, gate_value),
                        eligible=None,
                    )
                )
        return specs

    # -- whole-catalog checks ----------------------------------------------------------------------

    def check_policy(self) -> None:
        if self.settings is None:
            return
        policy = self.settings.policy
        platforms = []
        for text in policy.required_platforms:
            try:
                platforms.append(Platform.parse(text, self.devices))
            except ValueError:
                pass  # reported with the settings
        for op_id, info in self.ops.items():
            specs = info.backends
            missing = [b for b in policy.required_backends if b in self.known and b not in specs]
            if missing:
                self.error(
                    codes.POLICY_BACKEND_MISSING,
                    f"op '{op_id}' lacks the {', '.join(missing)} backend the policy requires; "
                    f"it has {', '.join(specs)}",
                    info.location,
                )
            for platform in platforms:
                # An `auto: false` backend serves no platform by itself: selection there would choose nothing.
                reasons = {
                    name: platform.mismatch(spec.capabilities) or (None if spec.auto else "auto: false")
                    for name, spec in specs.items()
                }
                if all(reasons.values()):
                    detail = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
                    self.error(
                        codes.POLICY_PLATFORM_UNSERVED,
                        f"op '{op_id}' has no backend for required platform {platform} ({detail})",
                        info.location,
                    )


def link_files(
    files: Sequence[ValidatedFile],
    diagnostics: list[Diagnostic],
    *,
    settings_found: bool = False,
    layers: Sequence[CatalogLayer] = (),
) -> LinkedCatalog:
    """Link validated files (of `layers`, in order), adding what is wrong to `diagnostics`; the result is complete
    only when none of them is an error."""
    start = len(diagnostics)
    linker = _Linker(files, settings_found, diagnostics, layers)
    linker.link_settings()
    linker.link_ops()
    linker.check_policy()
    mappings = link_mappings(files, linker.ops, linker.allow_lists, diagnostics)
    settings = linker.settings
    warnings = tuple(d for d in diagnostics[start:] if not d.is_error)
    declared = (
        *linker.declared,
        *(spec for mapping in mappings for spec in (mapping.forward, mapping.prepare) if spec),
    )
    return LinkedCatalog(settings, MappingProxyType(linker.ops), declared, warnings, mappings)
