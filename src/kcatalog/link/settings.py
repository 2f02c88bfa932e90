"""The catalog settings files linked: one per layer, merged (link/merged_settings.py) into the settings the ops are
checked against, with the device kinds and required platforms they name checked."""

from __future__ import annotations

from collections.abc import Sequence

from .. import codes
from ..platform import DEVICES, Platform
from ..validate.schema import Settings
from ..validate.validator import ValidatedFile
from .context import LinkContext
from .merged_settings import known_backends, merge_settings


def link_settings(context: LinkContext, files: Sequence[ValidatedFile], settings_found: bool) -> None:
    """Fill in `context`'s settings from the settings files among `files`; `settings_found`: a settings file was
    read, even if it failed the schema."""
    found = [f for f in files if isinstance(f.model, Settings)]
    if not found and settings_found:
        return  # the settings file's own diagnostics say what is wrong with it
    if not found:
        context.diagnostics.error(
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
            context.diagnostics.error(
                codes.SETTINGS_FILE,
                f"second catalog settings file; the first is {first.path}",
                extra.locations.value(()),
            )
    layer_files = [chosen[number] for number in sorted(chosen)]
    context.known = tuple(known_backends(layer_files, context.layers, context.diagnostics))
    merged = merge_settings(layer_files, context.layers, context.known, context.check_names, context.diagnostics)
    context.settings, context.layer_allow_lists = merged.settings, merged.allow_lists
    context.policies = merged.policies
    if not context.known:
        context.diagnostics.error(
            codes.SETTINGS_FILE,
            "no settings file among the layers declares a backend; at least one must declare the known "
            "backends, their priority and the policy",
            None,
        )
    context.devices = (*DEVICES, *(d for d in context.settings.devices if d not in DEVICES))
    for file in layer_files:
        assert isinstance(file.model, Settings)
        for device in file.model.platform_priority:
            context.check_device(device, file.locations.key(("platform_priority", device)))
        for key, policy in (("policy", file.model.policy), ("require_of_all", file.model.require_of_all)):
            for index, text in enumerate(policy.required_platforms):
                try:
                    Platform.parse(text, context.devices)
                except ValueError as exc:
                    where = file.locations.value((key, "required_platforms", index))
                    context.diagnostics.error(codes.INVALID_VALUE, str(exc), where)
