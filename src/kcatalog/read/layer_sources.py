"""Catalog layers: which directories a catalog is made of, in order, and where each came from.

A layer is the shipped catalog (the token `shipped`), a path given, a directory of KCATALOG_PATH, or a package
of manifests that an installed distribution names under the entry-point group `kcatalog.catalogs` (the token
`plugins`). Entry points are read from the distributions' metadata and their packages located with the finder
that never imports (pyresolve/finder.py): no plugin code runs.

A broken plugin (its entry point names no package of manifests, or its catalog has errors) fails the load, as
any layer with errors does: skipping it would silently drop or change kernels the user installed it for. One
KC007 error names its distribution and version and what to do: fix or upgrade it, `pip uninstall` it, or
leave it out with KCATALOG_EXCLUDE_PLUGINS (as pytest's `-p no:NAME` leaves out a plugin that breaks a run).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import Diagnostic
from ..model import CatalogLayer, Plugin
from .files import SETTINGS_FILE, CatalogFile, PathLike, discover, display_path, given_file_root, shipped_catalog_dir

SHIPPED = "shipped"  # the token for the catalog shipped inside the package
PLUGINS = "plugins"  # the token for every installed distribution's `kcatalog.catalogs` entry points
ENTRY_POINT_GROUP = "kcatalog.catalogs"
PATH_VARIABLE = "KCATALOG_PATH"  # more layers (directories, os.pathsep-separated) on top of the default ones
# Distributions (comma-separated) whose entry points the `plugins` token leaves out: a broken plugin the user
# did not ask for need not break every load until it is fixed or uninstalled.
EXCLUDE_VARIABLE = "KCATALOG_EXCLUDE_PLUGINS"


def default_sources() -> list[PathLike]:
    """What a catalog is made of when no paths are given: the shipped one, plugins, then KCATALOG_PATH."""
    extra = [entry for entry in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if entry]
    return [SHIPPED, PLUGINS, *extra]


def resolve_layers(paths: Iterable[PathLike] | None, diagnostics: Diagnostics) -> list[CatalogLayer]:
    """The layers `paths` name (None: the default ones), in order; what is wrong with them goes to `diagnostics`.
    Paths under one directory make one layer: a manifest given alone belongs to the layer of the nearest directory
    above it (up to the working directory) that holds a settings file (the one its directory's load would read it
    in), with that settings file, else to its own directory's."""
    from_environment = paths is None
    layers: dict[str, CatalogLayer] = {}  # by root directory, in order of first mention

    def add(root: Path, name: str, origin: str, paths: tuple[str, ...], plugin: Plugin | None = None) -> None:
        key = str(root)
        known = layers.get(key)
        if known is None:
            layers[key] = CatalogLayer(name, origin, paths, plugin)
        else:
            more = tuple(path for path in paths if path not in known.paths)
            layers[key] = dataclasses.replace(known, paths=(*known.paths, *more))

    for raw in default_sources() if paths is None else paths:
        if isinstance(raw, str) and raw == SHIPPED:
            shipped = shipped_catalog_dir()
            add(shipped.resolve(), SHIPPED, "the catalog shipped with kcatalog", (str(shipped),))
        elif isinstance(raw, str) and raw == PLUGINS:
            for plugin in _entry_point_layers(diagnostics):
                add(Path(plugin.paths[0]).resolve(), plugin.name, plugin.origin, plugin.paths, plugin.plugin)
        else:
            given = Path(raw)
            origin = PATH_VARIABLE if from_environment else "a path given"
            # Named as given (not relative to the working directory), so that a cached load names it the same.
            if given.is_file():  # with its catalog's settings, so that their allow-list applies to it
                directory = given.absolute().parent.resolve()  # where it is named, not where a symlink points
                root = given_file_root(given)
                settings = (str(root / SETTINGS_FILE),) if root != directory else ()  # beside it, discover finds it
                add(root, str(given), origin, (str(given), *settings))
            else:
                add(given.resolve() if given.exists() else given, str(given), origin, (str(given),))
    return list(layers.values())


def layer_files(layers: Sequence[CatalogLayer], diagnostics: Diagnostics) -> list[CatalogFile]:
    """The catalog files of every layer, in layer order, each tagged with its layer's number (a file reached from
    two layers is the first's); what cannot be found goes to `diagnostics`."""
    seen: set[Path] = set()
    files: list[CatalogFile] = []
    for number, layer in enumerate(layers):
        for file in discover(layer.paths, diagnostics):
            if file.path not in seen:
                seen.add(file.path)
                files.append(CatalogFile(file.path, file.is_settings, number))
    return files


def _entry_point_layers(diagnostics: Diagnostics) -> list[CatalogLayer]:
    """One layer per `kcatalog.catalogs` entry point, sorted by distribution and entry name, less the
    distributions KCATALOG_EXCLUDE_PLUGINS names."""
    from ..distributions import entry_points
    from ..pyresolve import locate  # finds a package's directory without running its __init__

    excluded = {_normalized(name) for name in os.environ.get(EXCLUDE_VARIABLE, "").split(",") if name.strip()}
    found = [entry for entry in entry_points(ENTRY_POINT_GROUP) if _normalized(entry.distribution) not in excluded]
    names = [entry.distribution for entry in found]
    layers = []
    for entry in sorted(set(found)):
        dist, name, value = entry.distribution, entry.name, entry.value
        plugin = Plugin(dist, entry.version, f"{name} = {value}")
        package = value.partition(":")[0].strip()
        location = locate(package).location if package else None
        if location is None or location.search is None:
            what = "not found" if location is None else "a module, not a package of manifests"
            diagnostics.error(codes.PLUGIN_BROKEN, broken_plugin(plugin, f"its package '{package}' is {what}"))
            continue
        origin = f"entry point {ENTRY_POINT_GROUP}: {plugin.entry_point} (distribution {plugin})"
        layer_name = dist if names.count(dist) == 1 else f"{dist}:{name}"
        layers.append(CatalogLayer(layer_name, origin, tuple(location.search), plugin))
    return layers


def _normalized(distribution: str) -> str:
    """A distribution's name as pip compares names: 'KC_Vendor.kernels' and 'kc-vendor-kernels' are one."""
    return re.sub(r"[-_.]+", "-", distribution.strip()).lower()


def broken_plugin(plugin: Plugin, problem: str) -> str:
    """KC007's message: the installed distribution, its problem, and the three ways out."""
    return (
        f"installed plugin {plugin} (entry point {ENTRY_POINT_GROUP}: {plugin.entry_point}): {problem}, which fails "
        f"every load of the installed plugins (the default layers); fix or upgrade it, uninstall it (pip uninstall "
        f"{plugin.distribution}), or leave it out ({EXCLUDE_VARIABLE}={plugin.distribution})"
    )


def broken_plugins(
    layers: Sequence[CatalogLayer], files: Sequence[CatalogFile], found: Iterable[Diagnostic]
) -> list[Diagnostic]:
    """A KC007 error for each plugin layer whose files (also those that could not be read) have errors
    (`found`, located in them): the file alone does not say which distribution to fix or uninstall."""
    layer_of = {display_path(file.path): file.layer for file in files}
    errors = Counter(layer_of.get(d.location.path) for d in found if d.is_error and d.location is not None)
    return [
        Diagnostic(codes.PLUGIN_BROKEN, broken_plugin(layer.plugin, f"its catalog has {_errors(errors[number])}"))
        for number, layer in enumerate(layers)
        if layer.plugin is not None and errors[number]
    ]


def _errors(count: int) -> str:
    return f"{count} error{'s' * (count != 1)}"
