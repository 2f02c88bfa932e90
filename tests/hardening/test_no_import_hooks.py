"""No import hook is ever asked anything while a catalog is validated or loaded: an application's path hook (on
sys.path_hooks, its entry on sys.path) and a meta-path finder (on sys.meta_path) record every attribute kcatalog
reads of them, and `kcatalog validate`, a cold and a warm `load_catalog` of a catalog with a layers file, a gate
and a plugin layer (an installed distribution's entry point) leave both records empty.

Third-party hooks can run code when asked (an editable install's finder, a lazy loader), so kcatalog locates
modules (pyresolve/finder.py) and distributions (platform.py) from the file system alone. The same operations
run once first on a twin catalog of other names without the recorders, so that kcatalog's own lazy imports (its
modules, PyYAML, pydantic) are done and what is recorded can only be the catalog's doing."""

from __future__ import annotations

import importlib.abc
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

import kcatalog
from kcatalog import CacheOutcome
from kcatalog.tools.cli import main

Calls = list[tuple[str, str]]


class RecordingFinder(importlib.abc.MetaPathFinder, importlib.abc.PathEntryFinder):
    """A finder that records every attribute read of it (find_spec, find_distributions, invalidate_caches...)."""

    def __init__(self, calls: Calls, where: str) -> None:
        self.calls = calls
        self.where = where

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("__") and name not in ("calls", "where"):
            object.__getattribute__(self, "calls").append((object.__getattribute__(self, "where"), name))
        return object.__getattribute__(self, name)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        self.calls.append((self.where, f"find_spec({fullname!r})"))
        return None

    def find_distributions(self, context: Any = None) -> Iterator[Any]:
        return iter(())


@dataclass
class Recorders:
    """The path hook's entry (a directory on sys.path holding the application's modules) and what was recorded."""

    entry: Path
    calls: Calls = field(default_factory=list)


@pytest.fixture
def recorders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorders]:
    entry = tmp_path / "hooked"
    entry.mkdir()
    recorded = Recorders(entry)
    yield recorded
    sys.path_importer_cache.pop(str(entry), None)  # a finder a failing run made the standard path finder cache


