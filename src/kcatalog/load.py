"""The front door: paths to a Catalog, or every diagnostic at once. Runs the stages in order:
read -> (cache, or validate -> link) -> check -> registry."""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypedDict

from .check.load_checks import Require, check_linked
from .check.tuned_sources import check_tuned_sources
from .diagnostics import Diagnostics
from .errors import CatalogError, Diagnostic
from .model import CacheOutcome, CacheStatus, CatalogLayer, LinkedCatalog, SourceDigests, TargetChecks
from .platform import is_installed, known_devices
from .read.digest import content_digest
from .read.files import SETTINGS_FILE, CatalogFile, PathLike, SourceFile, display_path, read_sources
from .read.layer_sources import broken_plugins, layer_files, resolve_layers
from .registry.catalog import Catalog
from .select.buckets import Tuning
from .select.overrides import OverridesArg

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .cache.module_indexes import ModuleIndexes
    from .cache.store import Cache, CacheRead
    from .pyresolve import Fingerprint


@dataclass(frozen=True)
class LoadOptions:
    """How to load a catalog; `load_catalog` and `check_catalog` take these as keywords too.

    `require` lists the ops the application will call, or maps each op to the backends it expects.
    `check_targets` checks every target statically (never importing it); `import_targets` is the explicit
    deeper check: it imports every target (running kernel modules' code) and checks each is a callable
    whose parameters match the op's signature. `overrides` ({'layernorm.*': 'triton'} or
    'layernorm.*=triton,...') prefers backends process-wide; the environment variables KCATALOG_OVERRIDES
    and KCATALOG_BACKEND take precedence over it. With `strict`, an override that cannot be honoured or a
    kernel that fails to import raises instead of falling back. `allowed_modules` lists module prefixes
    targets may name (on top of the settings file's own list). `cache` keeps what parsing and validating
    the files yields, keyed by their exact contents: True uses KCATALOG_CACHE_DIR or ~/.cache/kcatalog
    (unless KCATALOG_NO_CACHE is set), a path uses that directory, False turns it off; whatever it says, fresh
    target checks keep the index of each module source they read in that directory (the default one for
    True and False), keyed by the source's exact bytes: an unchanged module is not parsed again. `plan` (a
    file written by `kcatalog plan`) pins the selection it records, above tuned tables and priority, below
    overrides; an entry this machine cannot honour warns once naming the op (raises with `strict`).
    `deterministic` selects only backends that promise deterministic outputs, `batch_invariant` only those that
    promise batch-invariant ones, for the whole process (as KCATALOG_DETERMINISTIC=1 or =batch_invariant does;
    either source adds, neither lifts).
    """

    require: Require | None = None
    check_targets: bool = True
    overrides: OverridesArg = None
    strict: bool = False
    allowed_modules: Sequence[str] | None = None
    import_targets: bool = False
    cache: bool | PathLike = True
    plan: PathLike | None = None
    deterministic: bool = False
    batch_invariant: bool = False

    def __post_init__(self) -> None:
        # A lone string is one item, not a sequence of one-character names.
        if isinstance(self.require, str):
            object.__setattr__(self, "require", (self.require,))
        if isinstance(self.allowed_modules, str):
            object.__setattr__(self, "allowed_modules", (self.allowed_modules,))


class LoadKeywords(TypedDict, total=False):
    """LoadOptions' fields as keywords (a test keeps the two in step)."""

    require: Require | None
    check_targets: bool
    overrides: OverridesArg
    strict: bool
    allowed_modules: Sequence[str] | None
    import_targets: bool
    cache: bool | PathLike
    plan: PathLike | None
    deterministic: bool
    batch_invariant: bool


class CheckResult(NamedTuple):
    """A catalog (None when any diagnostic is an error) and every diagnostic, sorted by position."""

    catalog: Catalog | None
    diagnostics: list[Diagnostic]


def check_catalog(
    paths: Iterable[PathLike] | PathLike | None = None,
    options: LoadOptions | None = None,
    **keywords: Unpack[LoadKeywords],
) -> CheckResult:
    """Read, validate, link and check: the catalog (None on any error) and all diagnostics, sorted.

    Options as for `load_catalog`, except that the cache is off unless asked for, so that a check always
    reads and validates every file.
    """
    options = dataclasses.replace(options or LoadOptions(cache=False), **keywords)
    # Parsing builds large trees of YAML nodes that refcounting alone frees; left on, the cyclic
    # collector rescans them again and again and makes loading superlinear (75% of a 4,000-op load).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _check(paths, options)
    finally:
        if collecting:
            gc.enable()


