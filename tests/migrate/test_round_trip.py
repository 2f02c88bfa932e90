"""A registry of the real shape (tests/registry_builder.py) through `kcatalog import-registry`: the catalog it
writes validates, holds exactly the registry's specs, answers like it through the drop-in registry, and selects
as the registry's own priority rules do; a broken target is pointed at by `kcatalog validate`."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from catalog_builder import Workspace, workspace_at
from registry_builder import GROUPS, write_registry

import kcatalog
from kcatalog.compat import registry as compat_registry
from kcatalog.model import KernelSpec
from kcatalog.tools.cli import main

PLATFORMS = {"cuda:9.0": ("cuda", (9, 0)), "cuda:10.0": ("cuda", (10, 0)), "hip:gfx942": ("hip", None)}


def _arch(value: tuple[int, int] | None) -> str | None:
    return None if value is None else f"{value[0]}.{value[1]}"


def registry_facts(spec: Any) -> tuple[str, str, str, frozenset[tuple[str, str | None, str | None]]]:
    """(op, backend, target, capabilities) of one of the throwaway registry's specs."""
    caps = frozenset((c.device.value, _arch(c.min_cuda_arch), _arch(c.max_cuda_arch)) for c in spec.capabilities)
    return spec.op, spec.backend.value, spec.target, caps


def catalog_facts(spec: KernelSpec) -> tuple[str, str, str, frozenset[tuple[str, str | None, str | None]]]:
    """The same of a catalog spec (no imported spec has exact arch lists)."""
    assert all(c.archs is None for c in spec.capabilities)
    return (
        spec.op,
        spec.backend,
        str(spec.target),
        frozenset((c.device, c.min_arch, c.max_arch) for c in spec.capabilities),
    )


class Imported:
    """The throwaway registry, imported, and the catalog `kcatalog import-registry` wrote from it."""

    def __init__(self, module: Any, catalog_dir: Path) -> None:
        self.module = module
        self.catalog_dir = catalog_dir


def import_registry(workspace: Workspace, name: str, **options: Any) -> tuple[int, Path]:
    """Write a throwaway registry into the workspace's site/ and import it: exit code and catalog directory."""
    files = write_registry(workspace.modules_dir, package=name, **options)
    importlib.invalidate_caches()
    workspace.module_names.append(name)
    out = workspace.root / f"{name}_catalog"
    return main(["import-registry", files.reference, "--out", str(out)]), out


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Imported]:
    with workspace_at(tmp_path_factory.mktemp("registry")) as workspace:
        code, out = import_registry(workspace, "kcmig_rt", ops_per_group=30)
        assert code == 0
        module = importlib.import_module("kcmig_rt.registry")
        yield Imported(module, out)


def test_the_throwaway_registry_has_the_real_shape(imported: Imported) -> None:
    specs = imported.module.REGISTRY.all_specs()
    assert len(specs) > 300
    assert {spec.op.partition(".")[0] for spec in specs} == set(GROUPS)
    assert all(":" in spec.target and "." in spec.target.partition(":")[2] for spec in specs)  # Class.method
    assert "KDA" in {spec.backend.value for spec in specs}
    assert any(not spec.auto for spec in specs)
    assert any(c.min_cuda_arch == (9, 0) for spec in specs for c in spec.capabilities)
    shared = imported.module.NV_FIRST
    lacking = [op for op, order in imported.module.REGISTRY.priority.items() if order is shared]
    assert any(not all((op, b) in imported.module.REGISTRY._specs for b in shared) for op in lacking)


def test_the_imported_catalog_validates(imported: Imported, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["validate", str(imported.catalog_dir)]) == 0
    *warnings, summary = capsys.readouterr().out.splitlines()
    # Ops the registry gives no order, where more than one backend may be picked (torch runs anywhere): KC219.
    original = imported.module.REGISTRY
    auto: dict[str, int] = {}
    for spec in original.all_specs():
        auto[spec.op] = auto.get(spec.op, 0) + spec.auto
    unordered = {op for op, count in auto.items() if count > 1 and op not in original.priority}
    assert unordered and {re.search(r"KC219 warning: op '([^']+)'", line)[1] for line in warnings} == unordered
    assert summary == f"All checks passed! ({len(unordered)} warnings)"


def test_loading_gives_exactly_the_registry_specs(imported: Imported) -> None:
    catalog = kcatalog.load_catalog(imported.catalog_dir, cache=False)
    expected = {registry_facts(spec) for spec in imported.module.REGISTRY.all_specs()}
    assert {catalog_facts(spec) for spec in catalog.specs()} == expected
    assert len(catalog.specs()) == len(expected)
    # Nothing invented: no signature, dtypes, description or reference.
    assert {(i.signature, i.dtypes, i.description, i.reference) for i in map(catalog.info, catalog)} == {
        (None, None, None, None)
    }