def install(recorded: Recorders, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recording meta-path finder first on sys.meta_path, the path hook first on sys.path_hooks, and the hook's
    entry (not yet in sys.path_importer_cache, so the standard path finder would call the hook for it) on sys.path."""
    entry = str(recorded.entry)

    def path_hook(path: str) -> RecordingFinder:
        if path != entry:
            raise ImportError(path)  # not this hook's entry: the next hook's
        recorded.calls.append(("path hook", path))
        return RecordingFinder(recorded.calls, "path entry finder")

    monkeypatch.setattr(sys, "meta_path", [RecordingFinder(recorded.calls, "meta-path finder"), *sys.meta_path])
    monkeypatch.setattr(sys, "path_hooks", [path_hook, *sys.path_hooks])
    monkeypatch.setattr(sys, "path", [entry, *sys.path])  # syspath_prepend would ask every finder to invalidate_caches


def write(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def twin(site: Path, root: Path, tag: str) -> Path:
    """A catalog layer (no settings: it adds to the shipped one) with a gated op and a layers file naming a class of
    a package that is not installed, its modules in `site`, and a plugin distribution installed there."""
    (site / f"kc_hooks_{tag}.py").write_text(
        "def kernel(x, weight, eps=1e-6):\n    return x\n\n\ndef gate(x, weight, eps=1e-6):\n    return True\n\n\n"
        "def forward(module, ops, x):\n    return x\n",
        encoding="utf-8",
    )
    info = site / f"kc_hooks_plugin_{tag}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: kc-hooks-plugin-{tag}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[kcatalog.catalogs]\ncatalog = kc_hooks_plugin_{tag}.catalog\n")
    plugin = site / f"kc_hooks_plugin_{tag}" / "catalog"
    plugin.mkdir(parents=True)
    (plugin.parent / "__init__.py").write_text("raise RuntimeError('plugin code ran')\n")
    (plugin / "__init__.py").write_text("raise RuntimeError('plugin code ran')\n")
    (plugin / "extra.yaml").write_text(
        write(
            f"""
            kcatalog: 1
            group: hooks_plugin_{tag}
            ops:
              norm:
                description: an op of the plugin's
                signature: "(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor"
                reference: torch
                dtypes: [float32]
                backends:
                  torch: {{target: kc_hooks_{tag}:kernel}}
            """
        )
    )
    layer = root / f"layer_{tag}"
    layer.mkdir()
    manifest = {
        "kcatalog": 1,
        "group": f"hooks_{tag}",
        "ops": {
            "norm": {
                "description": "a gated op",
                "signature": "(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor",
                "reference": "torch",
                "dtypes": ["float32"],
                "backends": {
                    "torch": {"target": f"kc_hooks_{tag}:kernel", "requires": [f"kc-hooks-plugin-{tag}"]},
                    "aten": {"target": f"kc_hooks_{tag}:kernel", "requires": [f"kc-hooks-absent-{tag}"]},
                    "triton": {"target": f"kc_hooks_{tag}:kernel", "eligible": f"kc_hooks_{tag}:gate"},
                },
            }
        },
    }
    (layer / "ops.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    layers = {
        "kcatalog": 1,
        "layers": {
            f"absent_{tag}": {
                "classes": [f"kc_absent_pkg_{tag}.models:Layer", f"kc_absent_pkg_{tag}.models.deep:Other"],
                "forward": f"kc_hooks_{tag}:forward",
                "ops": [f"hooks_{tag}.norm"],
            }
        },
    }
    (layer / "model.layers.yaml").write_text(yaml.safe_dump(layers, sort_keys=False))
    return layer


def run_everything(layer: Path, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """validate (the CLI, in this process), then a cold and a warm load of the shipped, plugin and given layers."""
    code = main(["validate", "shipped", "plugins", str(layer)])
    out = capsys.readouterr().out
    assert code == 0, out
    paths = ["shipped", "plugins", layer]
    cold = kcatalog.load_catalog(paths, cache=cache)
    warm = kcatalog.load_catalog(paths, cache=cache)
    assert cold.cache_status.outcome is CacheOutcome.WRITTEN, cold.cache_status
    assert warm.cache_status.outcome is CacheOutcome.HIT, warm.cache_status
    tag = layer.name.removeprefix("layer_")
    assert {f"kc-hooks-plugin-{tag}", "shipped", str(layer)} <= {layer.name for layer in warm.layers}
    assert warm.info(f"hooks_{tag}.norm").backends["triton"].gate is not None
    # Selection looks up `requires:` in installed metadata: found by the same walk, asking no finder either.
    selection = warm.select(f"hooks_{tag}.norm", "cpu", "float32")
    assert selection.backend == "torch"
    aten = next(r for r in selection.rejected if r.backend == "aten")
    assert f"kc-hooks-absent-{tag}" in aten.reason


def test_validate_and_loads_call_no_import_hook(
    workspace: Any, recorders: Recorders, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    # Once without the recorders, on a twin of other names: kcatalog's own first imports are done.
    run_everything(twin(workspace.modules_dir, tmp_path, "warm"), tmp_path / "cache_warm", capsys)
    install(recorders, monkeypatch)
    layer = twin(recorders.entry, tmp_path, "real")  # the application's modules are the path hook's entry's
    run_everything(layer, tmp_path / "cache_real", capsys)
    assert recorders.calls == []
    assert not any(name.startswith("kc_hooks_plugin_") for name in sys.modules), "a plugin package was imported"


def test_a_shipped_load_without_transformers_asks_no_finder_for_it(
    recorders: Recorders, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped layers file names transformers' classes. On a core install (here: the directories holding
    installed distributions left off sys.path, transformers not imported) its absence is found by kcatalog's own
    walk, never by asking the finders, which the standard path finder would, for every entry of sys.path."""
    kcatalog.load_catalog(["shipped"], cache=tmp_path / "cache_warm")  # kcatalog's own first imports
    kcatalog.load_catalog(["shipped"], cache=tmp_path / "cache_warm")
    core = [entry for entry in sys.path if not entry.endswith(("site-packages", "dist-packages"))]
    monkeypatch.setattr(sys, "path", core)
    for name in [name for name in sys.modules if name.partition(".")[0] == "transformers"]:
        monkeypatch.delitem(sys.modules, name)
    install(recorders, monkeypatch)
    cold = kcatalog.load_catalog(["shipped"], cache=tmp_path / "cache")
    warm = kcatalog.load_catalog(["shipped"], cache=tmp_path / "cache")
    assert warm.cache_status.outcome is CacheOutcome.HIT, warm.cache_status
    assert not [w for w in (*cold.warnings, *warm.warnings) if "transformers" in w.message]  # unavailable, not wrong
    assert recorders.calls == []


def test_did_you_mean_for_a_missing_package_asks_no_cached_path_entry_finder(
    workspace: Any, recorders: Recorders, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finder some hook left in sys.path_importer_cache for an entry of sys.path (the hook since removed): the
    names offered for a package that is not installed are listed from the directories, never by asking it (as
    pkgutil.iter_modules would)."""
    workspace.named_functions("kc_hooks_nearby", ["kernel"])
    directory = workspace.write({"op": workspace.op({"torch": "kc_hooks_nearbx:kernel"})}, backends=["torch"])
    assert main(["validate", str(directory)]) == 0  # kcatalog's own first imports
    capsys.readouterr()
    entry = str(recorders.entry)
    monkeypatch.setattr(sys, "path", [entry, *sys.path])
    monkeypatch.setitem(sys.path_importer_cache, entry, RecordingFinder(recorders.calls, "cached finder"))
    (directory / "g.yaml").write_text((directory / "g.yaml").read_text().replace("nearbx", "nearbz"))
    assert main(["validate", str(directory)]) == 0
    out = capsys.readouterr().out
    assert (
        "module 'kc_hooks_nearbz' unavailable here: top-level package 'kc_hooks_nearbz' is not installed (did you mean 'kc_hooks_nearby'?)"
        in out
    )
    assert recorders.calls == []
