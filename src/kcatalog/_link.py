"""Validated files to linked, plain data: merge, conflicts, references, priorities, samples, policy.

Everything here depends only on the files' contents, so its result can be cached; the checks that
depend on this machine or the caller (targets, allow-list, `require=`, overrides) are in _checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from ._catalog import KernelSpec, OpInfo
from ._linked import Linked
from ._loader import LoadedFile, children
from ._platform import Capability, Platform
from ._samples import sample_problems
from ._signature import signature_params
from ._yaml import find_node, node_location
from .errors import Diagnostic, Location, did_you_mean
from .schema import Backend, Manifest, Op, Settings

if TYPE_CHECKING:
    import yaml


class _Linker:
    """Collects diagnostics while assembling ops from validated files."""

    def __init__(self, files: Sequence[LoadedFile], settings_found: bool = False) -> None:
        self.files = files
        self.settings_found = settings_found  # a settings file was read, even if it failed the schema
        self.diagnostics: list[Diagnostic] = []
        self.settings: Settings | None = None
        self.known: tuple[str, ...] = ()
        self.ops: dict[str, OpInfo] = {}
        self.backends: dict[str, dict[str, KernelSpec]] = {}
        self.declared: list[tuple[KernelSpec, Location]] = []

    def error(self, code: str, message: str, location: Location | None) -> None:
        self.diagnostics.append(Diagnostic(code, message, location))

    # -- settings -------------------------------------------------------------------------------

    def link_settings(self) -> None:
        found = [f for f in self.files if isinstance(f.model, Settings)]
        if not found and self.settings_found:
            return  # the settings file's own diagnostics say what is wrong with it
        if not found:
            self.error(
                "KC206",
                "no catalog settings file (kcatalog.yaml) among the paths; it declares the known "
                "backends, their priority and the policy",
                None,
            )
            return
        first = found[0]
        for extra in found[1:]:
            self.error(
                "KC206",
                f"second catalog settings file; the first is {first.path}",
                node_location(extra.path, extra.parsed.root),
            )
        settings = first.model
        assert isinstance(settings, Settings)
        self.settings = settings
        self.known = tuple(settings.backends)
        entries = children(first.parsed.root)
        self.check_names(settings.priority, first, ("priority",), "priority list")
        for device, order in settings.platform_priority.items():
            self.check_names(order, first, ("platform_priority", device), f"{device} priority list")
        policy_node = entries.get("policy", (None, None))[1]
        self.check_names(settings.policy.required_backends, first, ("policy", "required_backends"), "policy")
        platforms_node = children(policy_node).get("required_platforms", (None, None))[1]
        for index, text in enumerate(settings.policy.required_platforms):
            try:
                Platform.parse(text)
            except ValueError as exc:
                item = platforms_node.value[index] if platforms_node is not None else None
                self.error("KC103", str(exc), node_location(first.path, item))

    def check_names(
        self,
        names: Sequence[str],
        file: LoadedFile,
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
            self.error("KC203", message, node_location(file.path, item))

    # -- ops ------------------------------------------------------------------------------------

    def link_ops(self) -> None:
        manifests = [f for f in self.files if isinstance(f.model, Manifest)]
        orders: list[tuple[LoadedFile, str, str, Op]] = []
        for file in manifests:
            manifest = file.model
            assert isinstance(manifest, Manifest)
            op_nodes = children(children(file.parsed.root).get("ops", (None, None))[1])
            for name, op in manifest.ops.items():
                key_node, value_node = op_nodes[name]
                op_id = f"{manifest.group}.{name}"
                location = node_location(file.path, key_node)
                specs = self.backend_specs(file, op_id, op.dtypes, op.backends, value_node)
                if op.reference not in op.backends:
                    ref_node = children(value_node)["reference"][1]
                    self.error(
                        "KC204",
                        f"reference backend '{op.reference}' is not a backend of op '{op_id}'"
                        f"{did_you_mean(op.reference, op.backends)}; its backends: {', '.join(op.backends)}",
                        node_location(file.path, ref_node),
                    )
                self.check_arguments(file, op_id, op, value_node)
                self.check_tolerance(file, op_id, op, value_node)
                if op.samples is not None:
                    self.check_samples(file, op_id, op, value_node)
                if op_id in self.ops:
                    self.error("KC201", f"op '{op_id}' already declared at {self.ops[op_id].location}", location)
                    continue
                orders.append((file, name, op_id, op))
                self.backends[op_id] = specs
                self.ops[op_id] = OpInfo(
                    id=op_id,
                    group=manifest.group,
                    description=op.description,
                    signature=op.signature,
                    reference=op.reference,
                    dtypes=op.dtypes,
                    mutates=op.mutates,
                    tolerance=MappingProxyType(dict(op.tolerance)),
                    priority=op.priority,
                    platform_priority=MappingProxyType(dict(op.platform_priority)),
                    dispatch_arg=op.dispatch_arg,
                    samples_data=None if op.samples is None else op.samples.model_dump(mode="json"),
                    location=location,
                    backends=MappingProxyType(specs),
                )
        for file in manifests:
            self.link_extensions(file)
        for file, name, op_id, op in orders:  # after extensions, which may add the backends an order names
            backends = list(self.backends[op_id])
            if op.priority is not None:
                self.check_names(
                    op.priority, file, ("ops", name, "priority"), f"priority of op '{op_id}'", allowed=backends
                )
            for device, order in op.platform_priority.items():
                self.check_names(
                    order,
                    file,
                    ("ops", name, "platform_priority", device),
                    f"{device} priority of op '{op_id}'",
                    allowed=backends,
                )

    def check_samples(self, file: LoadedFile, op_id: str, op: Op, op_node: yaml.Node) -> None:
        """Samples must fit the signature, use defined sizes and compare real outputs."""
        assert op.samples is not None
        try:
            problems = list(sample_problems(op_id, op.signature, op.mutates, op.samples))
        except ValueError:
            return  # an invalid signature is reported by check_arguments
        for code, message, path in problems:
            self.error(code, message, node_location(file.path, find_node(op_node, ["samples", *path], key=True)))

    def check_tolerance(self, file: LoadedFile, op_id: str, op: Op, op_node: object) -> None:
        """Tolerances may only be given for dtypes the op declares."""
        extra = [dtype for dtype in op.tolerance if dtype not in op.dtypes]
        if extra:
            key_node = children(children(op_node)["tolerance"][1])[extra[0]][0]
            self.error(
                "KC207",
                f"tolerance of op '{op_id}' lists {', '.join(extra)}, not among the op's dtypes "
                f"({', '.join(op.dtypes)})",
                node_location(file.path, key_node),
            )

    def check_arguments(self, file: LoadedFile, op_id: str, op: Op, op_node: object) -> None:
        """The signature must parse; names in `mutates` and `dispatch_arg` must be its parameters."""
        entries = children(op_node)
        try:
            params = signature_params(op.signature)
        except ValueError as exc:
            self.error("KC103", f"'signature': {exc}", node_location(file.path, entries["signature"][1]))
            return
        named = [("mutates", name) for name in op.mutates]
        if op.dispatch_arg:
            named.append(("dispatch_arg", op.dispatch_arg))
        for field, name in named:
            if name not in params:
                self.error(
                    "KC208",
                    f"{field} names '{name}', not a parameter of op '{op_id}'"
                    f"{did_you_mean(name, params)}; parameters: {', '.join(params)}",
                    node_location(file.path, entries[field][1]),
                )

    def link_extensions(self, file: LoadedFile) -> None:
        manifest = file.model
        assert isinstance(manifest, Manifest)
        ext_nodes = children(children(file.parsed.root).get("extends", (None, None))[1])
        for op_id, extension in manifest.extends.items():
            key_node, value_node = ext_nodes[op_id]
            info = self.ops.get(op_id)
            if info is None:
                self.error(
                    "KC205",
                    f"extends op '{op_id}', which no manifest declares{did_you_mean(op_id, self.ops)}",
                    node_location(file.path, key_node),
                )
                continue
            added = self.backend_specs(file, op_id, info.dtypes, extension.backends, value_node)
            specs = self.backends[op_id]
            for name, spec in added.items():
                if name in specs:
                    self.error(
                        "KC202",
                        f"backend '{name}' of op '{op_id}' already declared at {specs[name].location}",
                        spec.location,
                    )
                else:
                    specs[name] = spec  # the OpInfo's mapping proxy views this dict

    def backend_specs(
        self, file: LoadedFile, op_id: str, op_dtypes: tuple[str, ...], backends: Mapping[str, Backend], op_node: object
    ) -> dict[str, KernelSpec]:
        specs: dict[str, KernelSpec] = {}
        backend_nodes = children(children(op_node).get("backends", (None, None))[1])
        for name, backend in backends.items():
            key_node, value_node = backend_nodes[name]
            location = node_location(file.path, key_node)
            if self.settings is not None and name not in self.known:
                self.error(
                    "KC203",
                    f"unknown backend '{name}' in op '{op_id}'{did_you_mean(name, self.known)}; "
                    f"known: {', '.join(self.known)}",
                    location,
                )
            extra = [d for d in backend.dtypes or () if d not in op_dtypes]
            if extra:
                dtypes_node = children(value_node)["dtypes"][1]
                self.error(
                    "KC207",
                    f"backend '{name}' of op '{op_id}' lists {', '.join(extra)}, not among the op's "
                    f"dtypes ({', '.join(op_dtypes)})",
                    node_location(file.path, dtypes_node),
                )
            specs[name] = KernelSpec(
                op=op_id,
                backend=name,
                target=backend.target,
                requires=backend.requires,
                capabilities=tuple(Capability(c.device, c.min_arch, c.max_arch, c.archs) for c in backend.capabilities),
                dtypes=backend.dtypes or op_dtypes,
                location=location,
            )
            self.declared.append((specs[name], node_location(file.path, children(value_node)["target"][1])))
        return specs

    # -- whole-catalog checks ----------------------------------------------------------------------

    def check_policy(self) -> None:
        if self.settings is None:
            return
        policy = self.settings.policy
        platforms = []
        for text in policy.required_platforms:
            try:
                platforms.append(Platform.parse(text))
            except ValueError:
                pass  # reported with the settings
        for op_id, info in self.ops.items():
            specs = self.backends[op_id]
            missing = [b for b in policy.required_backends if b in self.known and b not in specs]
            if missing:
                self.error(
                    "KC401",
                    f"op '{op_id}' lacks the {', '.join(missing)} backend the policy requires; "
                    f"it has {', '.join(specs)}",
                    info.location,
                )
            for platform in platforms:
                reasons = {name: platform.mismatch(spec.capabilities) for name, spec in specs.items()}
                if all(reasons.values()):
                    detail = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
                    self.error(
                        "KC402",
                        f"op '{op_id}' has no backend for required platform {platform} ({detail})",
                        info.location,
                    )


def link_files(files: Sequence[LoadedFile], settings_found: bool = False) -> tuple[Linked, list[Diagnostic]]:
    """Link validated files; the result is complete only when no diagnostic is an error."""
    linker = _Linker(files, settings_found)
    linker.link_settings()
    linker.link_ops()
    linker.check_policy()
    settings = None if linker.settings is None else linker.settings.model_dump(mode="json")
    return Linked(settings, linker.ops, linker.declared), linker.diagnostics
