"""Catalog directories and files that every user may write are refused (KC004), by the rule the load cache
applies to its own directory and entries (read/permissions.py): anyone could plant a manifest there naming any
code. Group-writable ones (a team's checkout) and other users' (root's install) are read, as before; the cache,
which holds only this user's data, trusts neither."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import kcatalog
from kcatalog import CacheOutcome
from kcatalog.tools.cli import main

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="no POSIX permissions here")


LAYER = """\
kcatalog: 1
group: extra
ops:
  rms_norm:
    description: an op of a layer on top of the shipped catalog
    signature: "(x: Tensor, weight: Tensor) -> Tensor"
    reference: torch
    dtypes: [float32]
    backends:
      torch: {target: kcatalog.kernels.torch.layernorm:rms_norm}
"""


def layer(workspace: Any) -> Path:
    """A KCATALOG_PATH layer: one manifest using the shipped catalog's backends."""
    directory: Path = workspace.files({"extra.yaml": LAYER}, name="layer")
    return directory


def codes_and_messages(error: kcatalog.CatalogError) -> list[str]:
    return [str(d) for d in error.diagnostics]


def test_a_world_writable_kcatalog_path_directory_is_refused(workspace: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = layer(workspace)
    monkeypatch.setenv("KCATALOG_PATH", str(directory))
    assert "extra.rms_norm" in kcatalog.load_catalog(cache=False).ops()  # as it is: loaded, with the shipped layers
    for mode in (0o777, 0o1777, 0o757):  # sticky or not: others may add a manifest either way
        directory.chmod(mode)
        with pytest.raises(kcatalog.CatalogError) as refused:
            kcatalog.load_catalog(cache=False)
        assert codes_and_messages(refused.value) == [
            f"KC004 directory '{directory}' is writable by every user (mode {mode:04o}); refused"
        ]
    directory.chmod(0o755)


def test_a_world_writable_manifest_is_refused_in_every_way_it_is_read(
    workspace: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = workspace.minimal()
    (directory / "norm.yaml").chmod(0o646)
    monkeypatch.chdir(directory)
    refused = "norm.yaml:1:1: KC004 file is writable by every user (mode 0646); refused"
    for given in (".", "norm.yaml"):
        assert main(["validate", given]) == 1
        assert capsys.readouterr().out.splitlines() == [refused, "Found 1 error in 1 file."]
    extra = layer(workspace)
    (extra / "extra.yaml").chmod(0o666)
    monkeypatch.setenv("KCATALOG_PATH", str(extra))
    with pytest.raises(kcatalog.CatalogError) as raised:
        kcatalog.load_catalog()  # with the cache on: a refused file is never stored either
    assert codes_and_messages(raised.value) == [
        f"{extra}/extra.yaml:1:1: KC004 file is writable by every user (mode 0666); refused"
    ]


def test_a_world_writable_subdirectory_and_a_link_into_one_are_refused(workspace: Any) -> None:
    directory = workspace.minimal()
    vendor = directory / "vendor"
    vendor.mkdir()
    (vendor / "extra.yaml").write_text("kcatalog: 1\ngroup: extra\nops: {}\n")
    (directory / "linked.yaml").symlink_to(vendor / "extra.yaml")
    vendor.chmod(0o777)
    _, diagnostics = kcatalog.check_catalog([directory])
    assert [str(d) for d in diagnostics] == [
        f"KC004 directory '{vendor}' is writable by every user (mode 0777); refused"
    ]
    vendor.chmod(0o755)


def test_group_writable_catalogs_load_but_never_the_cache(workspace: Any, tmp_path: Path) -> None:
    """The one rule, drawn at two lines: a shared checkout (0775, 0664) is a catalog; the cache is private."""
    directory = workspace.minimal()
    directory.chmod(0o775)
    (directory / "norm.yaml").chmod(0o664)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o770)
    cache.chmod(0o770)
    catalog = kcatalog.load_catalog([directory], cache=cache)
    assert catalog.ops() == ["norm.rms_norm"]
    assert catalog.cache_status.outcome is CacheOutcome.NOT_WRITTEN
    assert catalog.cache_status.write_error == f"{cache} is writable by group or others"
