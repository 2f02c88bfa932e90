"""Fixtures for selection tests: throwaway catalogs and kernel modules written under tmp_path."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

import kcatalog
from kcatalog.check.overrides import ENV_BACKEND, ENV_OVERRIDES

GROUP = "g"


class Workspace:
    """A tmp_path holding one catalog directory and a directory of throwaway kernel modules on sys.path."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.catalog_dir = root / "catalog"
        self.modules_dir = root / "kernels"
        self.catalog_dir.mkdir()
        self.modules_dir.mkdir()
        self.module_names: list[str] = []
        monkeypatch.syspath_prepend(str(self.modules_dir))

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

    def module(self, name: str, source: str) -> str:
        """Write a throwaway module; it is dropped from sys.modules when the test ends."""
        (self.modules_dir / f"{name}.py").write_text(source, encoding="utf-8")
        self.module_names.append(name)
        importlib.invalidate_caches()  # the path finder caches directory listings
        return name

    def named_functions(self, name: str, functions: Sequence[str]) -> str:
        """A module defining one function per name, each returning its own name."""
        body = "".join(f"def {fn}(*args, **kwargs):\n    return {fn!r}\n\n\n" for fn in functions)
        return self.module(name, body)

    def write(
        self,
        ops: Mapping[str, Mapping[str, Any]],
        *,
        backends: Sequence[str],
        priority: Sequence[str] | None = None,
        platform_priority: Mapping[str, Sequence[str]] | None = None,
        group: str = GROUP,
    ) -> Path:
        """Write kcatalog.yaml and one manifest; returns the catalog directory."""
        settings: dict[str, Any] = {
            "kcatalog": 1,
            "backends": {name: {"description": f"backend {name}"} for name in backends},
            "priority": list(backends if priority is None else priority),
        }
        if platform_priority:
            settings["platform_priority"] = {device: list(order) for device, order in platform_priority.items()}
        manifest = {"kcatalog": 1, "group": group, "ops": dict(ops)}
        (self.catalog_dir / "kcatalog.yaml").write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
        (self.catalog_dir / f"{group}.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
        return self.catalog_dir

    def load(self, **kwargs: Any) -> kcatalog.Catalog:
        """load_catalog() on this workspace's catalog directory."""
        return kcatalog.load_catalog([self.catalog_dir], **kwargs)

    def cleanup(self) -> None:
        for name in self.module_names:
            sys.modules.pop(name, None)


@pytest.fixture(autouse=True)
def _no_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The override variables of the developer's shell must not leak into selection tests."""
    monkeypatch.delenv(ENV_OVERRIDES, raising=False)
    monkeypatch.delenv(ENV_BACKEND, raising=False)


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    """A throwaway catalog workspace (check-jsonschema's mock_module style for the kernel modules)."""
    workspace = Workspace(tmp_path, monkeypatch)
    yield workspace
    workspace.cleanup()
