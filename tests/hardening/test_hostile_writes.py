"""What kcatalog writes, attacked: `import-registry` given hostile dumps and hostile output directories, `plan`
given backends YAML would read as something else. Every write is whole or absent, never through a link planted
beside it; what is written validates, or nothing is written and a diagnostic says why."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from catalog_builder import Workspace

import kcatalog
from kcatalog.migrate import convert as convert_module
from kcatalog.migrate.source import RegistryDump
from kcatalog.platform import Platform
from kcatalog.read.yaml_nodes import parse_yaml
from kcatalog.tools.cli import main
from kcatalog.tools.commands.common import command_line, write_output

TARGET = "kcatalog.kernels.torch.layernorm:rms_norm"


def spec(op: str = "norm.rms_norm", backend: str = "torch", **extra: Any) -> dict[str, Any]:
    return {"op": op, "backend": backend, "target": TARGET, "capabilities": [], **extra}


def dump_file(tmp_path: Path, *specs: dict[str, Any], source: str = "tests:registry") -> Path:
    path = tmp_path / "dump.json"
    path.write_text(RegistryDump(source, tuple(specs)).to_json(), encoding="utf-8")
    return path


def import_registry(dump: Path, out: Path, *extra: str) -> int:
    return main(["import-registry", "--from-json", str(dump), "--out", str(out), *extra])


def contents(directory: Path) -> dict[str, bytes]:
    """Every entry of a directory, links as their targets' text, so that a test sees all that changed."""
    return {
        path.name: (b"-> " + os.readlink(path).encode()) if path.is_symlink() else path.read_bytes()
        for path in directory.iterdir()
    }


def errors(directory: Path) -> list[str]:
    _, diagnostics = kcatalog.check_catalog(directory, check_targets=False)
    return [str(d) for d in diagnostics if d.is_error]


# -- YAML injection ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line_break", ["\n", "\r", "\u2028", "\x85", "\r\n"])
def test_a_line_break_in_a_dump_never_becomes_yaml_structure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line_break: str
) -> None:
    injected = "os:system"
    source = f"vendor{line_break}extends:{line_break}  norm.rms_norm:{line_break}    replaces:{line_break}"
    source += f"      torch: {{target: {injected}}}{line_break}# "
    out = tmp_path / "out"
    assert import_registry(dump_file(tmp_path, spec(), source=source), out) == 0
    capsys.readouterr()
    for path in out.iterdir():
        text = path.read_text(encoding="utf-8")
        assert injected not in repr(yaml.safe_load(text))  # not in any value
        header = text.splitlines()[1]  # below the schema's modeline: one line, the source's breaks escaped
        assert header.startswith("# Imported by `kcatalog import-registry` from vendor\\")
    catalog = kcatalog.load_catalog(out, cache=False)
    assert str(catalog.info("norm.rms_norm").backends["torch"].target) == TARGET


# -- what import-registry writes validates, or is not written -----------------------------------------------------


@pytest.mark.parametrize("archs", [["gfx942\n"], ["gfx 942"], ["gfx942", "x\u2028y"], ["9.0 "]])
def test_archs_the_format_cannot_hold_are_left_out_with_a_diagnostic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], archs: list[str]
) -> None:
    bad = spec(backend="aiter", capabilities=[{"device": "hip", "archs": archs}])
    out = tmp_path / "out"
    assert import_registry(dump_file(tmp_path, spec(), bad), out) == 1
    printed = capsys.readouterr().out
    assert "KC705 spec 1 (op 'norm.rms_norm', backend 'aiter'): capability" in printed
    assert "not architecture names" in printed
    assert errors(out) == []
    assert set(kcatalog.load_catalog(out, cache=False).info("norm.rms_norm").backends) == {"torch"}


def test_a_name_of_1100_characters_is_written_so_that_it_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_name = "x" * 1100
    out = tmp_path / "out"
    assert import_registry(dump_file(tmp_path, spec(f"norm.{long_name}", backend="b" * 1100)), out) == 0
    capsys.readouterr()
    assert errors(out) == []
    info = kcatalog.load_catalog(out, cache=False).info(f"norm.{long_name}")
    assert list(info.backends) == ["b" * 1100]


def test_a_group_named_after_the_settings_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = import_registry(dump_file(tmp_path, spec(), spec("kcatalog.x", backend="torch")), out)
    printed = capsys.readouterr().out
    assert code == 1
    assert (
        "KC702 spec 1 (op 'kcatalog.x', backend 'torch'): its group would be written to kcatalog.yaml, the "
        "settings file; left out" in printed
    )
    assert sorted(p.name for p in out.iterdir()) == ["kcatalog.yaml", "norm.yaml"]
    assert errors(out) == []  # the settings file is the settings, not a manifest written over it


def test_a_group_too_long_for_a_file_name_is_refused_and_nothing_half_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = import_registry(dump_file(tmp_path, spec("g" * 300 + ".op")), out)
    captured = capsys.readouterr()
    assert code == 1
    assert "its group makes a file name of 305 characters, over the 255 that file systems allow" in captured.out
    assert "error: none of the 1 registry spec could be written" in captured.err
    assert not out.exists()


