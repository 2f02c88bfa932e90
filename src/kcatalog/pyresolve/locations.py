"""What the finder reports: a module's ModuleLocation (its kind is one of kinds.py), or where its search stopped
(Located)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModuleLocation:
    """Where a module is: what kind of module, its file, and (for packages) where its submodules are."""

    name: str
    kind: str  # kinds.SOURCE, NAMESPACE, EXTENSION, BYTECODE, BUILTIN, FROZEN, HOOKED or RUNTIME
    origin: str | None = None  # the file; inside a zip archive, "<archive>/<member>"
    search: tuple[str, ...] | None = None  # a package's submodule search locations; None for a plain module
    via: str | None = None  # HOOKED: the hook's class; RUNTIME: what is there; else the module it aliases
    archive: str | None = None  # the zip archive holding the file, if any


@dataclass(frozen=True)
class Located:
    """A module's location, or where the search stopped and why."""

    location: ModuleLocation | None
    failed_at: int | None = None  # index of the first dotted part not found, or that is a module, not a package
    search: tuple[str, ...] | None = None  # the search locations of the last package found
    hooks: tuple[str, ...] = ()  # not found: third-party import hooks that might provide it
