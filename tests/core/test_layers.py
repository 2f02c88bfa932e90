"""Layered catalogs: the shipped one, paths, KCATALOG_PATH and installed distributions' `kcatalog.catalogs` entry
points, merged (extends, replaces, priorities, per-layer allow-lists), with conflicts naming both layers, no plugin
code run, and a cache key that covers every layer."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

import kcatalog
from kcatalog import CacheOutcome
from kcatalog.model import Plugin
from kcatalog.tools.cli import main

# The package __init__ of each plugin: it must never run while a catalog loads.
TRAP = "raise RuntimeError('plugin code ran while loading the catalog')\n"

ROCM_SETTINGS = """\
kcatalog: 1
backends:
  rocm_lib: {description: a vendor's ROCm library}
priority: [rocm_lib, triton]
allowed_modules: [kc_plugin_rocm]
"""
ROCM_EXTENDS = """\
kcatalog: 1
group: rocm
extends:
  layernorm.rms_norm:
    backends:
      rocm_lib:
        target: kc_plugin_rocm.kernels:rms_norm
        capabilities: [{device: hip}]
"""
TRITON_REPLACES = """\
kcatalog: 1
group: fasttriton
extends:
  layernorm.rms_norm:
    replaces:
      triton:
        target: kc_plugin_fast.kernels:rms_norm
        capabilities: [{device: cuda, min_arch: "9.0"}]
"""


def distribution(site: Path, name: str, package: str, files: Mapping[str, str]) -> None:
    """An installed distribution `name` whose `kcatalog.catalogs` entry point names `package.catalog`: its
    metadata (what importlib.metadata reads), its package (every __init__ a trap) and its catalog files."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[kcatalog.catalogs]\ncatalog = {package}.catalog\n", encoding="utf-8")
    catalog = site / package / "catalog"
    catalog.mkdir(parents=True)
    (site / package / "__init__.py").write_text(TRAP, encoding="utf-8")
    (catalog / "__init__.py").write_text(TRAP, encoding="utf-8")
    (site / package / "kernels.py").write_text("def rms_norm(x, weight, eps=1e-6):\n    return x\n", encoding="utf-8")
    for relative, text in files.items():
        (catalog / relative).write_text(text, encoding="utf-8")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on sys.path for throwaway distributions; their packages are checked never to be imported."""
    directory = tmp_path / "site"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    yield directory
    assert not any(name.startswith("kc_plugin_") for name in sys.modules), "a plugin package was imported"


def test_two_distributions_extend_and_replace_the_shipped_catalog(site: Path) -> None:
    distribution(site, "kc-plugin-rocm", "kc_plugin_rocm", {"kcatalog.yaml": ROCM_SETTINGS, "rocm.yaml": ROCM_EXTENDS})
    distribution(site, "kc-plugin-fast", "kc_plugin_fast", {"fast.yaml": TRITON_REPLACES})
    catalog = kcatalog.load_catalog(cache=False)  # the default layers: shipped, then plugins
    assert [(layer.name, layer.origin.split(":")[0]) for layer in catalog.layers] == [
        ("shipped", "the catalog shipped with kcatalog"),
        ("kc-plugin-fast", "entry point kcatalog.catalogs"),
        ("kc-plugin-rocm", "entry point kcatalog.catalogs"),
    ]
    specs = {spec.backend: (str(spec.target), spec.layer) for spec in catalog.specs("layernorm.rms_norm")}
    assert specs["triton"] == ("kc_plugin_fast.kernels:rms_norm", "kc-plugin-fast")
    assert specs["rocm_lib"] == ("kc_plugin_rocm.kernels:rms_norm", "kc-plugin-rocm")
    assert specs["torch"] == ("kcatalog.kernels.torch.layernorm:rms_norm", "shipped")
    assert catalog.settings.priority == ("rocm_lib", "triton", "aten", "torch_compile", "torch")
    assert catalog.select("layernorm.rms_norm", "hip:gfx942").chosen.backend == "rocm_lib"  # type: ignore[union-attr]
    chosen = catalog.select("layernorm.rms_norm", "cuda:8.0").chosen  # the replacement needs sm 9.0
    assert chosen is not None and chosen.backend == "aten"
    # Each layer's allow-list applies to its own files only: the shipped one's is not widened, and the
    # plugin's own targets pass under theirs.
    assert catalog.info("layernorm.rms_norm").backends["rocm_lib"].allowed_modules == (("kc_plugin_rocm",),)
    assert catalog.info("layernorm.rms_norm").backends["torch"].allowed_modules == (
        ("kcatalog.kernels", "kcatalog.integrations"),
    )


def test_two_distributions_replacing_one_backend_are_named_both(site: Path) -> None:
    distribution(site, "kc-plugin-fast", "kc_plugin_fast", {"fast.yaml": TRITON_REPLACES})
    distribution(
        site, "kc-plugin-faster", "kc_plugin_faster", {"faster.yaml": TRITON_REPLACES.replace("fast", "faster")}
    )
    catalog, diagnostics = kcatalog.check_catalog()
    assert catalog is None
    broken, error = [str(d) for d in diagnostics if d.is_error]
    assert broken.startswith("KC007 installed plugin kc-plugin-faster 1.0 ")  # the second is the one to fix
    assert (
        "faster/catalog/faster.yaml:6:7: KC202 backend 'triton' of op 'layernorm.rms_norm' already replaced at "
        in error
    )
    assert error.endswith(
        "kc_plugin_fast/catalog/fast.yaml:6:7 by layer 'kc-plugin-fast'; layer 'kc-plugin-faster' replaces it again"
    )


def test_a_plugin_cannot_redeclare_a_shipped_op(site: Path) -> None:
    again = Path(kcatalog.__file__).parent.joinpath("catalog", "layernorm.yaml").read_text(encoding="utf-8")
    distribution(site, "kc-plugin-copy", "kc_plugin_copy", {"layernorm.yaml": again})
    _, diagnostics = kcatalog.check_catalog()
    duplicates = [d for d in diagnostics if d.code == "KC201"]
    shipped = kcatalog.load_catalog(["shipped"], cache=False)
    assert len(duplicates) == sum(op.startswith("layernorm.") for op in shipped) >= 3
    assert duplicates[0].message.startswith("op 'layernorm.rms_norm' already declared at ")
    assert duplicates[0].message.endswith("by layer 'shipped'; layer 'kc-plugin-copy' declares it again")


def test_a_plugin_cannot_widen_the_shipped_allow_list(site: Path) -> None:
    widen = "kcatalog: 1\nallowed_modules: [kcatalog.kernels, kc_plugin_wide]\n"
    distribution(site, "kc-plugin-wide", "kc_plugin_wide", {"kcatalog.yaml": widen})
    catalog = kcatalog.load_catalog(cache=False)
    assert catalog.info("layernorm.rms_norm").backends["torch"].allowed_modules == (
        ("kcatalog.kernels", "kcatalog.integrations"),
    )


def test_an_entry_point_naming_a_missing_package(site: Path) -> None:
    distribution(site, "kc-plugin-gone", "kc_plugin_gone", {"x.yaml": "kcatalog: 1\n"})
    (site / "kc_plugin_gone" / "catalog" / "__init__.py").unlink()
    for path in (site / "kc_plugin_gone" / "catalog").iterdir():
        path.unlink()
    (site / "kc_plugin_gone" / "catalog").rmdir()
    _, diagnostics = kcatalog.check_catalog()
    assert [str(d) for d in diagnostics] == [
        "KC007 installed plugin kc-plugin-gone 1.0 (entry point kcatalog.catalogs: catalog = kc_plugin_gone.catalog): "
        "its package 'kc_plugin_gone.catalog' is not found, which fails every load of the installed plugins (the "
        "default layers); fix or upgrade it, uninstall it (pip uninstall kc-plugin-gone), or leave it out "
        "(KCATALOG_EXCLUDE_PLUGINS=kc-plugin-gone)"
    ]


BROKEN = """\
kcatalog: 1
group: broken
ops:
  op:
    description: its backends are missing