def load_catalog(
    paths: Iterable[PathLike] | PathLike | None = None,
    options: LoadOptions | None = None,
    **keywords: Unpack[LoadKeywords],
) -> Catalog:
    """Load a catalog (default: the one shipped with kcatalog), checking everything, importing no kernel.

    `paths` are the catalog's layers, in order: directories or files, and the tokens 'shipped' (the catalog
    shipped with kcatalog) and 'plugins' (installed distributions' `kcatalog.catalogs` entry points); default:
    shipped, plugins, then the directories of KCATALOG_PATH. Options (see LoadOptions) as an object, keywords, or both.
    The cache lets the next process skip PyYAML and pydantic; target checks are reused only while the
    modules they read are unchanged, and `require`, overrides and allow-lists are checked on every load.
    `catalog.cache_status` says what the cache did, and why.
    Raises CatalogError carrying every diagnostic; warnings (e.g. targets unavailable here) are on
    `catalog.warnings`.

    An installed plugin whose entry point names no package of manifests, or whose catalog has errors, fails
    the load like any layer with errors (skipping it would silently drop or change the kernels it was installed
    for); a KC007 error names its distribution and version and the ways out: fix or upgrade it, `pip uninstall`
    it, or leave it out of the `plugins` layers with KCATALOG_EXCLUDE_PLUGINS=dist[,dist...] (names compared
    as pip compares them). Explicit `paths` without 'plugins' never read the plugins.
    """
    result = check_catalog(paths, dataclasses.replace(options or LoadOptions(), **keywords))
    if result.catalog is None:
        raise CatalogError.from_diagnostics(result.diagnostics)
    return result.catalog


def check_texts(
    directory: PathLike,
    texts: Mapping[str, str],
    options: LoadOptions | None = None,
    **keywords: Unpack[LoadKeywords],
) -> CheckResult:
    """What `check_catalog(directory)` would find were `texts` (file name -> text) the directory's catalog files,
    nothing read from or written to it: how a command checks the catalog it is about to write before writing any
    of it (`kcatalog import-registry`). Options as for check_catalog; the cache is off."""
    options = dataclasses.replace(dataclasses.replace(options or LoadOptions(), **keywords), cache=False)
    given = Path(directory)
    root = given.resolve()
    layer = CatalogLayer(str(given), "a path given", (str(given),))
    files = [CatalogFile(root / name, name == SETTINGS_FILE) for name in texts]
    sources = [
        SourceFile(file.path, display_path(file.path), texts[file.path.name], file.is_settings) for file in files
    ]
    is_installed.cache_clear()
    return _check_sources([layer], files, sources, Diagnostics(), options)


def _check(paths: Iterable[PathLike] | PathLike | None, options: LoadOptions) -> CheckResult:
    is_installed.cache_clear()  # distributions come and go between loads; within one they are looked up once
    if isinstance(paths, (str, os.PathLike)):  # one path, not the characters of one
        paths = [paths]
    diagnostics = Diagnostics()
    layers = resolve_layers(paths, diagnostics)
    found = layer_files(layers, diagnostics)
    sources = read_sources(found, diagnostics)
    return _check_sources(layers, found, sources, diagnostics, options)


def _check_sources(
    layers: list[CatalogLayer],
    found: list[CatalogFile],
    sources: list[SourceFile],
    diagnostics: Diagnostics,
    options: LoadOptions,
) -> CheckResult:
    """Every stage after reading: `sources` are the texts of the files `found` in `layers` (what could not be read
    is in `diagnostics` already)."""
    store = _open_cache(sources, layers, diagnostics, options.cache)
    read = None if isinstance(store, CacheStatus) else store.read()
    known_sources = None
    if read is not None and read.entry is not None:
        linked, known_targets, known_sources = read.entry.linked, read.entry.targets, read.entry.sources
        diagnostics.extend(linked.warnings)  # what linking warned about, as a cold load would report it
    else:
        read_paths = {source.path for source in sources}
        unread = [file for file in found if file.path not in read_paths]
        linked, known_targets = _link(sources, unread, layers, diagnostics), None
    linked_clean = not diagnostics.has_errors
    current = _fingerprints()
    indexes = _module_indexes(options.cache) if options.check_targets or options.import_targets else None
    checks = check_linked(
        linked,
        require=options.require,
        check_targets=options.check_targets,
        overrides=options.overrides,
        allowed_modules=options.allowed_modules,
        import_targets=options.import_targets,
        known_targets=known_targets,
        current=current,
        indexes=indexes,
        deterministic=options.deterministic,
        batch_invariant=options.batch_invariant,
    )
    if indexes is not None:
        indexes.close()
    # Tuned entries whose kernels changed since they were measured (KC235): every load, as target checks are.
    sources_checked = check_tuned_sources(linked, known_sources, current)
    if isinstance(store, CacheStatus):
        status = store
    else:
        assert read is not None  # read whenever the cache is on
        targets = checks.fresh_targets or known_targets
        status = _cache_outcome(store, read, linked, linked_clean, targets, sources_checked.digests)
    diagnostics.extend(checks.diagnostics)
    diagnostics.extend(sources_checked.diagnostics)
    diagnostics.extend(broken_plugins(layers, found, diagnostics))  # which distribution to fix or uninstall
    digest = content_digest(sources, leave_out=frozenset(linked.tuned_texts))
    plan = None
    if options.plan is not None and not diagnostics.has_errors:
        from .link.locked_plan import read_plan

        devices = known_devices(linked.settings.devices if linked.settings is not None else ())
        plan = read_plan(
            options.plan, linked.ops, digest, strict=options.strict, diagnostics=diagnostics, devices=devices
        )
    ordered = diagnostics.sorted()
    settings = linked.settings
    if settings is None or diagnostics.has_errors:
        return CheckResult(None, ordered)
    if options.allowed_modules is not None:
        linked = linked.with_allow_list(tuple(options.allowed_modules))
    warnings = tuple(d for d in ordered if not d.is_error)
    catalog = Catalog(
        linked.ops,
        settings,
        warnings,
        overrides=tuple(checks.overrides),
        strict=options.strict,
        required=checks.required,
        cache_status=status,
        layers=tuple(layers),
        layer_mappings=linked.layer_mappings,
        tuning=Tuning.of(linked.tuned, plan, sources_checked.stale, settings.stale),
        digest=digest,
    )
    return CheckResult(catalog, ordered)


