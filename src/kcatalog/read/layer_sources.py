"""Catalog layers: which directories a catalog is made of, in order, and where each came from.

A layer is the shipped catalog (the token `shipped`), a path given, a directory of KCATALOG_PATH, or a package
of manifests that an installed distribution names under the entry-point group `kcatalog.catalogs` (the token
`plugins`). Entry points are read from the distributions' metadata and their packages located with the finder
that never imports (pyresolve/finder.py): no plugin code runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from .. import codes
from ..diagnostics import Diagnostics
from ..model import CatalogLayer
from .files import SETTINGS_FILE, CatalogFile, PathLike, discover, given_file_root, shipped_catalog_dir

SHIPPED = "shipped"  # the token for the catalog shipped inside the package
PLUGINS = "plugins"  # the token for every installed distribution's `kcatalog.catalogs` entry points
ENTRY_POINT_GROUP = "kcatalog.catalogs"
PATH_VARIABLE = "KCATALOG_PATH"  # more layers (directories, os.pathsep-separated) on top of the default ones


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

    def add(root: Path, name: str, origin: str, paths: tuple[str, ...]) -> None:
        key = str(root)
        known = layers.get(key)
        if known is None:
            layers[key] = CatalogLayer(name, origin, paths)
        else:
            more = tuple(path for path in paths if path not in known.paths)
            layers[key] = CatalogLayer(known.name, known.origin, (*known.paths, *more))

    for raw in default_sources() if paths is None else paths:
        if isinstance(raw, str) and raw == SHIPPED:
            shipped = shipped_catalog_dir()
            add(shipped.resolve(), SHIPPED, "the catalog shipped with kcatalog", (str(shipped),))
        elif isinstance(raw, str) and raw == PLUGINS:
            for plugin in _entry_point_layers(diagnostics):
                add(Path(plugin.paths[0]).resolve(), plugin.name, plugin.origin, plugin.paths)
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
    """One layer per `kcatalog.catalogs` entry point, sorted by distribution and entry name."""
    from ..distributions import entry_points
    from ..pyresolve import locate  # finds a package's directory without running its __init__

    found = entry_points(ENTRY_POINT_GROUP)
    names = [entry.distribution for entry in found]
    layers = []
    for entry in sorted(set(found)):
        dist, name, value = entry.distribution, entry.name, entry.value
        package = value.partition(":")[0].strip()
        origin = f"entry point {ENTRY_POINT_GROUP}: {name} = {value} (distribution {dist})"
        location = locate(package).location
        if location is None or location.search is None:
            what = "not found" if location is None else "a module, not a package of manifests"
            diagnostics.error(codes.PATH_NOT_FOUND, f"{origin}: package '{package}' is {what}")
            continue
        layer_name = dist if names.count(dist) == 1 else f"{dist}:{name}"
        layers.append(CatalogLayer(layer_name, origin, tuple(location.search)))
    return layers
