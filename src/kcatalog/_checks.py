"""Checks of linked data that depend on this machine or the caller, so they run on every load, cached or not:
the allow-list, targets (statically, or imported with `import_targets`), `require=` and overrides."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._files import SETTINGS_FILE
from ._linked import Linked
from ._overrides import Layer, OverridesArg, check_layer, process_layers
from .errors import Diagnostic, Severity, did_you_mean, listing

Require = Iterable[str] | Mapping[str, Sequence[str]]
# Static target checks as the cache keeps them: the modules read, each with its fingerprint, and per target
# None (it resolves) or (code, message), a warning (KC303, KC304): results with errors are never kept.
TargetRecord = tuple[tuple[tuple[str, tuple[Any, ...]], ...], dict[str, Any]]
_WARNINGS = ("KC303", "KC304")


def check_linked(
    linked: Linked,
    *,
    require: Require | None = None,
    check_targets: bool = True,
    overrides: OverridesArg = None,
    allowed_modules: Sequence[str] | None = None,
    import_targets: bool = False,
    known_targets: TargetRecord | None = None,
) -> tuple[list[Diagnostic], list[Layer], TargetRecord | None]:
    """The diagnostics of these checks, the override layers (KCATALOG_OVERRIDES, ...) for the Catalog, and
    the target checks done afresh when they found no error (None when `known_targets` still held)."""
    diagnostics: list[Diagnostic] = []
    refused = _check_allowed(linked, allowed_modules, diagnostics)
    fresh = None
    if check_targets or import_targets:
        fresh = _check_targets(linked, refused, import_targets, known_targets, diagnostics)
    if require is not None:
        _check_require(linked, require, diagnostics)
    return diagnostics, _check_overrides(linked, overrides, diagnostics), fresh


def _check_allowed(linked: Linked, allowed_modules: Sequence[str] | None, out: list[Diagnostic]) -> set[int]:
    """Every target must sit under an allowed prefix of the settings file and of the caller, when given.

    Returns the ids of the specs refused, whose modules are then never looked for."""
    refused: set[int] = set()
    lists = [
        (f"{SETTINGS_FILE} allowed_modules", linked.settings.get("allowed_modules") if linked.settings else None),
        ("allowed_modules", allowed_modules),
    ]
    for source, prefixes in lists:
        if prefixes is None:
            continue
        for spec, location in linked.declared:
            module = spec.target.partition(":")[0]
            if not any(module == p or module.startswith(p + ".") for p in prefixes):
                refused.add(id(spec))
                out.append(
                    Diagnostic(
                        "KC305",
                        f"target '{spec.target}' is outside the allowed modules ({source}: "
                        f"{', '.join(prefixes) or 'none'})",
                        location,
                    )
                )
    return refused


def _check_targets(
    linked: Linked, refused: set[int], import_targets: bool, known: TargetRecord | None, out: list[Diagnostic]
) -> TargetRecord | None:
    wanted = [(spec, location) for spec, location in linked.declared if id(spec) not in refused]
    results = _still_valid(known, wanted) if not import_targets else None
    fresh = None
    if results is None:
        from ._targets import TargetChecker  # reads module sources with ast: only fresh checks need it

        checker = TargetChecker()
        results = {}
        for spec, _ in wanted:
            if spec.target not in results:
                problem = checker.check(spec.target)
                results[spec.target] = None if problem is None else (problem.code, problem.message)
        if all(result is None or result[0] in _WARNINGS for result in results.values()):
            fresh = (checker.fingerprints(), results)
    if import_targets:
        from ._imports import import_problems
    for spec, location in wanted:
        result = results[spec.target]
        if result is None:
            if import_targets:
                signature = linked.ops[spec.op].signature
                out.extend(Diagnostic(code, message, location) for code, message in import_problems(spec, signature))
            continue
        code, message = result
        out.append(Diagnostic(code, message, location, Severity.WARNING if code in _WARNINGS else Severity.ERROR))
    return fresh


def _still_valid(known: TargetRecord | None, wanted: list[Any]) -> dict[str, Any] | None:
    """The known results, if they cover every wanted target and no module they read has changed."""
    if known is None:
        return None
    fingerprints, results = known
    if any(spec.target not in results for spec, _ in wanted):
        return None
    from ._modules import current_fingerprint

    if any(current_fingerprint(name) != found for name, found in fingerprints):
        return None
    return results


def _check_require(linked: Linked, require: Require, out: list[Diagnostic]) -> None:
    wanted = require.items() if isinstance(require, Mapping) else ((op, ()) for op in require)
    for op_id, backends in wanted:
        info = linked.ops.get(op_id)
        if info is None:
            out.append(
                Diagnostic(
                    "KC501",
                    f"required op '{op_id}' is not in the catalog"
                    f"{did_you_mean(op_id, linked.ops)}; available: {listing(linked.ops)}",
                )
            )
            continue
        for backend in [backends] if isinstance(backends, str) else backends:
            if backend not in info.backends:
                out.append(
                    Diagnostic(
                        "KC502",
                        f"required backend '{backend}' of op '{op_id}' is not declared; "
                        f"it has {', '.join(info.backends)}",
                        info.location,
                    )
                )


def _check_overrides(linked: Linked, overrides: OverridesArg, out: list[Diagnostic]) -> list[Layer]:
    try:
        layers = process_layers(overrides)
    except ValueError as exc:
        out.append(Diagnostic("KC603", str(exc)))
        return []
    for layer in layers:
        out.extend(Diagnostic(code, message) for code, message in check_layer(layer, list(linked.ops), linked.known))
    return layers
