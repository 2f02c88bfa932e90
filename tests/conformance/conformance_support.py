"""Helpers for the conformance tests: `main` captured, throwaway catalogs and kernel modules, child processes."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from kcatalog.check.overrides import ENV_BACKEND, ENV_OVERRIDES
from kcatalog.tools.cli import main


class Run(NamedTuple):
    """What one `main([...])` call returned and printed."""

    code: int
    out: str
    err: str


def run_cli(*argv: str | os.PathLike[str]) -> Run:
    """`kcatalog ARGV` in this process, its output captured; usable from fixtures of any scope."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([os.fspath(arg) for arg in argv])
    return Run(code, out.getvalue(), err.getvalue())


class Workspace:
    """A directory holding one catalog (`catalog/`) and throwaway kernel modules (`site/`, on sys.path)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.catalog_dir = root / "catalog"
        self.modules_dir = root / "site"
        self.catalog_dir.mkdir(parents=True)
        self.modules_dir.mkdir(parents=True)
        self.module_names: list[str] = []

    def module(self, name: str, source: str) -> str:
        """Write `<name>.py` under site/; returns its name. Dropped from sys.modules at teardown."""
        (self.modules_dir / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        importlib.invalidate_caches()  # the path finder caches directory listings
        self.module_names.append(name)
        return name

    def write(self, ops: Mapping[str, Mapping[str, Any]], *, backends: Sequence[str], group: str = "t") -> Path:
        """kcatalog.yaml (these backends, in this priority) and one manifest `<group>.yaml`; returns catalog/."""
        settings = {
            "kcatalog": 1,
            "backends": {name: {"description": f"backend {name}"} for name in backends},
            "priority": list(backends),
        }
        manifest = {"kcatalog": 1, "group": group, "ops": dict(ops)}
        (self.catalog_dir / "kcatalog.yaml").write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
        (self.catalog_dir / f"{group}.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
        return self.catalog_dir

    def forget(self) -> None:
        """Drop the written modules from sys.modules, so a later module of the same name is read afresh."""
        for name in self.module_names:
            sys.modules.pop(name, None)


@contextlib.contextmanager
def workspace_at(root: Path) -> Iterator[Workspace]:
    """A Workspace under `root`, its site/ on sys.path meanwhile (for fixtures of any scope)."""
    written = Workspace(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(written.modules_dir))
        try:
            yield written
        finally:
            written.forget()


def declare_op(
    module: str,
    backends: Mapping[str, str],
    *,
    samples: Mapping[str, Any],
    signature: str = "(x: Tensor) -> Tensor",
    dtypes: Sequence[str] = ("float32",),
    reference: str = "torch",
    **extra: Any,
) -> dict[str, Any]:
    """An op whose backends are `module:function` by backend name; float32 tolerance 1e-5, as the shipped ops."""
    return {
        "description": "a throwaway op",
        "signature": signature,
        "reference": reference,
        "dtypes": list(dtypes),
        "tolerance": {dtype: 1.0e-5 for dtype in dtypes if dtype == "float32"},
        "samples": dict(samples),
        "backends": {name: {"target": f"{module}:{function}"} for name, function in backends.items()},
        **extra,
    }


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch ops on one CPU thread meanwhile.

    On a small shared machine, intra-op threads wait on each other and on other processes: a 2-core
    run of the shipped catalog takes half as long again, and CPU timings measure the scheduler.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def child_env(*first_on_path: Path) -> dict[str, str]:
    """Environment for a child Python: these directories first on PYTHONPATH, no outside pytest options."""
    dropped = (ENV_OVERRIDES, ENV_BACKEND, "PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, first_on_path), *filter(None, [env.get("PYTHONPATH")])])
    return env
