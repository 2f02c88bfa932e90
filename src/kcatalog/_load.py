"""The front door: paths to a Catalog, or every diagnostic at once."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Sequence

from ._catalog import Catalog
from ._link import Require, link
from ._loader import SETTINGS_FILE, LoadedFile, PathLike, discover, read_files, shipped_catalog_dir
from ._overrides import OverridesArg
from .errors import CatalogError, Diagnostic


def check_catalog(
    paths: Iterable[PathLike] | None = None,
    *,
    require: Require | None = None,
    check_targets: bool = True,
    overrides: OverridesArg = None,
    strict: bool = False,
    allowed_modules: Sequence[str] | None = None,
    import_targets: bool = False,
) -> tuple[Catalog | None, list[Diagnostic]]:
    """Read, validate and link; return the catalog (None on any error) and all diagnostics, sorted.

    `import_targets` is the explicit deeper check: it imports every target (running kernel modules'
    code) and checks each is a callable whose parameters match the op's signature.
    """
    # Parsing builds large trees of YAML nodes that refcounting alone frees; left on, the cyclic
    # collector rescans them again and again and makes loading superlinear (75% of a 4,000-op load).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _check(paths, require=require, check_targets=check_targets, overrides=overrides, strict=strict,
                      allowed_modules=allowed_modules, import_targets=import_targets)
    finally:
        if collecting:
            gc.enable()


def _check(
    paths: Iterable[PathLike] | None,
    *,
    require: Require | None,
    check_targets: bool,
    overrides: OverridesArg,
    strict: bool,
    allowed_modules: Sequence[str] | None,
    import_targets: bool,
) -> tuple[Catalog | None, list[Diagnostic]]:
    files, diagnostics = discover([shipped_catalog_dir()] if paths is None else paths)
    loaded: list[LoadedFile] = []
    for item in read_files(files):
        if isinstance(item, Diagnostic):
            diagnostics.append(item)
        else:
            loaded.append(item)
    catalog, linked = link(loaded, require=require, check_targets=check_targets, overrides=overrides, strict=strict,
                           allowed_modules=allowed_modules,
                           settings_found=any(path.name == SETTINGS_FILE for path in files),
                           import_targets=import_targets)
    diagnostics.extend(linked)
    diagnostics.sort(key=Diagnostic.sort_key)
    if any(d.is_error for d in diagnostics):
        catalog = None
    return catalog, diagnostics


def load_catalog(
    paths: Iterable[PathLike] | None = None,
    *,
    require: Require | None = None,
    check_targets: bool = True,
    overrides: OverridesArg = None,
    strict: bool = False,
    allowed_modules: Sequence[str] | None = None,
) -> Catalog:
    """Load a catalog (default: the one shipped with kcatalog), checking everything, importing no kernel.

    `paths` are catalog directories or files; `require` lists the ops the application will call,
    or maps each op to the backends it expects. `overrides` ({'layernorm.*': 'triton'} or
    'layernorm.*=triton,...') prefers backends process-wide; the environment variables
    KCATALOG_OVERRIDES and KCATALOG_BACKEND take precedence over it. With `strict`, an override that
    cannot be honoured or a kernel that fails to import raises instead of falling back.
    `allowed_modules` lists module prefixes targets may name (on top of the settings file's own list).
    Raises CatalogError carrying every diagnostic; warnings (e.g. targets unavailable here) are on
    `catalog.warnings`.
    """
    catalog, diagnostics = check_catalog(paths, require=require, check_targets=check_targets,
                                         overrides=overrides, strict=strict, allowed_modules=allowed_modules)
    if catalog is None:
        raise CatalogError.from_diagnostics(diagnostics)
    return catalog
