"""The catalog's policy checked across the linked ops: every op has the backends it requires and a backend that
serves each required platform (KC401, KC402)."""

from __future__ import annotations

from collections.abc import Mapping

from .. import codes
from ..model import OpInfo
from ..platform import Platform
from .context import LinkContext


def check_policy(context: LinkContext, ops: Mapping[str, OpInfo]) -> None:
    """Add an error for each op that lacks a required backend or serves no backend to a required platform."""
    if context.settings is None:
        return
    policy = context.settings.policy
    platforms = []
    for text in policy.required_platforms:
        try:
            platforms.append(Platform.parse(text, context.devices))
        except ValueError:
            pass  # reported with the settings
    for op_id, info in ops.items():
        specs = info.backends
        missing = [b for b in policy.required_backends if b in context.known and b not in specs]
        if missing:
            context.diagnostics.error(
                codes.POLICY_BACKEND_MISSING,
                f"op '{op_id}' lacks the {', '.join(missing)} backend the policy requires; it has {', '.join(specs)}",
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
                context.diagnostics.error(
                    codes.POLICY_PLATFORM_UNSERVED,
                    f"op '{op_id}' has no backend for required platform {platform} ({detail})",
                    info.location,
                )
