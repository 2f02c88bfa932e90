"""What the finder reports: a module's kind and Location, or where its search stopped (Located)."""

from __future__ import annotations

from dataclasses import dataclass

# What a located module is.
SOURCE = "source"  # Python source: a module file or a regular package's __init__.py
NAMESPACE = "namespace"  # a PEP 420 namespace package: only submodules
EXTENSION = "extension"  # a compiled extension module (.so, .pyd)
BYTECODE = "bytecode"  # a sourceless .pyc
BUILTIN = "built-in"
FROZEN = "frozen"  # frozen into the interpreter; read from its source file where that is known
HOOKED = "hooked"  # provided by a third-party import hook: nothing to read
RUNTIME = "run time"  # only in sys.modules (a proxy object, or a module made at run time): nothing to read


@dataclass(frozen=True)
class Location:
    """Where a module is: what kind of module, its file, and (for packages) where its submodules are."""

    name: str
    kind: str  # SOURCE, NAMESPACE, EXTENSION, BYTECODE, BUILTIN, FROZEN, HOOKED or RUNTIME
    origin: str | None = None  # the file; inside a zip archive, "<archive>/<member>"
    search: tuple[str, ...] | None = None  # a package's submodule search locations; None for a plain module
    via: str | None = None  # HOOKED: the hook's class; RUNTIME: what is there; else the module it aliases
    archive: str | None = None  # the zip archive holding the file, if any


@dataclass(frozen=True)
class Located:
    """A module's location, or where the search stopped and why."""

    location: Location | None
    failed_at: int | None = None  # index of the first dotted part not found, or that is a module, not a package
    search: tuple[str, ...] | None = None  # the search locations of the last package found
    hooks: tuple[str, ...] = ()  # not found: third-party import hooks that might provide it
