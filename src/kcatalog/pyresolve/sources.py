"""What a kernel's timings depend on in source: its target's module and the modules of the same top-level package
that it imports, transitively (`import` and `from ... import` anywhere in the text, relative ones resolved), each
located and read as the finder does, never imported; one digest over them, the one a tuned table records.

Import statements are found in the text and parsed one by one: parsing a whole kernel module costs milliseconds,
and a module's imports are all a digest needs. A match inside a string at worst adds a module of the package to
the digest. A package's `__init__` counts where a name is imported from it, not where only its submodules are
(`from .. import tracing`): importing a submodule runs it, but what a kernel times is in the modules it names.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from .finder import Finder
from .fingerprints import Fingerprint, digest, fingerprint
from .parsing import parse

DIGEST_CHARS = 16  # of the hex blake2b: a table records one per backend, and 64 bits tell edits apart

# `import a.b, c` or `from .x import (y, z)` at the start of a line, parentheses spanning lines.
_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+[.\w]+[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)|import[ \t]+[^\n]*)", re.MULTILINE
)


@dataclass(frozen=True)
class KernelSource:
    """A target's source digest (None: its module has no source to read here: not found, compiled, unreadable),
    and every module read for it, with its fingerprint, for a later load to check unchanged."""

    target: str
    digest: str | None
    modules: tuple[tuple[str, Fingerprint], ...]


def kernel_sources(targets: Iterable[str]) -> list[KernelSource]:
    """The source digest of each target, one finder locating the modules of them all."""
    finder = Finder()
    return [kernel_source(target, finder) for target in targets]


def kernel_source(target: str, finder: Finder | None = None) -> KernelSource:
    """The source digest of `target` ('package.module:attr'): over the target's text and the exact bytes of its
    module and of each module of its top-level package it imports; `finder` shares what it saw between targets."""
    finder = finder or Finder()
    module = target.partition(":")[0]
    top = module.partition(".")[0]
    read: dict[str, bytes] = {}
    modules: list[tuple[str, Fingerprint]] = []
    queue, queued = [module], {module}
    while queue:
        name = queue.pop()
        located = finder.locate(name)
        if located.location is None:  # only the target's own module is looked for without being known to exist
            modules.append((name, fingerprint(located, None)))
            continue
        source = finder.read_source(located.location)
        modules.append((name, fingerprint(located, source)))
        if not isinstance(source, bytes):
            continue
        read[name] = source
        package = name if located.location.search is not None else name.rpartition(".")[0]
        for imported in imported_modules(source, package, lambda n: n.partition(".")[0] == top, finder):
            if imported not in queued:
                queued.add(imported)
                queue.append(imported)
    if module not in read:
        return KernelSource(target, None, tuple(sorted(modules)))
    parts = repr([target, sorted((name, digest(text)) for name, text in read.items())])
    return KernelSource(target, digest(parts.encode())[:DIGEST_CHARS], tuple(sorted(modules)))


def imported_modules(source: bytes, package: str, wanted: Callable[[str], bool], finder: Finder) -> Iterator[str]:
    """The modules the import statements of `source` import (relative ones from `package`) that are `wanted` and
    exist: each `import a.b`; for `from m import n, ...`, each `m.n` that is a submodule, and `m` itself unless
    every name is one (`from . import tracing` times `tracing`, not the package's `__init__`)."""
    for match in _IMPORT.finditer(source):
        try:
            tree = parse(match.group(0).strip())
        except (SyntaxError, ValueError):  # a match inside a string, or a continued line: not a statement
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names if wanted(alias.name) and _exists(alias.name, finder))
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node.module, node.level, package)
                if base is None or not wanted(base):
                    continue
                names = [alias.name for alias in node.names]
                submodules = [f"{base}.{name}" for name in names if name != "*" and _exists(f"{base}.{name}", finder)]
                yield from submodules
                if len(submodules) < len(names) and _exists(base, finder):
                    yield base


def _exists(name: str, finder: Finder) -> bool:
    return finder.locate(name).location is not None


def _absolute(module: str | None, level: int, package: str) -> str | None:
    """The absolute name of `from <level dots><module> import ...` in `package`, or None above the top."""
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)
