"""What `validate` accepts, first use must not reject, and what first use would run, the allow-list refuses."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from catalog_builder import Workspace

import kcatalog
from kcatalog import Diagnostic, KernelImportError, NoEligibleBackendError, codes
from kcatalog.tools.cli import main

ESCAPE = "kcatalog.kernels.torch.layernorm:torch.os.system"  # reaches os.system through an imported module


def _run_op(workspace: Workspace, target: str, *, allowed: str | None) -> Path:
    settings = "kcatalog: 1\nbackends: {torch: {description: reference}}\npriority: [torch]\n"
    if allowed is not None:
        settings += f"allowed_modules: [{allowed}]\n"
    manifest = f"""\
kcatalog: 1
group: x
ops:
  run:
    description: runs a command
    signature: "(command: str) -> int"
    reference: torch
    dtypes: [float32]
    backends:
      torch: {{target: "{target}"}}
"""
    return workspace.files({"kcatalog.yaml": settings, "x.yaml": manifest})


@pytest.mark.parametrize("allowed_in", ["settings", "caller"])
def test_an_object_defined_outside_the_allowed_modules_is_never_returned(allowed_in: str, workspace: Workspace) -> None:
    directory = _run_op(workspace, ESCAPE, allowed="kcatalog.kernels" if allowed_in == "settings" else None)
    options = {"allowed_modules": ["kcatalog.kernels"]} if allowed_in == "caller" else {}
    # Static checks off: this is the import-time half of the guarantee, which holds on its own.
    catalog = kcatalog.load_catalog([directory], check_targets=False, cache=False, **options)
    spec = catalog.info("x.run").backends["torch"]
    with pytest.raises(KernelImportError, match=r"defined in module '(posix|nt)', outside the allowed modules"):
        spec.load()
    with pytest.raises(NoEligibleBackendError, match=r"PermissionError: the object is defined in module"):
        catalog.kernel("x.run")


def test_without_an_allow_list_the_target_loads(workspace: Workspace) -> None:
    directory = _run_op(workspace, "os.path:join", allowed=None)
    catalog = kcatalog.load_catalog([directory], check_targets=False, cache=False)
    assert catalog.kernel("x.run") is os.path.join


def test_a_lone_string_is_one_path_one_prefix_and_one_op(workspace: Workspace) -> None:
    directory = workspace.minimal()
    assert kcatalog.check_catalog(str(directory)).catalog is not None  # not the characters of the path
    result = kcatalog.check_catalog(str(directory), allowed_modules="kcatalog.kernels", require="norm.rms_norm")
    assert result.catalog is not None, result.diagnostics
    refused = kcatalog.check_catalog(str(directory), allowed_modules="k")
    assert [d.code for d in refused.diagnostics] == [codes.TARGET_NOT_ALLOWED]
    missing = kcatalog.check_catalog(str(directory), require="norm.no_such_op")
    assert [d.code for d in missing.diagnostics] == [codes.REQUIRED_OP_MISSING]


def test_a_symlinked_settings_file_is_the_settings_file(workspace: Workspace) -> None:
    directory = workspace.minimal()
    profile = directory / "profiles" / "default.yaml.txt"
    profile.parent.mkdir()
    (directory / "kcatalog.yaml").rename(profile)
    (directory / "kcatalog.yaml").symlink_to(profile)
    result = kcatalog.check_catalog([directory])
    assert result.catalog is not None, [str(d) for d in result.diagnostics]
    assert result.catalog.backends == ("torch", "triton")


def test_a_catalog_below_a_thousand_directories_is_found(workspace: Workspace) -> None:
    directory = workspace.minimal()
    deep = directory
    for _ in range(1100):  # one level at a time: makedirs recurses, and would hit the limit this tests
        deep = deep / "d"
        deep.mkdir()
    (directory / "norm.yaml").rename(deep / "norm.yaml")
    try:
        result = kcatalog.check_catalog([directory])
        assert result.catalog is not None and result.catalog.ops() == ["norm.rms_norm"]
    finally:  # innermost first: rmtree, like makedirs, recurses, and pytest's cleanup would fail on this tree
        (deep / "norm.yaml").unlink()
        while deep != directory:
            deep.rmdir()
            deep = deep.parent


def test_a_new_load_sees_a_distribution_installed_since(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    op = workspace.op(
        {
            "torch": "kcatalog.kernels.torch.layernorm:rms_norm",
            "vendor": {"target": "kcatalog.kernels.torch.layernorm:rms_norm", "requires": ["kc-probe-vendor"]},
        }
    )
    directory = workspace.write({"op": op}, backends=["vendor", "torch"])
    before = kcatalog.load_catalog([directory], cache=False)
    assert before.select("g.op", "cpu").chosen.backend == "torch"  # type: ignore[union-attr]
    site = workspace.root / "dists"
    (site / "kc_probe_vendor-1.0.dist-info").mkdir(parents=True)
    (site / "kc_probe_vendor-1.0.dist-info" / "METADATA").write_text("Name: kc-probe-vendor\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(site))
    after = kcatalog.load_catalog([directory], cache=False)
    assert after.select("g.op", "cpu").chosen.backend == "vendor"  # type: ignore[union-attr]


def test_cache_clear_removes_only_its_own_entries(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("KCATALOG_CACHE_DIR", str(cache_dir))
    kcatalog.load_catalog([workspace.minimal()])
    foreign = [cache_dir / "notes.kcache", cache_dir / "notes.txt", cache_dir / ".someone.tmp"]
    for path in foreign:
        path.write_text("not kcatalog's")
    assert main(["cache", "--clear"]) == 0
    # The entry, and the index of the module its one target names (kept by the target checks).
    assert capsys.readouterr().out == f"removed 1 entry and 1 module index from {cache_dir}\n"
    assert all(path.exists() for path in foreign)


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permission bits")
def test_cache_clear_refuses_a_directory_others_may_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    victim = shared / "important.kcache"
    victim.write_bytes(b"kcatalog cache entry\n someone else's file, named like an entry")
    monkeypatch.setenv("KCATALOG_CACHE_DIR", str(shared))
    assert main(["cache", "--clear"]) == 1
    assert capsys.readouterr().err == (
        f"error: not cleared: {shared} is writable by group or others; kcatalog neither uses nor clears it\n"
    )
    assert victim.exists()


def test_a_diagnostic_is_one_line_whatever_its_text() -> None:
    diagnostic = Diagnostic(codes.TARGET_MODULE_NOT_FOUND, "module 'a\nb\rc' not found")
    assert str(diagnostic) == "KC301 module 'a\\nb\\rc' not found"
    assert "\n" not in str(diagnostic) and "\r" not in str(diagnostic)


def test_the_cli_escape_repro_runs_nothing(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's repro: `kcatalog test` with a sample `touch PWNED` against os.system behind the allow-list."""
    directory = _run_op(workspace, ESCAPE, allowed="kcatalog.kernels")
    manifest = directory / "x.yaml"
    manifest.write_text(
        manifest.read_text().replace(
            "    backends:", '    samples:\n      args: {command: "touch PWNED"}\n    backends:'
        )
    )
    monkeypatch.chdir(tmp_path)
    main(["test", "--catalog", str(directory)])
    assert not (tmp_path / "PWNED").exists()
    assert "x.run" not in sys.modules


def test_a_re_export_of_foreign_code_is_refused_by_validate_as_by_import(workspace: Workspace) -> None:
    """What validate accepts, first use must not reject: an allowed module re-exporting os.path.join."""
    workspace.module("kc_probe_reexport", "from os.path import join\n\n\ndef own(command):\n    return command\n")
    for target, expected in (("kc_probe_reexport:join", [codes.TARGET_NOT_ALLOWED]), ("kc_probe_reexport:own", [])):
        directory = _run_op(workspace, target, allowed="kc_probe_reexport")
        result = kcatalog.check_catalog([directory])
        assert [d.code for d in result.diagnostics] == expected, [str(d) for d in result.diagnostics]
    [diagnostic] = kcatalog.check_catalog(
        [_run_op(workspace, "kc_probe_reexport:join", allowed="kc_probe_reexport")]
    ).diagnostics
    assert diagnostic.message == (
        "target 'kc_probe_reexport:join' names an object defined in module 'posixpath', outside the allowed "
        "modules (kcatalog.yaml allowed_modules: kc_probe_reexport)"
    )
