"""The load cache: a warm load gives exactly what a cold one gives, and never serves stale or foreign data."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import kcatalog
from kcatalog import CacheOutcome, CacheStatus, Catalog, CatalogError
from kcatalog.cache import store as _cache  # the store's key inputs and MAX_ENTRIES: internal on purpose
from kcatalog.tools.inputs import samples_of

if TYPE_CHECKING:
    from catalog_builder import Workspace

SETTINGS = """\
kcatalog: 1
backends:
  torch: {description: reference}
  triton: {description: fused kernels}
  vendor: {description: a vendor's kernels}
priority: [triton, torch]
platform_priority: {hip: [torch, triton]}
policy: {required_backends: [torch], required_platforms: [cpu]}
require_of_all: {required_platforms: [cpu], require_reference: true}
"""

NORM = """\
kcatalog: 1
group: norm
ops:
  rms_norm:
    description: RMS norm over the last dim
    signature: "(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor"
    reference: torch
    dtypes: [float32, bfloat16]
    tolerance: {bfloat16: 1.0e-2}
    priority: [torch, triton]
    samples:
      sizes: {T: [1, 7], H: [64]}
      args: {x: {shape: [T, H]}, weight: {shape: [H], range: [0.5, 1.5]}, eps: 1.0e-6}
      prefill: {T: [4096]}
    backends:
      torch:
        target: kcatalog.kernels.torch.layernorm:rms_norm
      triton:
        target: kcatalog.kernels.triton.layernorm:rms_norm
        requires: [triton]
        capabilities: [{device: cuda, min_arch: "8.0", max_arch: "10.3"}, {device: hip, archs: [gfx942]}]
        dtypes: [bfloat16]
"""

VENDOR = """\
kcatalog: 1
group: vendor
extends:
  norm.rms_norm:
    backends:
      vendor:
        target: vendor_kernels_not_installed:rms_norm
"""


def state(catalog: Catalog) -> dict[str, Any]:
    """Everything a load yields that a caller can see, in comparable form."""
    return {
        "ops": {op: catalog.info(op) for op in catalog},
        "samples": {op: samples_of(catalog.info(op)) for op in catalog},
        "settings": catalog.settings,
        "backends": catalog.backends,
        "warnings": catalog.warnings,
    }


def outcome(catalog: Catalog) -> tuple[CacheOutcome, str]:
    """What the cache did for this load, and why."""
    return catalog.cache_status.outcome, catalog.cache_status.reason


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def catalog_dir(workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A three-file catalog (settings, a group, a vendor extension) in tmp_path/catalog; cwd is tmp_path."""
    monkeypatch.chdir(tmp_path)
    return workspace.files({"kcatalog.yaml": SETTINGS, "norm.yaml": NORM, "vendor.yaml": VENDOR})


@pytest.fixture
def load(cache_dir: Path) -> Callable[..., Catalog]:
    def load(paths: Any = None, **options: Any) -> Catalog:
        return kcatalog.load_catalog(paths, cache=cache_dir, **options)

    return load


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*.kcache"))


# -- a warm load is the cold load ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["shipped", "written"])
def test_a_warm_load_gives_what_a_cold_load_gives(
    which: str, catalog_dir: Path, load: Callable[..., Catalog], cache_dir: Path
) -> None:
    paths = None if which == "shipped" else [catalog_dir]
    cold = load(paths)
    assert outcome(cold) == (CacheOutcome.WRITTEN, "no entry yet")
    warm = load(paths)
    assert warm.cache_status == CacheStatus(CacheOutcome.HIT, "", entries(cache_dir)[0])
    uncached = kcatalog.load_catalog(paths, cache=False)
    assert uncached.cache_status == CacheStatus(CacheOutcome.OFF, "cache=False")
    assert state(warm) == state(cold) == state(uncached)
    assert len(entries(cache_dir)) == 1


def test_a_warm_load_imports_neither_yaml_nor_pydantic(
    catalog_dir: Path, load: Callable[..., Catalog], cache_dir: Path
) -> None:
    load([catalog_dir])
    code = textwrap.dedent(f"""
        import sys, kcatalog
        catalog = kcatalog.load_catalog([{str(catalog_dir)!r}], cache={str(cache_dir)!r})
        assert catalog.cache_status.outcome.value == "hit", catalog.cache_status
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("yaml", "pydantic", "pydantic_core", "torch")
                     or m in ("kcatalog.validate.schema", "kcatalog.validate.validator", "kcatalog.pyresolve.targets")))
        from kcatalog.tools.inputs import samples_of
        print(samples_of(catalog.info("norm.rms_norm")).sizes)  # the model comes back when it is asked for
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "{'T': (1, 7), 'H': (64,)}"]


def test_locations_follow_the_working_directory_of_the_warm_load(
    catalog_dir: Path, load: Callable[..., Catalog], monkeypatch: pytest.MonkeyPatch
) -> None:
    load([catalog_dir])
    monkeypatch.chdir(catalog_dir)
    warm = load([catalog_dir])
    assert warm.cache_status.outcome is CacheOutcome.HIT
    assert state(warm) == state(kcatalog.load_catalog([catalog_dir], cache=False))
    assert str(warm.info("norm.rms_norm").backends["vendor"].location) == "vendor.yaml:6:7"


# -- never stale -----------------------------------------------------------------------------------------


def test_any_edit_is_seen(catalog_dir: Path, load: Callable[..., Catalog], cache_dir: Path) -> None:
    load([catalog_dir])
    norm = catalog_dir / "norm.yaml"
    norm.write_text(NORM.replace("RMS norm over", "RMS norm, edited, over"), encoding="utf-8")
    edited = load([catalog_dir])
    assert outcome(edited) == (CacheOutcome.WRITTEN, "files or versions changed")
    assert edited.info("norm.rms_norm").description == "RMS norm, edited, over the last dim"
    stat = norm.stat()
    norm.write_text(NORM.replace("RMS norm over", "RMS norm EDITED over"), encoding="utf-8")
    os.utime(norm, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and time: only the contents differ
    assert load([catalog_dir]).info("norm.rms_norm").description == "RMS norm EDITED over the last dim"
    assert len(entries(cache_dir)) == 1  # an edit replaces the entry of these paths


def test_an_added_or_removed_file_is_seen(catalog_dir: Path, load: Callable[..., Catalog]) -> None:
    assert "vendor" in load([catalog_dir]).info("norm.rms_norm").backends
    (catalog_dir / "vendor.yaml").unlink()
    assert "vendor" not in load([catalog_dir]).info("norm.rms_norm").backends
    (catalog_dir / "more.yaml").write_text(NORM.replace("group: norm", "group: more"), encoding="utf-8")
    assert "more.rms_norm" in load([catalog_dir])
    assert load([catalog_dir]).cache_status.outcome is CacheOutcome.HIT


def test_a_change_of_kcatalog_code_or_of_the_parsers_misses(
    catalog_dir: Path, load: Callable[..., Catalog], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "package"
    package.mkdir()
    (package / "_link.py").write_text("# v1\n")
    monkeypatch.setattr(_cache, "_PACKAGE_DIR", package)
    load([catalog_dir])
    assert load([catalog_dir]).cache_status.outcome is CacheOutcome.HIT
    (package / "_link.py").write_text("# v2, longer\n")
    assert outcome(load([catalog_dir])) == (CacheOutcome.WRITTEN, "files or versions changed")
    assert load([catalog_dir]).cache_status.outcome is CacheOutcome.HIT
    monkeypatch.setattr(_cache, "_DEPENDENCIES", ("yaml", "pydantic", "pydantic_core", "json"))
    assert outcome(load([catalog_dir])) == (CacheOutcome.WRITTEN, "files or versions changed")


# -- checks that depend on this machine or the caller run on every load ----------------------------------


def test_targets_are_checked_on_a_warm_load(
    catalog_dir: Path, load: Callable[..., Catalog], workspace: Workspace
) -> None:
    module = workspace.module("cache_test_kernels", "def rms_norm(x, weight, eps=1e-6):\n    return x\n")
    norm = catalog_dir / "norm.yaml"
    norm.write_text(NORM.replace("kcatalog.kernels.torch.layernorm", module), encoding="utf-8")
    assert [w.code for w in load([catalog_dir]).warnings] == ["KC303"]  # the vendor's package is not installed
    (workspace.modules_dir / f"{module}.py").write_text("def renamed(x, weight, eps=1e-6):\n    return x\n")
    with pytest.raises(CatalogError) as caught:
        load([catalog_dir])
    assert [d.code for d in caught.value.diagnostics if d.is_error] == ["KC302"]
    assert f"target '{module}:rms_norm': module '{module}' defines no 'rms_norm'" in str(caught.value)


def test_target_checks_are_reused_while_their_modules_are_unchanged(
    catalog_dir: Path, load: Callable[..., Catalog], workspace: Workspace
) -> None:
    module = workspace.module("cache_test_kernels2", "def rms_norm(x, weight, eps=1e-6):\n    return x\n")
    (catalog_dir / "norm.yaml").write_text(NORM.replace("kcatalog.kernels.torch.layernorm", module))
    load([catalog_dir])
    assert load([catalog_dir]).cache_status.outcome is CacheOutcome.HIT
    (workspace.modules_dir / f"{module}.py").write_text("def rms_norm(x, weight, eps=1e-5):\n    return x\n")
    edited = load([catalog_dir])  # same size, maybe the same time: the source's bytes differ
    assert outcome(edited) == (CacheOutcome.REFRESHED, "target modules changed")
    assert load([catalog_dir]).cache_status.outcome is CacheOutcome.HIT
    assert [w.code for w in edited.warnings] == ["KC303"]
    vendor = workspace.module("vendor_kernels_not_installed", "def rms_norm(x, weight, eps=1e-6):\n    return x\n")
    installed = load([catalog_dir])  # the vendor's package appeared: its KC303 warning must go
    assert outcome(installed) == (CacheOutcome.REFRESHED, "target modules changed")
    assert installed.warnings == ()
    (workspace.modules_dir / f"{vendor}.py").unlink()
    assert [w.code for w in load([catalog_dir]).warnings] == ["KC303"]


def test_targets_not_checked_before_are_checked(catalog_dir: Path, load: Callable[..., Catalog]) -> None:
    load([catalog_dir], check_targets=False)
    assert [w.code for w in load([catalog_dir]).warnings] == ["KC303"]
    with pytest.raises(CatalogError, match="KC305"):
        load([catalog_dir], allowed_modules=["kcatalog"])  # refuses the vendor's target: not checked
    assert [w.code for w in load([catalog_dir]).warnings] == ["KC303"]


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"require": ["norm.layer_norm"]}, "KC501"),
        ({"require": {"norm.rms_norm": ["aot"]}}, "KC502"),
        ({"overrides": "norm.*=aot"}, "KC601"),
        ({"allowed_modules": ["kcatalog.kernels"]}, "KC305"),
    ],
)
def test_caller_checks_run_on_a_warm_load(
    options: dict[str, Any], code: str, catalog_dir: Path, load: Callable[..., Catalog]
) -> None:
    load([catalog_dir])
    with pytest.raises(CatalogError) as caught:
        load([catalog_dir], **options)
    assert {d.code for d in caught.value.diagnostics if d.is_error} == {code}
    assert load([catalog_dir]).cache_status.outcome is CacheOutcome.HIT


def test_environment_overrides_are_read_on_a_warm_load(
    catalog_dir: Path, load: Callable[..., Catalog], monkeypatch: pytest.MonkeyPatch
) -> None:
    load([catalog_dir])
    monkeypatch.setenv("KCATALOG_OVERRIDES", "norm.rms_norm=nope")
    with pytest.raises(CatalogError, match="KC601"):
        load([catalog_dir])
    monkeypatch.setenv("KCATALOG_OVERRIDES", "norm.rms_norm=vendor")
    warm = load([catalog_dir])
    assert warm.cache_status.outcome is CacheOutcome.HIT
    assert warm.select("norm.rms_norm", "cpu").chosen.backend == "vendor"  # type: ignore[union-attr]


def test_a_catalog_with_errors_is_never_stored(
    catalog_dir: Path, load: Callable[..., Catalog], cache_dir: Path
) -> None:
    (catalog_dir / "norm.yaml").write_text(NORM.replace("reference: torch", "reference: trition"), encoding="utf-8")
    for _ in range(2):
        with pytest.raises(CatalogError, match="KC204"):
            load([catalog_dir])
    assert entries(cache_dir) == []
    _, diagnostics = kcatalog.check_catalog([catalog_dir], cache=cache_dir)
    assert [d.code for d in diagnostics] == ["KC204", "KC303"]


# -- a bad entry costs a cold load, with the reason recorded ---------------------------------------------


def _body(entry: bytes) -> bytes:
    """The marshal data of an entry, after its header and checksum."""
    assert entry.startswith(_cache.MAGIC)
    return entry[len(_cache.MAGIC) + len(_cache.digest(b"")) :]


def _sealed(body: bytes) -> bytes:
    """An entry with a valid header and checksum around `body`: what a kcatalog of another layout writes."""
    return _cache.MAGIC + _cache.digest(body).encode() + body


def _truncated(entry: bytes) -> bytes:
    return entry[: len(entry) // 2]


def _garbage(entry: bytes) -> bytes:
    return b"\x00" + entry


def _target_rewritten(entry: bytes) -> bytes:  # the key intact, one target string changed in place
    target = b"kcatalog.kernels.torch.layernorm:rms_norm"
    assert target in entry
    return entry.replace(target, b"kcatalog.kernels.torch.layernorm:rms_nrom")


def _sealed_garbage(entry: bytes) -> bytes:
    return _sealed(b"\x00" + _body(entry))


def _wrong_shape(entry: bytes) -> bytes:
    return _sealed(marshal.dumps([1, 2]))


def _other_key(entry: bytes) -> bytes:
    _, files, data = marshal.loads(_body(entry))
    return _sealed(marshal.dumps(("0" * 64, files, data)))


def _right_key_wrong_data(entry: bytes) -> bytes:  # what a kcatalog with another layout would write
    key, files, (linked, *checks) = marshal.loads(_body(entry))  # checks: the target checks, the kernel digests
    number, settings, ops, *rest = linked  # the rest: the fields after ops, however many the model has
    wrong = [number, settings, {op_id: op[:5] for op_id, op in ops.items()}, *rest]
    return _sealed(marshal.dumps((key, files, (wrong, *checks))))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda entry: b"", "entry damaged (checksum mismatch)"),
        (_truncated, "entry damaged (checksum mismatch)"),
        (_garbage, "entry damaged (checksum mismatch)"),
        (_target_rewritten, "entry damaged (checksum mismatch)"),
        (_sealed_garbage, "entry unreadable (ValueError: bad marshal data"),
        (_wrong_shape, "files or versions changed"),
        (_other_key, "files or versions changed"),
        (_right_key_wrong_data, "entry malformed (TypeError: "),
    ],
)
def test_a_damaged_entry_is_a_recorded_miss(
    damage: Callable[[bytes], bytes], reason: str, catalog_dir: Path, load: Callable[..., Catalog], cache_dir: Path
) -> None:
    expected = state(load([catalog_dir]))
    [entry] = entries(cache_dir)
    entry.write_bytes(damage(entry.read_bytes()))
    again = load([catalog_dir])
    assert again.cache_status.outcome is CacheOutcome.WRITTEN and again.cache_status.path == entry
    assert again.cache_status.reason.startswith(reason)
    assert state(again) == expected
    assert load([catalog_dir]).cache_status.outcome is CacheOutcome.HIT


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership and permission bits")
@pytest.mark.parametrize("which", ["directory", "entry"])
def test_an_entry_others_could_write_is_not_trusted(
    which: str, catalog_dir: Path, load: Callable[..., Catalog], cache_dir: Path
) -> None:
    load([catalog_dir])
    [entry] = entries(cache_dir)
    target = cache_dir if which == "directory" else entry
    target.chmod(target.stat().st_mode | 0o022)
    status = load([catalog_dir]).cache_status
    assert status.reason == f"entry not trusted: {target} is writable by group or others"
    if which == "directory":
        assert status.outcome is CacheOutcome.NOT_WRITTEN
        assert status.write_error == f"{cache_dir} is writable by group or others"


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership")
def test_an_entry_of_another_user_is_not_trusted(
    catalog_dir: Path, load: Callable[..., Catalog], cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load([catalog_dir])
    monkeypatch.setattr(os, "getuid", lambda: os.stat(cache_dir).st_uid + 1)  # as seen by another user
    status = load([catalog_dir]).cache_status
    assert (status.outcome, status.reason) == (
        CacheOutcome.NOT_WRITTEN,
        f"entry not trusted: {cache_dir} belongs to another user",
    )
    assert status.write_error == f"{cache_dir} belongs to another user"


def test_a_cache_that_cannot_be_written_only_costs_time(catalog_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    catalog = kcatalog.load_catalog([catalog_dir], cache=blocker / "cache")
    assert catalog.cache_status.outcome is CacheOutcome.NOT_WRITTEN
    assert catalog.cache_status.reason.startswith("entry unreadable (NotADirectoryError: ")
    assert catalog.cache_status.write_error.startswith("NotADirectoryError: ")
    assert "norm.rms_norm" in catalog


def test_the_environment_chooses_or_disables_the_cache(
    catalog_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_path / "chosen"
    monkeypatch.setenv("KCATALOG_CACHE_DIR", str(chosen))
    kcatalog.load_catalog([catalog_dir])
    assert kcatalog.load_catalog([catalog_dir]).cache_status == CacheStatus(CacheOutcome.HIT, "", entries(chosen)[0])
    assert (chosen.stat().st_mode & 0o777) == 0o700
    assert (entries(chosen)[0].stat().st_mode & 0o777) == 0o600
    monkeypatch.setenv("KCATALOG_NO_CACHE", "1")
    assert kcatalog.load_catalog([catalog_dir]).cache_status == CacheStatus(
        CacheOutcome.OFF, "KCATALOG_NO_CACHE is set"
    )
    monkeypatch.delenv("KCATALOG_CACHE_DIR")
    monkeypatch.setenv("KCATALOG_NO_CACHE", "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    kcatalog.load_catalog([catalog_dir])
    assert len(entries(tmp_path / "xdg" / "kcatalog")) == 1


def test_without_a_home_directory_the_cache_is_off(catalog_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KCATALOG_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)  # what it returns when nothing names a home
    catalog = kcatalog.load_catalog([catalog_dir])
    assert catalog.cache_status == CacheStatus(CacheOutcome.OFF, "no home directory (set KCATALOG_CACHE_DIR)")
    assert not (catalog_dir.parent / "~").exists()


def test_validation_reads_every_file_by_default(catalog_dir: Path, load: Callable[..., Catalog]) -> None:
    load([catalog_dir])
    catalog, _ = kcatalog.check_catalog([catalog_dir])
    assert catalog is not None and catalog.cache_status == CacheStatus(CacheOutcome.OFF, "cache=False")


def test_two_python_environments_keep_an_entry_each(
    catalog_dir: Path, load: Callable[..., Catalog], cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load([catalog_dir])
    here = sys.prefix
    monkeypatch.setattr(sys, "prefix", "/elsewhere/venv")
    assert outcome(load([catalog_dir])) == (CacheOutcome.WRITTEN, "no entry yet")
    assert load([catalog_dir]).cache_status.outcome is CacheOutcome.HIT
    monkeypatch.setattr(sys, "prefix", here)
    assert load([catalog_dir]).cache_status.outcome is CacheOutcome.HIT
    assert len(entries(cache_dir)) == 2


def test_old_entries_are_pruned(
    catalog_dir: Path, load: Callable[..., Catalog], cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cache, "MAX_ENTRIES", 3)
    for number in range(5):
        (catalog_dir / f"extra{number}.yaml").write_text(NORM.replace("group: norm", f"group: extra{number}"))
        load([catalog_dir / "kcatalog.yaml", catalog_dir / f"extra{number}.yaml"])
    assert len(entries(cache_dir)) == 3


def test_processes_loading_at_once_all_succeed(catalog_dir: Path, cache_dir: Path) -> None:
    code = (
        f"import kcatalog; c = kcatalog.load_catalog([{str(catalog_dir)!r}], cache={str(cache_dir)!r}); "
        "print(c.cache_status.outcome.name, len(c))"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(6)]
    outputs = [proc.communicate()[0].strip() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert {out.split()[1] for out in outputs} == {"1"}
    assert len(entries(cache_dir)) == 1
    assert kcatalog.load_catalog([catalog_dir], cache=cache_dir).cache_status.outcome is CacheOutcome.HIT
    assert not list(cache_dir.glob(".*.tmp"))