"""


def test_a_broken_plugin_names_its_distribution_and_what_to_do(site: Path) -> None:
    """The file alone does not say which installed distribution to fix or uninstall: KC007 does, once."""
    distribution(site, "kc-plugin-broken", "kc_plugin_broken", {"broken.yaml": BROKEN})
    with pytest.raises(kcatalog.CatalogError) as failed:
        kcatalog.load_catalog(cache=False)  # the default layers: shipped, then plugins
    lines = str(failed.value).splitlines()
    assert lines[:2] == [
        "catalog has 2 errors:",
        "  KC007 installed plugin kc-plugin-broken 1.0 (entry point kcatalog.catalogs: catalog = "
        "kc_plugin_broken.catalog): its catalog has 1 error, which fails every load of the installed plugins (the "
        "default layers); fix or upgrade it, uninstall it (pip uninstall kc-plugin-broken), or leave it out "
        "(KCATALOG_EXCLUDE_PLUGINS=kc-plugin-broken)",
    ]
    assert lines[2].endswith("kc_plugin_broken/catalog/broken.yaml:5:5: KC102 missing required field 'backends'")


def test_a_plugin_named_in_the_exclude_variable_is_left_out(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    distribution(site, "kc-plugin-broken", "kc_plugin_broken", {"broken.yaml": BROKEN})
    distribution(site, "kc-plugin-fast", "kc_plugin_fast", {"fast.yaml": TRITON_REPLACES})
    monkeypatch.setenv("KCATALOG_EXCLUDE_PLUGINS", "KC_Plugin.Broken")  # compared as pip compares names
    catalog = kcatalog.load_catalog(cache=False)
    assert [layer.name for layer in catalog.layers] == ["shipped", "kc-plugin-fast"]
    assert catalog.layers[1].plugin == Plugin("kc-plugin-fast", "1.0", "catalog = kc_plugin_fast.catalog")
    assert [layer.name for layer in kcatalog.load_catalog(["shipped", "plugins"], cache=False).layers][1:] == [
        "kc-plugin-fast"
    ]  # the token too


def test_layers_command_shows_each_layer_and_what_it_adds(
    site: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    distribution(site, "kc-plugin-rocm", "kc_plugin_rocm", {"kcatalog.yaml": ROCM_SETTINGS, "rocm.yaml": ROCM_EXTENDS})
    assert main(["layers"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["#", "layer", "origin", "contributes"]
    assert (
        out[1].startswith("1  shipped ")
        and "23 ops, 72 backend specs; targets under kcatalog.integrations, kcatalog.kernels" in out[1]
    )
    assert out[2].startswith("2  kc-plugin-rocm  entry point kcatalog.catalogs: catalog = kc_plugin_rocm.catalog")
    assert out[2].endswith(
        "0 ops, 1 backend spec (1 for ops of other layers: layernorm.rms_norm:rocm_lib); targets under kc_plugin_rocm"
    )
    assert main(["list", "--layers", "shipped"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("1  shipped ")
    # explain says which layer supplied each backend
    assert main(["explain", "layernorm.rms_norm", "--platform", "hip:gfx942"]) == 0
    explained = capsys.readouterr().out.splitlines()
    assert explained[0] == (
        "layernorm.rms_norm on hip:gfx942: rocm_lib (kc_plugin_rocm.kernels:rms_norm) [layer kc-plugin-rocm], "
        "by catalog default priority"
    )
    assert "  aten [layer shipped]: ranked below rocm_lib by catalog default priority" in explained


def test_kcatalog_path_adds_layers_on_top_of_the_default_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "extra.yaml").write_text(
        textwrap.dedent(
            """\
            kcatalog: 1
            group: extra
            extends:
              layernorm.rms_norm:
                replaces:
                  torch:
                    target: kcatalog.kernels.aten.layernorm:rms_norm
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.setenv("KCATALOG_PATH", str(mine))
    catalog = kcatalog.load_catalog(cache=False)
    assert [(layer.name, layer.origin) for layer in catalog.layers][1:] == [(str(mine), "KCATALOG_PATH")]
    assert (
        str(catalog.info("layernorm.rms_norm").backends["torch"].target) == "kcatalog.kernels.aten.layernorm:rms_norm"
    )
    # The shipped allow-list is its own layer's, not the catalog's: mine's targets are under none
    assert catalog.settings.allowed_modules is None
    assert kcatalog.load_catalog("shipped", cache=False).settings.allowed_modules == (
        "kcatalog.kernels",
        "kcatalog.integrations",
    )