def test_the_drop_in_registry_answers_get_backend_like_the_original(imported: Imported) -> None:
    drop_in = compat_registry(imported.catalog_dir, cache=False)
    original = imported.module.REGISTRY
    for spec in original.all_specs():
        for backend in (spec.backend, spec.backend.value):  # the engine's enum, or its text
            found = drop_in.get_backend(spec.op, backend)
            # In the registry's own shape (backend and device with `.value`, (major, minor) arches), and the
            # catalog's spec beside it.
            assert registry_facts(found) == registry_facts(original.get_backend(spec.op, spec.backend))
            assert catalog_facts(found.spec) == registry_facts(spec)
            assert found.backend == spec.backend and found.backend == spec.backend.value
        assert drop_in.has(spec.op, spec.backend)
    assert drop_in.ops() == sorted({spec.op for spec in original.all_specs()})
    assert len(drop_in.all_specs()) == len(original.all_specs())
    first = original.all_specs()[0]
    assert [s.backend for s in drop_in.get(first.op)] == [
        s.backend.value for s in original.all_specs() if s.op == first.op
    ]
    loaded = drop_in.get_backend(first.op, first.backend).load()
    assert loaded(7) == 7  # spec.load() imports the kernel: the dotted Class.method


def test_drop_in_misses_list_what_exists_and_where(imported: Imported) -> None:
    drop_in = compat_registry(imported.catalog_dir, cache=False)
    with pytest.raises(
        KeyError,
        match=r"^no 'aiter' backend for op 'norm\.op_0' \(declared at .*norm\.yaml:8:3\); "
        r"available: torch, triton, KDA, torch_compile$",
    ):
        drop_in.get_backend("norm.op_0", imported.module.Backend.AITER)
    with pytest.raises(KeyError, match=r"no op 'norm\.op_99' \(did you mean 'norm\.op_9'\?\)\. Available: "):
        drop_in.get_backend("norm.op_99", imported.module.Backend.TORCH)
    assert drop_in.get("norm.op_99") == []  # as the registry's own get: callers test for an empty list
    assert not drop_in.has("norm.op_0", imported.module.Backend.AITER)


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_selection_follows_the_registry_priority_rules(imported: Imported, platform: str) -> None:
    catalog = kcatalog.load_catalog(imported.catalog_dir, cache=False)
    original = imported.module.REGISTRY
    device, arch = PLATFORMS[platform]
    assert original.priority
    for op in original.priority:  # the ops whose priority the registry declares
        theirs = original.select(op, device, arch)
        ours = catalog.select(op, platform).chosen
        assert (ours.backend if ours else None) == (theirs.backend.value if theirs else None), op


def test_a_backend_kept_out_of_auto_selection_is_used_only_when_named(imported: Imported) -> None:
    catalog = kcatalog.load_catalog(imported.catalog_dir, cache=False)
    assert catalog.settings.backends["torch_compile"].auto is False
    ops = [op for op in catalog if "torch_compile" in catalog.info(op).backends]
    assert ops and all(catalog.select(op, "cuda:9.0").require().backend != "torch_compile" for op in ops)
    assert catalog.select(ops[0], "cuda:9.0", backend="torch_compile").require().backend == "torch_compile"
    with catalog.use({ops[0]: "torch_compile"}):
        assert catalog.select(ops[0], "cuda:9.0").require().backend == "torch_compile"


def test_a_json_dump_converts_to_the_same_files(
    imported: Imported, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "registry.json"
    assert main(["dump-registry", "kcmig_rt.registry:REGISTRY", "--out", str(dump)]) == 0
    document = json.loads(dump.read_text(encoding="utf-8"))
    assert document["specs"][0]["backend"] == "torch" and document["source"] == "kcmig_rt.registry:REGISTRY"
    out = tmp_path / "from_json"
    assert main(["import-registry", "--from-json", str(dump), "--out", str(out)]) == 0
    written = {path.name: path.read_text(encoding="utf-8") for path in out.iterdir()}
    direct = {path.name: path.read_text(encoding="utf-8") for path in imported.catalog_dir.iterdir()}
    assert written == direct


def test_a_broken_target_is_pointed_at_by_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with workspace_at(tmp_path) as workspace:
        code, out = import_registry(workspace, "kcmig_broken", ops_per_group=6, broken=("attn", "op_4", "triton"))
        assert code == 0
        capsys.readouterr()
        text = (out / "attn.yaml").read_text(encoding="utf-8")
        target = '"kcmig_broken.kernels_attn:TritonKernels.op_4_typo"'
        line = text[: text.index(target)].count("\n") + 1
        col = text.index(target) - text.rfind("\n", 0, text.index(target))
        monkeypatch.chdir(tmp_path)
        assert main(["validate", out.name]) == 1
        *lines, summary = capsys.readouterr().out.splitlines()
    assert [line for line in lines if " KC219 warning: " not in line] == [  # the unordered ops aside
        f"{out.name}/attn.yaml:{line}:{col}: KC302 target 'kcmig_broken.kernels_attn:TritonKernels.op_4_typo': "
        "class 'TritonKernels' defines no 'op_4_typo' (did you mean 'op_4'?)",
    ]
    assert re.fullmatch(r"Found 1 error and [0-9]+ warnings in [0-9]+ files\.", summary)