def test_what_would_not_validate_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check of what is about to be written catches what the converter misses: nothing is written."""
    real = convert_module._manifest_text

    def broken(*args: Any) -> str:
        return real(*args).replace("group: norm", "group: Norm")

    monkeypatch.setattr(convert_module, "_manifest_text", broken)
    out = tmp_path / "out"
    assert import_registry(dump_file(tmp_path, spec()), out) == 1
    captured = capsys.readouterr()
    assert f"{out / 'norm.yaml'}:6:8: KC103 'group': should be a lower_snake_case name, got str 'Norm'" in captured.out
    assert f"error: the catalog would not validate (1 error above); nothing written to {out}" in captured.err
    assert not out.exists()


# -- atomic writes ------------------------------------------------------------------------------------------------


def test_a_link_planted_at_a_temporary_name_is_never_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("kcatalog.yaml", "norm.yaml"):  # every name a writer could have predicted
        for planted in (f".{name}.tmp", f".{name}.{os.getpid()}.tmp"):
            (out / planted).symlink_to(victim)
    assert import_registry(dump_file(tmp_path, spec()), out) == 0
    capsys.readouterr()
    assert victim.read_text(encoding="utf-8") == "precious\n"
    assert errors(out) == []
    assert all((out / name).is_file() and not (out / name).is_symlink() for name in ("kcatalog.yaml", "norm.yaml"))


def test_an_output_file_is_never_written_through_a_link_planted_beside_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n", encoding="utf-8")
    plan = tmp_path / "plan.yaml"
    for planted in (f".{plan.name}.tmp", f".{plan.name}.{os.getpid()}.tmp"):  # the names a writer could predict
        (tmp_path / planted).symlink_to(victim)
    write_output(plan, "kcatalog: 1\n")
    assert victim.read_text(encoding="utf-8") == "precious\n"
    assert plan.read_text(encoding="utf-8") == "kcatalog: 1\n"


def test_a_write_that_fails_part_way_leaves_the_earlier_import_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    earlier = dump_file(tmp_path, spec(), spec("moe.fused", backend="triton"), spec("act.silu"))
    assert import_registry(earlier, out) == 0
    before = contents(out)
    renames = 0
    real = os.replace

    def second_fails(source: Any, destination: Any) -> None:
        nonlocal renames
        renames += 1
        if renames == 2:  # the settings file renamed already, the first manifest not
            raise OSError(28, "No space left on device")
        real(source, destination)

    monkeypatch.setattr(os, "replace", second_fails)
    later = dump_file(tmp_path, spec(backend="aiter"), spec("moe.fused", backend="KDA"))  # act.yaml goes
    assert import_registry(later, out, "--force") == 2
    assert "cannot write" in capsys.readouterr().err
    monkeypatch.undo()
    assert contents(out) == before  # the earlier import as it was: no file of the later one, no temporary
    assert errors(out) == []


def test_a_write_interrupted_part_way_leaves_no_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after the first file is renamed: the directory is left as it was found (empty)."""
    real = os.replace
    calls = []

    def interrupted(source: Any, destination: Any) -> None:
        calls.append(destination)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(source, destination)

    monkeypatch.setattr(os, "replace", interrupted)
    out = tmp_path / "out"
    out.mkdir()
    assert import_registry(dump_file(tmp_path, spec(), spec("moe.fused")), out) == 130
    assert list(out.iterdir()) == []


# -- plans --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["KDA", "no", "on", "Null", "True", "NO"])
def test_a_plan_pins_any_backend_the_catalog_may_name(
    workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    directory = workspace.write({"op": workspace.op({backend: TARGET})}, backends=[backend])
    plan = tmp_path / "plan.yaml"
    assert main(["plan", str(directory), "--platform", "cpu", "--out", str(plan)]) == 0
    capsys.readouterr()
    catalog = kcatalog.load_catalog(directory, cache=False, plan=plan)
    selection = catalog.select("g.op", "cpu", "float32")
    assert (selection.chosen.backend if selection.chosen else None, selection.decided_by) == (backend, f"plan {plan}")


def test_a_plan_for_an_arch_written_with_two_digits_applies(
    workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = workspace.write({"op": workspace.op({"torch": TARGET, "other": TARGET})}, backends=["torch", "other"])
    plan = tmp_path / "plan.yaml"
    assert main(["plan", str(directory), "--platform", "cuda:9.00", "--out", str(plan)]) == 0
    capsys.readouterr()
    parsed = parse_yaml(str(plan), plan.read_text(encoding="utf-8"))
    assert not isinstance(parsed, kcatalog.Diagnostic)
    assert parsed.data["plan"]["platform"] == "cuda:9.0"  # as the machine reports it: the plan applies there
    assert Platform.parse("cuda:09.00") == Platform("cuda", "9.0")


def test_a_plan_records_any_command_line(
    workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = workspace.minimal()
    plan = tmp_path / "plan\n  digest: 0000000000000000\u2028\x85\U0001f600.yaml"  # line breaks, an emoji
    assert main(["plan", str(directory), "--platform", "cpu", "--out", str(plan)]) == 0
    capsys.readouterr()
    parsed = parse_yaml("plan", plan.read_text(encoding="utf-8"))
    assert not isinstance(parsed, kcatalog.Diagnostic)
    body = parsed.data["plan"]
    assert set(body) == {"platform", "digest", "kcatalog", "command", "ops"}
    assert body["digest"] == kcatalog.load_catalog(directory, cache=False).digest
    assert body["command"] == shlex.join(["kcatalog", "plan", str(directory), "--platform", "cpu", "--out", str(plan)])
    kcatalog.load_catalog(directory, cache=False, plan=plan)


def test_a_command_line_holding_bytes_that_are_not_utf8_can_be_written() -> None:
    argv = ["plan", "--out", "plan-\udcff.yaml"]  # how Python hands over the byte 0xff of a file name
    assert command_line(argparse.Namespace(argv=argv)) == "kcatalog plan --out 'plan-\\xff.yaml'"