def test_a_manifest_given_alone_is_checked_with_its_catalogs_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As pre-commit passes changed files: one in a subdirectory of the catalog (with or without the settings file
    among them) is held to the allow-list its catalog's load holds it to, not read as a layer of its own. The
    settings file is looked for up to the working directory, never above it."""
    mine = tmp_path / "mine"
    (mine / "extra").mkdir(parents=True)
    (mine / "kcatalog.yaml").write_text("kcatalog: 1\nallowed_modules: [myops]\n", encoding="utf-8")
    manifest = mine / "extra" / "ops.yaml"
    manifest.write_text(
        "kcatalog: 1\ngroup: mine\nops:\n  scale:\n    backends:\n      torch: {target: 'os.path:join'}\n",
        encoding="utf-8",
    )

    def refused(*paths: Path) -> list[str]:
        _, diagnostics = kcatalog.check_catalog(["shipped", *paths], check_targets=False)
        return [f"{d.location.line}:{d.location.col}" for d in diagnostics if d.code == "KC305" and d.location]

    monkeypatch.chdir(tmp_path)
    assert refused(mine) == ["6:23"]
    assert refused(manifest) == refused(manifest, mine / "kcatalog.yaml") == ["6:23"]
    monkeypatch.chdir(mine / "extra")  # the catalog's directory is above the working directory: not looked in
    assert refused(manifest) == []


def test_a_layer_may_not_reorder_an_earlier_priority(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "kcatalog.yaml").write_text("kcatalog: 1\npriority: [torch, triton]\n", encoding="utf-8")
    _, diagnostics = kcatalog.check_catalog(["shipped", mine])
    assert [d.code for d in diagnostics] == ["KC221"]


def test_the_cache_key_covers_every_layer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layers = []
    for number in range(3):
        layer = tmp_path / f"layer{number}"
        layer.mkdir()
        layers.append(layer)
    (layers[0] / "kcatalog.yaml").write_text(
        "kcatalog: 1\nbackends:\n  torch: {description: reference}\n  aten: {description: aten}\npriority: [aten, torch]\n",
        encoding="utf-8",
    )
    for number, layer in enumerate(layers):
        (layer / f"g{number}.yaml").write_text(
            f"kcatalog: 1\ngroup: g{number}\nops:\n  op:\n    description: op {number}\n"
            '    signature: "(x: Tensor) -> Tensor"\n    reference: torch\n    dtypes: [float32]\n'
            "    backends:\n      torch: {target: 'kcatalog.kernels.torch.layernorm:rms_norm'}\n",
            encoding="utf-8",
        )
    cache = tmp_path / "cache"
    assert kcatalog.load_catalog(layers, cache=cache).cache_status.outcome is CacheOutcome.WRITTEN
    assert kcatalog.load_catalog(layers, cache=cache).cache_status.outcome is CacheOutcome.HIT
    # A settings file added to the last layer: its own allow-list now governs that layer's file.
    (layers[2] / "kcatalog.yaml").write_text(
        "kcatalog: 1\nallowed_modules: [kcatalog.kernels.aten]\n", encoding="utf-8"
    )
    again = kcatalog.check_catalog(layers, cache=cache)
    assert [d.code for d in again.diagnostics] == ["KC305"]  # the last layer's own list now governs its file
    assert again.catalog is None
    (layers[2] / "kcatalog.yaml").unlink()
    assert kcatalog.load_catalog(layers, cache=cache).cache_status.outcome is CacheOutcome.HIT
    # The same files in the same order, their layers named otherwise: the names are in the entry, so not a hit.
    monkeypatch.chdir(tmp_path)
    renamed = kcatalog.load_catalog([layer.name for layer in layers], cache=cache)
    assert (renamed.cache_status.outcome, renamed.cache_status.reason) == (
        CacheOutcome.WRITTEN,
        "files or versions changed",
    )
    assert [layer.name for layer in renamed.layers] == ["layer0", "layer1", "layer2"]
    swapped = kcatalog.load_catalog([layers[0], layers[2], layers[1]], cache=cache)
    assert swapped.cache_status.outcome is CacheOutcome.WRITTEN
    assert swapped.info("g2.op").layer == str(layers[2])
