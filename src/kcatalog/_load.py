"""The front door: paths to a Catalog, or every diagnostic at once."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ._catalog import Catalog
from ._checks import Require, check_linked
from ._files import SETTINGS_FILE, PathLike, SourceFile, discover, read_sources, shipped_catalog_dir
from ._linked import Linked
from ._overrides import OverridesArg
from .errors import CatalogError, Diagnostic

if TYPE_CHECKING:
    from ._cache import Cache


def check_catalog(
    paths: Iterable[PathLike] | None = None,
    *,
    require: Require | None = None,
    check_targets: bool = True,
    overrides: OverridesArg = None,
    strict: bool = False,
    allowed_modules: Sequence[str] | None = None,
    import_targets: bool = False,
    cache: bool | PathLike = False,
) -> tuple[Catalog | None, list[Diagnostic]]:
    """Read, validate and link; return the catalog (None on any error) and all diagnostics, sorted.

    `import_targets` is the explicit deeper check: it imports every target (running kernel modules'
    code) and checks each is a callable whose parameters match the op's signature. `cache` as in
    `load_catalog`; off by default here, so that a check always reads and validates every file.
    """
    # Parsing builds large trees of YAML nodes that refcounting alone frees; left on, the cyclic
    # collector rescans them again and again and makes loading superlinear (75% of a 4,000-op load).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _check(
            paths,
            require=require,
            check_targets=check_targets,
            overrides=overrides,
            strict=strict,
            allowed_modules=allowed_modules,
            import_targets=import_targets,
            cache=cache,
        )
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
    cache: bool | PathLike,
) -> tuple[Catalog | None, list[Diagnostic]]:
    files, diagnostics = discover([shipped_catalog_dir()] if paths is None else paths)
    sources: list[SourceFile] = []
    for item in read_sources(files):
        if isinstance(item, Diagnostic):
            diagnostics.append(item)
        else:
            sources.append(item)
    store, status = _open_cache(sources, diagnostics, cache)
    entry = None
    if store is not None:
        entry, status = store.read()
    if entry is not None:
        linked, known_targets = entry
    else:
        linked, known_targets = _link(sources, diagnostics), None
    linked_clean = not any(d.is_error for d in diagnostics)
    checked, layers, fresh_targets = check_linked(
        linked,
        require=require,
        check_targets=check_targets,
        overrides=overrides,
        allowed_modules=allowed_modules,
        import_targets=import_targets,
        known_targets=known_targets,
    )
    if store is not None:
        if not linked_clean:
            status += "; not written: the catalog has errors"
        elif entry is None or fresh_targets is not None:  # new, or its target checks were redone
            status += (
                ("; target modules changed" if entry is not None else "")
                + "; "
                + store.write(linked, fresh_targets if fresh_targets is not None else known_targets)
            )
    diagnostics.extend(checked)
    diagnostics.sort(key=Diagnostic.sort_key)
    if linked.settings is None or any(d.is_error for d in diagnostics):
        return None, diagnostics
    warnings = tuple(d for d in diagnostics if not d.is_error)
    return Catalog(
        linked.ops, linked.settings, warnings, layers=layers, strict=strict, cache_status=status
    ), diagnostics


def _open_cache(
    sources: list[SourceFile], diagnostics: list[Diagnostic], cache: bool | PathLike
) -> tuple[Cache | None, str]:
    """The cache entry for these files (None when off), and why it is off."""
    if cache is False:
        return None, "off: cache=False"
    if diagnostics:
        return None, "off: the files could not all be found and read"
    from ._cache import Cache, default_dir

    directory, status = default_dir() if cache is True else (Path(cache), "")
    if directory is None:
        return None, status
    try:
        return Cache(directory, sources), ""
    except OSError as exc:  # kcatalog's own files cannot be listed (e.g. imported from a zip): no key
        return None, f"off: cannot fingerprint kcatalog's code ({exc})"


def _link(sources: list[SourceFile], diagnostics: list[Diagnostic]) -> Linked:
    """Parse, validate and link the files, adding what is wrong to `diagnostics`."""
    from ._link import link_files  # PyYAML and pydantic: imported only when files must be parsed
    from ._loader import load_sources

    loaded = []
    for item in load_sources(sources):
        if isinstance(item, Diagnostic):
            diagnostics.append(item)
        else:
            loaded.append(item)
    linked, found = link_files(loaded, settings_found=any(s.path.name == SETTINGS_FILE for s in sources))
    diagnostics.extend(found)
    return linked


def load_catalog(
    paths: Iterable[PathLike] | None = None,
    *,
    require: Require | None = None,
    check_targets: bool = True,
    overrides: OverridesArg = None,
    strict: bool = False,
    allowed_modules: Sequence[str] | None = None,
    cache: bool | PathLike = True,
) -> Catalog:
    """Load a catalog (default: the one shipped with kcatalog), checking everything, importing no kernel.

    `paths` are catalog directories or files; `require` lists the ops the application will call,
    or maps each op to the backends it expects. `overrides` ({'layernorm.*': 'triton'} or
    'layernorm.*=triton,...') prefers backends process-wide; the environment variables
    KCATALOG_OVERRIDES and KCATALOG_BACKEND take precedence over it. With `strict`, an override that
    cannot be honoured or a kernel that fails to import raises instead of falling back.
    `allowed_modules` lists module prefixes targets may name (on top of the settings file's own list).
    `cache` keeps what parsing and validating the files yields, keyed by their exact contents, so the
    next process skips PyYAML and pydantic: True uses KCATALOG_CACHE_DIR or ~/.cache/kcatalog (unless
    KCATALOG_NO_CACHE is set), a path uses that directory, False turns it off. Target checks are reused
    only while the modules they read are unchanged; `require`, overrides and allow-lists are checked on
    every load. `catalog.cache_status` says what the cache did, and why.
    Raises CatalogError carrying every diagnostic; warnings (e.g. targets unavailable here) are on
    `catalog.warnings`.
    """
    catalog, diagnostics = check_catalog(
        paths,
        require=require,
        check_targets=check_targets,
        overrides=overrides,
        strict=strict,
        allowed_modules=allowed_modules,
        cache=cache,
    )
    if catalog is None:
        raise CatalogError.from_diagnostics(diagnostics)
    return catalog
