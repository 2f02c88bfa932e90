"""The module indexes target checks keep in the cache directory (cache/module_indexes.py): validating again reads
them instead of parsing, never serves an index of other bytes or from a directory others may write, and
`kcatalog cache --clear` removes them."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import kcatalog
from kcatalog.cache import module_indexes
from kcatalog.pyresolve import target_modules
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

KERNELS = """\
class Norm:
    def forward_native(self, x):
        return x

NORM = Norm()
"""


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("KCATALOG_CACHE_DIR", str(directory))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # a tree never imported: no bytecode vouches for it
    return directory


@pytest.fixture
def catalog(workspace: Workspace) -> Path:
    workspace.module("kcmi_kernels", KERNELS)
    ops = {"norm": workspace.op({"torch": "kcmi_kernels:NORM.forward_native", "triton": "kcmi_kernels:NORM.nope"})}
    return workspace.write(ops, backends=["torch", "triton"])


def diagnostics(catalog: Path) -> list[str]:
    """What `kcatalog validate` reports (check_catalog with its defaults: the load cache off)."""
    return [f"{d.code} {d.message}" for d in kcatalog.check_catalog([catalog]).diagnostics]


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The modules parsed (their origins), as they are parsed."""
    seen: list[str] = []
    real = target_modules.syntax_tree

    def counting(source: bytes, origin: str) -> object:
        seen.append(Path(origin).name)
        return real(source, origin)

    monkeypatch.setattr(target_modules, "syntax_tree", counting)
    return seen


def indexes(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / module_indexes.SUBDIRECTORY).glob(f"*{module_indexes.SUFFIX}"))


def test_validating_again_reads_the_index_instead_of_parsing(catalog: Path, cache_dir: Path, parses: list[str]) -> None:
    cold = diagnostics(catalog)
    assert parses == ["kcmi_kernels.py"]
    assert "KC304" in cold[0] and "'NORM' is the result of a call to 'Norm'" in cold[0]
    [written] = indexes(cache_dir)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert stat.S_IMODE(written.parent.stat().st_mode) == 0o700
    assert diagnostics(catalog) == cold
    assert parses == ["kcmi_kernels.py"]  # not again


def test_an_edited_source_is_checked_afresh(
    catalog: Path, cache_dir: Path, workspace: Workspace, parses: list[str]
) -> None:
    diagnostics(catalog)
    workspace.module("kcmi_kernels", KERNELS + "def broken(:\n")
    assert any(line.startswith("KC306 ") for line in diagnostics(catalog))
    assert parses == ["kcmi_kernels.py", "kcmi_kernels.py"]
    assert len(indexes(cache_dir)) == 1  # a source with a syntax error is never recorded


def test_a_damaged_index_is_a_miss(catalog: Path, cache_dir: Path, parses: list[str]) -> None:
    cold = diagnostics(catalog)
    [written] = indexes(cache_dir)
    data = bytearray(written.read_bytes())
    data[-1] ^= 1
    written.write_bytes(bytes(data))
    assert diagnostics(catalog) == cold
    assert len(parses) == 2
    assert diagnostics(catalog) == cold  # the damaged one was removed and written again, whole
    assert len(parses) == 2


def test_a_half_written_index_is_a_miss_and_written_again(catalog: Path, cache_dir: Path, parses: list[str]) -> None:
    cold = diagnostics(catalog)
    [written] = indexes(cache_dir)
    whole = written.read_bytes()
    written.write_bytes(whole[: len(whole) // 2])  # as a run killed while writing it leaves it
    assert diagnostics(catalog) == cold
    assert written.read_bytes() == whole and len(parses) == 2


def test_an_index_is_never_written_through_a_link_planted_at_its_name(
    catalog: Path, cache_dir: Path, tmp_path: Path
) -> None:
    diagnostics(catalog)
    [written] = indexes(cache_dir)
    written.unlink()
    elsewhere = tmp_path / "elsewhere"
    written.symlink_to(elsewhere)
    diagnostics(catalog)
    assert not elsewhere.exists() and written.is_symlink()


def test_indexes_others_may_write_are_neither_read_nor_written(
    catalog: Path, cache_dir: Path, parses: list[str]
) -> None:
    cold = diagnostics(catalog)
    [written] = indexes(cache_dir)
    written.parent.chmod(0o770)
    assert diagnostics(catalog) == cold
    written.unlink()
    assert diagnostics(catalog) == cold
    assert len(parses) == 3 and indexes(cache_dir) == []


def test_no_cache_keeps_no_index(catalog: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KCATALOG_NO_CACHE", "1")
    diagnostics(catalog)
    assert not cache_dir.exists()


def test_a_cache_directory_given_keeps_them_there(catalog: Path, cache_dir: Path, tmp_path: Path) -> None:
    kcatalog.check_catalog([catalog], cache=tmp_path / "chosen")
    assert len(indexes(tmp_path / "chosen")) == 1 and not cache_dir.exists()


def test_the_oldest_beyond_the_limit_are_removed(
    workspace: Workspace, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module_indexes, "MAX_INDEXES", 2)
    for number in range(4):
        workspace.module(f"kcmi_many{number}", KERNELS)
        ops = {f"norm{number}": workspace.op({"torch": f"kcmi_many{number}:Norm.forward_native"})}
        diagnostics(workspace.write(ops, backends=["torch"], name=f"catalog{number}"))
    assert len(indexes(cache_dir)) == 2


def test_cache_clear_removes_them(
    catalog: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str], run_main: Callable[..., int]
) -> None:
    diagnostics(catalog)
    (cache_dir / module_indexes.SUBDIRECTORY / "unrelated.kidx").write_text("not ours")
    assert run_main("cache", "--clear") == 0
    assert capsys.readouterr().out == f"removed 0 entries and 1 module index from {cache_dir}\n"
    assert indexes(cache_dir) == [cache_dir / module_indexes.SUBDIRECTORY / "unrelated.kidx"]


@pytest.fixture
def run_main() -> Callable[..., int]:
    return lambda *argv: main(list(argv))