def _cache_outcome(
    store: Cache,
    read: CacheRead,
    linked: LinkedCatalog,
    clean: bool,
    targets: TargetChecks | None,
    sources: SourceDigests | None,
) -> CacheStatus:
    """What the cache does after a load: keep a hit as it is, or store what was linked and checked afresh."""
    if not clean:
        return CacheStatus(CacheOutcome.NOT_WRITTEN, read.reason, None, "the catalog has errors")
    entry = read.entry
    if entry is not None and targets is entry.targets and sources is entry.sources:  # its checks still held
        return CacheStatus(CacheOutcome.HIT, "", read.path)
    from .cache.store import CacheEntry

    return store.write(CacheEntry(linked, targets, sources), read)


def _fingerprints() -> Callable[[str], Fingerprint]:
    """A module's fingerprint now, each module's computed once a load: the target checks and the tuned tables'
    kernel sources read many of the same modules."""
    seen: dict[str, Fingerprint] = {}

    def current(module: str) -> Fingerprint:
        found = seen.get(module)
        if found is None:
            from .pyresolve import current_fingerprint

            found = seen[module] = current_fingerprint(module)
        return found

    return current


def _open_cache(
    sources: list[SourceFile], layers: list[CatalogLayer], diagnostics: Diagnostics, cache: bool | PathLike
) -> Cache | CacheStatus:
    """The cache entry for these files, or the status saying why the cache is off."""
    if cache is False:
        return CacheStatus(CacheOutcome.OFF, "cache=False")
    if diagnostics:
        return CacheStatus(CacheOutcome.OFF, "the files could not all be found and read")
    from .cache.store import Cache, CacheDir, default_dir

    directory = default_dir() if cache is True else CacheDir(Path(cache))
    if directory.path is None:
        return CacheStatus(CacheOutcome.OFF, directory.why_off)
    try:
        return Cache(directory.path, sources, layers)
    except OSError as exc:  # kcatalog's own files cannot be listed (e.g. imported from a zip): no key
        return CacheStatus(CacheOutcome.OFF, f"cannot fingerprint kcatalog's code ({exc})")


def _module_indexes(cache: bool | PathLike) -> ModuleIndexes | None:
    """Where target checks keep module indexes between runs: the cache directory (`cache` where it is one, else
    the default one, also for `cache=False`: an index is content-addressed, so it never changes what a check
    finds, only how fast); None with KCATALOG_NO_CACHE."""
    from .cache.directory import default_dir
    from .cache.module_indexes import ModuleIndexes

    directory = default_dir().path if isinstance(cache, bool) else Path(cache)
    return ModuleIndexes(directory) if directory is not None else None


def _link(
    sources: list[SourceFile], unread: list[CatalogFile], layers: list[CatalogLayer], diagnostics: Diagnostics
) -> LinkedCatalog:
    """Validate and link the files (`unread`: those found that could not be read), adding what is wrong to
    `diagnostics`."""
    from .link.stages import link_catalog  # PyYAML and pydantic: imported only when files must be parsed
    from .validate.validator import validate_sources

    return link_catalog(sources, validate_sources(sources, diagnostics, unread=unread), layers, diagnostics)
