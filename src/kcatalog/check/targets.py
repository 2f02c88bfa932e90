"""Static checks of 'module:attr' targets: find the module and read its source, never import it."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from typing import Any

from .. import codes
from ..errors import Diagnostic, Severity, did_you_mean, listing
from ..model import ModuleFingerprint
from ..read.python import parse
from .finder import Fingerprint, fingerprint, locate, read_source


def _problem(code: str, message: str) -> Diagnostic:
    """A target's problem, located later at each declaration of the target; KC303 and KC304 are warnings."""
    return Diagnostic(code, message, None, Severity.WARNING if code in codes.TARGET_WARNINGS else Severity.ERROR)


@dataclass
class _Scope:
    """Names a module or class body defines, as far as the source shows."""

    names: dict[str, ast.AST] = field(default_factory=dict)
    opaque: str | None = None  # why names may exist that the source does not show


@dataclass(frozen=True)
class _Module:
    spec: ModuleSpec | None
    fingerprint: Fingerprint
    missing: Diagnostic | None = None
    scope: _Scope | None = None


class TargetChecker:
    """Checks targets against module sources; each module is located and parsed once."""

    def __init__(self) -> None:
        self._modules: dict[str, _Module] = {}

    def fingerprints(self) -> tuple[ModuleFingerprint, ...]:
        """Every module looked at so far and what its checks depended on (see finder.fingerprint)."""
        return tuple(ModuleFingerprint(name, module.fingerprint) for name, module in self._modules.items())

    def check(self, target: str) -> Diagnostic | None:
        """None when the target resolves statically, else what is wrong with it."""
        module_name, _, attr_path = target.partition(":")
        module = self._module(module_name)
        if module.missing is not None:
            return module.missing
        attrs = attr_path.split(".")
        scope = module.scope
        if scope is None:  # extension or built-in module: nothing to read
            origin = module.spec.origin if module.spec else None
            return _problem(
                codes.TARGET_UNVERIFIABLE,
                f"target '{target}': module '{module_name}' is compiled ({origin}); not verifiable statically",
            )
        first = attrs[0]
        if first not in scope.names:
            if module.spec and module.spec.submodule_search_locations is not None:
                sub = self._module(f"{module_name}.{first}")
                if sub.missing is None:
                    return None
            if scope.opaque:
                return _problem(
                    codes.TARGET_UNVERIFIABLE,
                    f"target '{target}': '{first}' not found in the source of "
                    f"'{module_name}', which {scope.opaque}; not verifiable statically",
                )
            return _problem(
                codes.TARGET_ATTRIBUTE_MISSING,
                f"target '{target}': module '{module_name}' defines no '{first}'{did_you_mean(first, scope.names)}",
            )
        node = scope.names[first]
        for depth, attr in enumerate(attrs[1:], start=1):
            owner = ".".join(attrs[:depth])
            if not isinstance(node, ast.ClassDef):
                return _problem(
                    codes.TARGET_UNVERIFIABLE,
                    f"target '{target}': '{owner}' is not a class in the source; "
                    f"'{attr}' on it is not verifiable statically",
                )
            members = _collect(node.body)
            if attr not in members.names:
                return _problem(
                    codes.TARGET_ATTRIBUTE_MISSING,
                    f"target '{target}': class '{owner}' defines no '{attr}'{did_you_mean(attr, members.names)}",
                )
            node = members.names[attr]
        return None

    def _module(self, name: str) -> _Module:
        cached = self._modules.get(name)
        if cached is None:
            cached = self._modules[name] = _locate(name)
        return cached


def _locate(name: str) -> _Module:
    located = locate(name)
    spec, failed_at, search = located.spec, located.failed_at, located.search
    if spec is None:
        assert failed_at is not None  # a search that found nothing stopped somewhere
        parts = name.split(".")
        found = fingerprint(None, failed_at, None)
        if failed_at == 0:
            return _Module(
                None,
                found,
                _problem(
                    codes.TARGET_UNAVAILABLE,
                    f"module '{name}' unavailable here: top-level package '{parts[0]}' is not installed",
                ),
            )
        parent = ".".join(parts[:failed_at])
        if search is None:
            return _Module(
                None,
                found,
                _problem(
                    codes.TARGET_MODULE_NOT_FOUND, f"module '{name}' not found: '{parent}' is a module, not a package"
                ),
            )
        siblings = sorted(_submodules(search))
        return _Module(
            None,
            found,
            _problem(
                codes.TARGET_MODULE_NOT_FOUND,
                f"module '{name}' not found: package '{parent}' has no module '{parts[failed_at]}'"
                f"{did_you_mean(parts[failed_at], siblings)}; its modules: {listing(siblings)}",
            ),
        )
    source = read_source(spec)
    found = fingerprint(spec, None, source if isinstance(source, bytes) else None)
    scope = _read_scope(spec, source)
    if isinstance(scope, Diagnostic):
        return _Module(spec, found, scope)
    return _Module(spec, found, None, scope)


def _submodules(search: Any) -> list[str]:
    import pkgutil

    try:
        return [info.name for info in pkgutil.iter_modules(list(search or ()))]
    except OSError:
        return []


def _read_scope(spec: ModuleSpec, source: bytes | OSError | None) -> _Scope | Diagnostic | None:
    origin = spec.origin
    if origin is None or origin == "namespace":  # namespace package: only submodules
        return _Scope(opaque=None)
    if source is None:  # extension or built-in module: nothing to read
        return None
    if isinstance(source, OSError):
        return _Scope(opaque=f"cannot be read ({source.strerror or source})")
    try:
        tree = parse(source, filename=origin)
    except (SyntaxError, ValueError) as exc:  # importing it would certainly fail
        line = f", line {exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        return _problem(
            codes.TARGET_SYNTAX_ERROR,
            f"module '{spec.name}' cannot be imported: syntax error in {os.path.basename(origin)}{line}: {detail}",
        )
    except (RecursionError, MemoryError):  # so would compiling it, which uses the same parser
        return _problem(
            codes.TARGET_SYNTAX_ERROR,
            f"module '{spec.name}' cannot be imported: {os.path.basename(origin)} is too deeply nested to parse",
        )
    return _collect(tree.body)


def _collect(body: list[ast.stmt]) -> _Scope:
    """Names bound at this level: defs, classes, assignments, imports; descends into if/try/with blocks."""
    scope = _Scope()
    stack = list(reversed(body))
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope.names[stmt.name] = stmt
            if stmt.name == "__getattr__":
                scope.opaque = "defines __getattr__"
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        scope.names[node.id] = stmt
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name == "*":
                    scope.opaque = "uses 'import *'"
                else:
                    scope.names[alias.asname or alias.name.split(".")[0]] = stmt
        elif isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or type(stmt).__name__ == "TryStar":
            for block in ("body", "orelse", "finalbody"):
                stack.extend(reversed(getattr(stmt, block, []) or []))
            for handler in getattr(stmt, "handlers", []) or []:
                stack.extend(reversed(handler.body))
    return scope
