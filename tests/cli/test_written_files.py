"""Files kcatalog writes travel: each names its JSON Schema the way an editor resolves it from where it lands (a
relative path inside the source tree holding the schemas, else the published URL), and a write is whole or absent."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from catalog_builder import Workspace, workspace_at
from registry_builder import write_registry

import kcatalog
from kcatalog.tools.cli import main
from kcatalog.tools.commands.common import write_output
from kcatalog.tools.schema_refs import SCHEMA_BASE_URL, modeline, schema_reference
from kcatalog.validate.jsonschema import shipped_schema_dir

SCHEMAS = shipped_schema_dir().resolve()  # in a source checkout: the repository's schemas/


def published(name: str) -> str:
    assert (SCHEMAS / name).is_file()  # the URL names a schema that exists
    return f"# yaml-language-server: $schema={SCHEMA_BASE_URL}{name}"


def test_inside_the_source_tree_a_file_names_its_schema_by_a_relative_path() -> None:
    table = SCHEMAS.parent / "catalog" / "tuned" / "cpu.yaml"  # where `kcatalog tune --out catalog/tuned` writes
    assert schema_reference("tuned.v1.json", table) == "../../schemas/tuned.v1.json"
    assert (table.parent / "../../schemas/tuned.v1.json").resolve().is_file()
    shipped = shipped_schema_dir().parent / "catalog" / "tuned" / "cuda_9.0.yaml"  # the table shipped, written so
    assert shipped.read_text(encoding="utf-8").splitlines()[0] == modeline("tuned.v1.json", shipped)


def test_outside_it_a_file_names_the_published_schema(tmp_path: Path) -> None:
    assert schema_reference("plan.v1.json", tmp_path / "plan.yaml") == SCHEMA_BASE_URL + "plan.v1.json"
    assert schema_reference("plan.v1.json", None) == SCHEMA_BASE_URL + "plan.v1.json"  # printed: lands anywhere


def test_a_tuned_table_names_its_schema_from_where_it_is_written(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "tuned"
    args = ["tune", "layernorm.rms_norm", "--device", "cpu", "--dtype", "float32", "--buckets", "1", "--out", str(out)]
    assert main(args) == 0
    assert (out / "cpu.yaml").read_text(encoding="utf-8").splitlines()[0] == published("tuned.v1.json")


def test_a_plan_names_its_schema(workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = workspace.minimal()
    plan = tmp_path / "plan.yaml"
    assert main(["plan", "--platform", "cpu", str(directory), "--out", str(plan)]) == 0
    assert plan.read_text(encoding="utf-8").splitlines()[0] == published("plan.v1.json")
    kcatalog.load_catalog(directory, cache=False, plan=plan)  # the line is a comment: the plan still loads
    capsys.readouterr()
    assert main(["plan", "--platform", "cpu", str(directory)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == published("plan.v1.json")


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    with workspace_at(tmp_path / "registry") as workspace:
        files = write_registry(workspace.modules_dir, package="kcmig_schema_refs", ops_per_group=2)
        workspace._added(files.package)
        yield files.reference


def test_an_imported_catalog_names_its_schemas(registry: str, tmp_path: Path) -> None:
    out = tmp_path / "imported"
    assert main(["import-registry", registry, "--out", str(out)]) == 0
    for path in sorted(out.iterdir()):
        kind = "settings.v1.json" if path.name == "kcatalog.yaml" else "manifest.v1.json"
        assert path.read_text(encoding="utf-8").splitlines()[0] == published(kind), path.name
    assert main(["import-registry", registry, "--out", str(out), "--force"]) == 0  # still known as an import's


def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while a table is rewritten: the file holds the old text or the new, never part of one."""
    target = tmp_path / "cpu.yaml"
    target.write_text("old table\n", encoding="utf-8")

    def cut_short(descriptor: int) -> None:  # Ctrl-C with half the text on disk, before it is renamed
        os.ftruncate(descriptor, 8)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", cut_short)
    with pytest.raises(KeyboardInterrupt):
        write_output(target, "new table, much longer than the old one\n")
    monkeypatch.undo()
    assert target.read_text(encoding="utf-8") == "old table\n"
    assert [path.name for path in tmp_path.iterdir()] == ["cpu.yaml"]  # no temporary left behind
