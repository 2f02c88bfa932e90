"""Throwaway catalogs and kernel modules for the tests, and the environment of the child processes that use them.

One `Workspace` per test (the `workspace` fixture in tests/conftest.py), or per module or session through
`workspace_at`: catalogs are written into directories under its root (`catalog/` unless named otherwise),
kernel modules into `site/`, which is on sys.path while the workspace is open; afterwards every module
written is dropped from sys.modules, with its submodules (check-jsonschema's `mock_module`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

import kcatalog

# What a developer's shell may set that would change what the tests see: backend overrides, the cache turned
# off, more catalog layers. tests/conftest.py removes them for the session, child_env() for every child process.
SHELL_VARIABLES = (
    "KCATALOG_OVERRIDES",
    "KCATALOG_BACKEND",
    "KCATALOG_DETERMINISTIC",
    "KCATALOG_NO_CACHE",
    "KCATALOG_PATH",
)
CACHE_VARIABLE = "KCATALOG_CACHE_DIR"  # the session's private load cache (tests/conftest.py)
MINIMAL = Path(__file__).resolve().parent / "corpus" / "clean_minimal"  # op norm.rms_norm, backend torch

File = str | bytes | Mapping[str, Any]  # text, raw bytes, or a document written as YAML


class Workspace:
    """A directory holding throwaway catalogs (one directory each) and kernel modules (in `site/`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.catalog_dir = root / "catalog"  # where write(), files(), minimal() and load() go by default
        self.modules_dir = root / "site"
        self.modules_dir.mkdir(parents=True, exist_ok=True)  # before it goes on sys.path: finders cache misses
        self.module_names: list[str] = []

    # -- catalogs ------------------------------------------------------------------------------------------

    @staticmethod
    def op(
        backends: Mapping[str, Mapping[str, Any] | str],
        *,
        dtypes: Sequence[str] = ("float32",),
        signature: str = "(x: Tensor) -> Tensor",
        reference: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """An op declaration; a backend given as a plain string is just its target."""
        decl: dict[str, Any] = {
            "description": "a throwaway op",
            "signature": signature,
            "reference": reference or next(iter(backends)),
            "dtypes": list(dtypes),
            "backends": {
                name: {"target": spec} if isinstance(spec, str) else dict(spec) for name, spec in backends.items()
            },
        }
        decl.update(extra)
        return decl

    def write(
        self,
        ops: Mapping[str, Mapping[str, Any]],
        *,
        backends: Sequence[str],
        priority: Sequence[str] | None = None,
        platform_priority: Mapping[str, Sequence[str]] | None = None,
        group: str = "g",
        name: str = "catalog",
    ) -> Path:
        """kcatalog.yaml (these backends, by default in this priority) and one manifest `<group>.yaml`."""
        settings: dict[str, Any] = {
            "kcatalog": 1,
            "backends": {backend: {"description": f"backend {backend}"} for backend in backends},
            "priority": list(backends if priority is None else priority),
        }
        if platform_priority:
            settings["platform_priority"] = {device: list(order) for device, order in platform_priority.items()}
        manifest = {"kcatalog": 1, "group": group, "ops": dict(ops)}
        return self.files({"kcatalog.yaml": settings, f"{group}.yaml": manifest}, name=name)

    def files(self, files: Mapping[str, File], *, name: str = "catalog") -> Path:
        """Write each file (a path relative to the directory `name`) as given; returns the directory.

        Files already there stay, so a test can add to a catalog or replace one of its files.
        """
        directory = self.root / name
        directory.mkdir(parents=True, exist_ok=True)
        for relative, content in files.items():
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            elif isinstance(content, str):
                path.write_text(content, encoding="utf-8")
            else:
                path.write_text(yaml.safe_dump(dict(content), sort_keys=False), encoding="utf-8")
        return directory

    def minimal(self, name: str = "catalog", *, with_manifest: bool = True) -> Path:
        """The corpus's clean_minimal catalog (op norm.rms_norm, backend torch), or only its settings file."""
        names = ["kcatalog.yaml", "norm.yaml"] if with_manifest else ["kcatalog.yaml"]
        return self.files({file: (MINIMAL / file).read_bytes() for file in names}, name=name)

    def load(self, **options: Any) -> kcatalog.Catalog:
        """load_catalog() on the default catalog directory."""
        return kcatalog.load_catalog([self.catalog_dir], **options)

    # -- kernel modules ------------------------------------------------------------------------------------

    def module(self, name: str, source: str) -> str:
        """Write `site/<name>.py` (the source dedented); returns its name."""
        (self.modules_dir / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        return self._added(name)

    def package(self, name: str, files: Mapping[str, str]) -> str:
        """Write `site/<name>/<file>.py` for each entry ('__init__' included); returns the package name."""
        package = self.modules_dir / name
        package.mkdir()
        for stem, source in files.items():
            (package / f"{stem}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        return self._added(name)

    def named_functions(self, name: str, functions: Sequence[str]) -> str:
        """A module defining one function per name, each returning its own name."""
        return self.module(name, "".join(f"def {fn}(*args, **kwargs):\n    return {fn!r}\n\n\n" for fn in functions))

    def _added(self, name: str) -> str:
        importlib.invalidate_caches()  # the path finder caches directory listings
        self.module_names.append(name)
        return name

    def forget(self) -> None:
        """Drop every written module, and any submodule of it, from sys.modules."""
        for loaded in list(sys.modules):
            if loaded.partition(".")[0] in self.module_names:
                del sys.modules[loaded]

    def child_env(self) -> dict[str, str]:
        """The environment of a child Python that imports this workspace's modules (see child_env)."""
        return child_env(self.modules_dir)


@contextlib.contextmanager
def workspace_at(root: Path) -> Iterator[Workspace]:
    """A Workspace under `root`, its site/ on sys.path meanwhile; usable from fixtures of any scope."""
    workspace = Workspace(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(workspace.modules_dir))
        try:
            yield workspace
        finally:
            workspace.forget()


def child_env(*first_on_path: Path) -> dict[str, str]:
    """The environment of a child Python: this one less the developer's variables and outside pytest options,
    these directories first on PYTHONPATH. The session's private KCATALOG_CACHE_DIR is kept: a child never
    writes into the user's ~/.cache/kcatalog."""
    if CACHE_VARIABLE not in os.environ:
        raise RuntimeError(f"{CACHE_VARIABLE} is not set: tests/conftest.py gives every session a private one")
    dropped = (*SHELL_VARIABLES, "PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, first_on_path), *filter(None, [env.get("PYTHONPATH")])])
    return env
