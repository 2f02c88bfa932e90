"""Fixtures for the hardening tests: throwaway catalogs, throwaway kernel modules, a clean override environment."""

from __future__ import annotations

import importlib
import shutil
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcatalog.check.overrides import ENV_BACKEND, ENV_OVERRIDES

MINIMAL = Path(__file__).resolve().parents[1] / "corpus" / "clean_minimal"


@pytest.fixture(autouse=True)
def _no_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's KCATALOG_OVERRIDES or KCATALOG_BACKEND must not change what these tests see."""
    monkeypatch.delenv(ENV_OVERRIDES, raising=False)
    monkeypatch.delenv(ENV_BACKEND, raising=False)


class Catalogs:
    """Writes throwaway catalog directories under one root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def op(
        backends: Mapping[str, str | Mapping[str, Any]],
        *,
        signature: str = "(x: Tensor) -> Tensor",
        dtypes: Sequence[str] = ("float32",),
        reference: str | None = None,
    ) -> dict[str, Any]:
        """An op declaration; a backend given as a plain string is just its target."""
        return {
            "description": "a throwaway op",
            "signature": signature,
            "reference": reference or next(iter(backends)),
            "dtypes": list(dtypes),
            "backends": {
                name: {"target": spec} if isinstance(spec, str) else dict(spec) for name, spec in backends.items()
            },
        }

    def write(
        self,
        name: str,
        ops: Mapping[str, Mapping[str, Any]],
        *,
        backends: Sequence[str],
        priority: Sequence[str] | None = None,
        group: str = "g",
    ) -> Path:
        """A directory `name` holding kcatalog.yaml and one manifest `<group>.yaml`."""
        directory = self.root / name
        directory.mkdir(parents=True)
        settings = {
            "kcatalog": 1,
            "backends": {backend: {"description": f"backend {backend}"} for backend in backends},
            "priority": list(backends if priority is None else priority),
        }
        manifest = {"kcatalog": 1, "group": group, "ops": dict(ops)}
        (directory / "kcatalog.yaml").write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
        (directory / f"{group}.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
        return directory

    def minimal(self, name: str, *, with_manifest: bool = True) -> Path:
        """A directory `name` holding the corpus's clean_minimal catalog (op norm.rms_norm, backend torch)."""
        directory = self.root / name
        directory.mkdir(parents=True)
        shutil.copyfile(MINIMAL / "kcatalog.yaml", directory / "kcatalog.yaml")
        if with_manifest:
            shutil.copyfile(MINIMAL / "norm.yaml", directory / "norm.yaml")
        return directory


@pytest.fixture
def catalogs(tmp_path: Path) -> Catalogs:
    """Throwaway catalog directories under tmp_path."""
    return Catalogs(tmp_path)


class Modules:
    """Throwaway modules and packages in a directory on sys.path; forgotten by sys.modules afterwards."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.names: list[str] = []

    def module(self, name: str, source: str) -> str:
        """Write `<name>.py`; returns its name."""
        (self.root / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        return self._added(name)

    def package(self, name: str, files: Mapping[str, str]) -> str:
        """Write `<name>/<file>.py` for each entry ('__init__' included); returns the package name."""
        package = self.root / name
        package.mkdir()
        for stem, source in files.items():
            (package / f"{stem}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        return self._added(name)

    def _added(self, name: str) -> str:
        importlib.invalidate_caches()  # the path finder caches directory listings
        self.names.append(name)
        return name

    def forget(self) -> None:
        """Drop every written module, and any submodule of it, from sys.modules."""
        for loaded in list(sys.modules):
            if loaded.partition(".")[0] in self.names:
                del sys.modules[loaded]


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Modules]:
    """Write throwaway kernel modules (check-jsonschema's mock_module style)."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    written = Modules(root)
    yield written
    written.forget()
