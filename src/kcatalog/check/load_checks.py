"""The checks that depend on this machine or the caller, so they run on every load, cached or not:
the allow-list, targets (statically, or imported with `import_targets`), `require=` and overrides."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import codes
from ..errors import Diagnostic, did_you_mean, listing, nearest
from ..model import Declared, LinkedCatalog, OverrideSet, Required, TargetChecks, TargetRole, is_under
from ..read.files import SETTINGS_FILE
from ..select.overrides import OverridesArg, check_overrides, process_overrides
from ..select.promises import process_required
from .layer_classes import unavailable_class

if TYPE_CHECKING:
    from ..pyresolve import Fingerprint, IndexStore

Require = Iterable[str] | Mapping[str, Sequence[str]]
_MAPPING_ROLES = frozenset({TargetRole.FORWARD, TargetRole.PREPARE})  # their owner is a layer mapping, not an op


@dataclass(frozen=True)
class LoadChecks:
    """What the per-load checks found, and what the Catalog and the cache need from them."""

    diagnostics: list[Diagnostic]
    overrides: list[OverrideSet]  # the process-wide override sets (KCATALOG_OVERRIDES, ...), strongest first
    # The static target checks when they were done afresh and found no error, for the cache to keep;
    # None when the known ones still held, or when they found errors (those are never kept).
    fresh_targets: TargetChecks | None
    # The promises every selection requires (KCATALOG_DETERMINISTIC, then load_catalog's), strongest source first.
    required: tuple[Required, ...] = ()


def check_linked(
    linked: LinkedCatalog,
    *,
    require: Require | None = None,
    check_targets: bool = True,
    overrides: OverridesArg = None,
    allowed_modules: Sequence[str] | None = None,
    import_targets: bool = False,
    known_targets: TargetChecks | None = None,
    current: Callable[[str], Fingerprint] | None = None,
    indexes: IndexStore | None = None,
    deterministic: bool = False,
    batch_invariant: bool = False,
) -> LoadChecks:
    """Run every per-load check on a linked catalog; `current(module)` gives a module's fingerprint now (default:
    pyresolve's current_fingerprint), to tell whether the known target checks still hold; `indexes`: where fresh
    target checks find the module indexes kept from earlier runs, and keep theirs (pyresolve's IndexStore)."""
    diagnostics: list[Diagnostic] = []
    lists = _AllowLists(linked, allowed_modules)
    refused = _check_allowed(linked, lists, diagnostics)
    fresh = None
    if check_targets or import_targets:
        wanted = [spec for spec in linked.declared if spec not in refused] if refused else list(linked.declared)
        fresh = _check_targets(linked, wanted, import_targets, known_targets, lists, diagnostics, current, indexes)
    if require is not None:
        _check_require(linked, require, diagnostics)
    sets = _check_overrides(linked, overrides, diagnostics)
    try:
        required = process_required(deterministic, batch_invariant)
    except ValueError as exc:
        diagnostics.append(Diagnostic(codes.DETERMINISTIC_MALFORMED, str(exc)))
        required = ()
    return LoadChecks(diagnostics, sets, fresh, required)


class _AllowLists:
    """(where it is given, prefixes) for each allow-list that applies to a spec: its own layer's settings file's
    list (each layer's governs the targets declared in that layer's files), and the caller's."""

    def __init__(self, linked: LinkedCatalog, allowed_modules: Sequence[str] | None) -> None:
        self.caller = None if allowed_modules is None else tuple(allowed_modules)
        self.layered = len({spec.layer for spec in linked.declared}) > 1

    def __call__(self, spec: Declared) -> list[tuple[str, tuple[str, ...]]]:
        where = f"{SETTINGS_FILE} allowed_modules" + (f" of layer '{spec.layer}'" if self.layered else "")
        lists = [(where, prefixes) for prefixes in spec.allowed_modules]
        return lists + ([("allowed_modules", self.caller)] if self.caller is not None else [])


def _check_allowed(linked: LinkedCatalog, lists: _AllowLists, out: list[Diagnostic]) -> set[Declared]:
    """Every target must sit under an allowed prefix of its layer's settings file and of the caller, when given.

    Returns the targets refused, whose modules are then never looked for."""
    refused: set[Declared] = set()
    for spec in linked.declared:
        for source, prefixes in lists(spec):
            if not is_under(spec.target.module, prefixes):
                refused.add(spec)
                out.append(
                    Diagnostic(
                        codes.TARGET_NOT_ALLOWED,
                        f"target '{spec.target}' is outside the allowed modules ({source}: "
                        f"{', '.join(prefixes) or 'none'}){_allowed_spelling(spec, prefixes)}",
                        spec.target_location,
                    )
                )
    return refused


def _allowed_spelling(spec: Declared, prefixes: tuple[str, ...]) -> str:
    """' (did you mean 'x'?)' for the target spelt under an allowed prefix, where its module's leading names
    misspell the prefix's, one by one ('kcatalg.kernels.torch' for 'kcatalog.kernels'), else ''."""
    parts = spec.target.module.split(".")
    for prefix in prefixes:
        names = prefix.split(".")
        if len(parts) >= len(names) and all(a == b or nearest(a, [b], typo=True) for a, b in zip(parts, names)):
            rest = "".join(f".{part}" for part in parts[len(names) :])
            return f" (did you mean '{prefix}{rest}:{spec.target.attr}'?)"
    return ""


def _check_targets(
    linked: LinkedCatalog,
    wanted: list[Declared],
    import_targets: bool,
    known: TargetChecks | None,
    allow_lists: _AllowLists,
    out: list[Diagnostic],
    current: Callable[[str], Fingerprint] | None,
    indexes: IndexStore | None,
) -> TargetChecks | None:
    classes = [layer_class for mapping in linked.layer_mappings for layer_class in mapping.classes]
    targets = [*(str(spec.target) for spec in wanted), *(str(layer_class.target) for layer_class in classes)]
    checks = _still_valid(known, targets, current) if not import_targets else None
    fresh = None
    if checks is None:
        from ..pyresolve import TargetChecker  # reads module sources with ast: only fresh checks need it

        checker = TargetChecker(indexes)
        problems: dict[str, Diagnostic | None] = {}
        for target in targets:
            if target not in problems:
                problems[target] = checker.check(target)
        defined_in = {
            target: checker.defining_module(target) for target, problem in problems.items() if problem is None
        }
        imported_from = {
            target: checker.resolve(target).imported_from
            for target, problem in problems.items()
            if problem is not None and not problem.is_error and checker.resolve(target).imported_from
        }
        non_classes = {}
        for layer_class in classes:
            what = checker.resolve(str(layer_class.target)).non_class
            if what is not None:
                non_classes[str(layer_class.target)] = what
        checks = TargetChecks(problems, checker.fingerprints(), defined_in, imported_from, non_classes)
        if not any(problem is not None and problem.is_error for problem in problems.values()):
            fresh = checks
    for spec in wanted:
        problem = checks.problems[str(spec.target)]
        if problem is None or not problem.is_error:  # resolved, or not verifiable: where it comes from is checked
            problem = _defined_outside(spec, checks, allow_lists) or problem
        if import_targets and (problem is None or not problem.is_error):
            # The deeper check imports what the static one could not verify (KC304) or found unavailable
            # (KC303) too; what importing finds replaces that warning.
            from .imports import import_problems  # runs kernel modules' code: only when asked

            info = linked.ops.get(spec.owner) if spec.role not in _MAPPING_ROLES else None
            declared = None if info is None or info.parameters is None else info.parameters.names
            out.extend(dataclasses.replace(p, location=spec.target_location) for p in import_problems(spec, declared))
        elif problem is not None:
            out.append(dataclasses.replace(problem, location=spec.target_location))
    absent: dict[str, bool] = {}  # top-level package -> not installed here
    for layer_class in classes:  # checked statically only: kcatalog never imports a layer class
        target = str(layer_class.target)
        problem = checks.problems[target]
        if problem is not None and not unavailable_class(target, problem, absent):
            out.append(dataclasses.replace(problem, location=layer_class.location))
        elif problem is None and target in checks.non_classes:  # no model holds one: it would never apply
            message = (
                f"layer class '{target}' names {checks.non_classes[target]}, not a class; the mapping never applies"
            )
            out.append(Diagnostic(codes.LAYER_CLASS_NOT_A_CLASS, message, layer_class.location))
    return fresh


def _defined_outside(spec: Declared, checks: TargetChecks, allow_lists: _AllowLists) -> Diagnostic | None:
    """KC305 for a target whose object is defined outside an allow-list (a re-export of foreign code): importing
    it would be refused, so validating it is too. Where the sources stop short of its definition, the modules it
    was imported from on the way are what is known of where it comes from: one outside a list is KC305 too."""
    target = str(spec.target)
    module = checks.defined_in.get(target)
    modules = (module,) if module is not None else checks.imported_from.get(target, ())
    for via in modules:
        for source, prefixes in allow_lists(spec):
            if not is_under(via, prefixes):
                what = "defined in" if module is not None else "imported from"
                unknown = "" if module is not None else "; where it is defined is not verifiable statically"
                return Diagnostic(
                    codes.TARGET_NOT_ALLOWED,
                    f"target '{spec.target}' names an object {what} module '{via}', outside the allowed "
                    f"modules ({source}: {', '.join(prefixes) or 'none'}){unknown}",
                )
    return None


def _still_valid(
    known: TargetChecks | None, targets: list[str], current: Callable[[str], Fingerprint] | None
) -> TargetChecks | None:
    """The known checks, if they cover every wanted target and no module they read has changed."""
    if known is None or any(target not in known.problems for target in targets):
        return None
    if current is None:
        from ..pyresolve import current_fingerprint

        current = current_fingerprint
    if any(current(module.module) != module.found for module in known.modules):
        return None
    return known


def _check_require(linked: LinkedCatalog, require: Require, out: list[Diagnostic]) -> None:
    wanted = require.items() if isinstance(require, Mapping) else ((op, ()) for op in require)
    for op_id, backends in wanted:
        info = linked.ops.get(op_id)
        if info is None and linked.broken.covers(op_id):
            continue  # declared, with errors reported where it is
        if info is None:
            out.append(
                Diagnostic(
                    codes.REQUIRED_OP_MISSING,
                    f"required op '{op_id}' is not in the catalog{did_you_mean(op_id, linked.ops)}; "
                    f"available: {listing(linked.ops)}",
                )
            )
            continue
        for backend in [backends] if isinstance(backends, str) else backends:
            if backend not in info.backends:
                out.append(
                    Diagnostic(
                        codes.REQUIRED_BACKEND_MISSING,
                        f"required backend '{backend}' of op '{op_id}' is not declared; "
                        f"it has {', '.join(info.backends)}",
                        info.location,
                    )
                )


def _check_overrides(linked: LinkedCatalog, overrides: OverridesArg, out: list[Diagnostic]) -> list[OverrideSet]:
    try:
        sets = process_overrides(overrides)
    except ValueError as exc:
        out.append(Diagnostic(codes.OVERRIDE_MALFORMED, str(exc)))
        return []
    names = [*linked.ops, *linked.broken.ops]  # an op left out for its errors is no op an override misses
    for found in sets:
        out.extend(check_overrides(found, names, linked.known))
    return sets
