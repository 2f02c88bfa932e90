"""Malformed registry dumps and registries for `import-registry` and `dump-registry`: JSON nested past the parser,
integers longer than int() converts, values nested past the conversion's walk, objects that refer to themselves
or raise from their repr. Each is a usage error saying what is wrong (exit 2, nothing written), never an internal
error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from catalog_builder import Workspace

from kcatalog.tools.cli import main

SPEC = {"op": "norm.rms_norm", "backend": "torch", "target": "m:f", "capabilities": []}


def dump(**fields: object) -> str:
    return json.dumps({"kcatalog_registry_dump": 1, "specs": [SPEC], **fields})


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], out: Path) -> str:
    """The command exits 2 with a usage error, writes nothing, and prints no traceback; its error line."""
    code = main(argv)
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert "internal error" not in captured.err and "Traceback" not in captured.err
    assert not out.exists()
    return captured.err.splitlines()[-1]


def nested(depth: int, open_: str = "[", close: str = "]", inner: str = "") -> str:
    return open_ * depth + inner + close * depth


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"kcatalog_registry_dump": 1, "specs": ' + nested(100_000) + "}",
            "not a registry dump: nested deeper than the JSON parser can follow",
        ),
        (
            dump(priority=0).replace('"priority": 0', '"priority": ' + "9" * 5000),
            "not a registry dump: Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits",
        ),
        (
            dump(priority=0).replace('"priority": 0', '"kcatalog_registry_dump": ' + "1" * 5000),
            "not a registry dump: Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits",
        ),
        (  # parsed, but the conversion's reprs and json.dumps recurse over it
            dump(priority=0).replace('"priority": 0', '"priority": ' + nested(800)),
            'not a registry dump: ["priority"][0][0][0][0]... is nested deeper than 64 levels',
        ),
        (
            json.dumps(
                {
                    "kcatalog_registry_dump": 1,
                    "specs": [{**SPEC, "not_imported": {"x\n\x1b[2J": json.loads(nested(70, '{"a": ', "}", "1"))}}],
                }
            ),
            'not a registry dump: ["specs"][0]["not_imported"]["x\\n\\u001b[2J"]["a"]... is nested deeper than 64 '
            "levels",
        ),
    ],
    ids=["nested-100000", "int-5000-digits", "format-5000-digits", "nested-800", "nested-70-odd-key"],
)
def test_a_malformed_dump_is_a_usage_error(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "dump.json"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    assert refused(capsys, ["import-registry", "--from-json", str(path), "--out", str(out)], out) == (
        f"error: {path}: {message}"
    )


def test_a_dump_nested_within_the_limit_is_converted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dump.json"
    path.write_text(dump(specs=[{**SPEC, "not_imported": {"x": json.loads(nested(60))}}]), encoding="utf-8")
    code = main(["import-registry", "--from-json", str(path), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0 and "KC707 warning: attribute 'x' of 1 spec is not read by the importer; not imported" in out
    assert (tmp_path / "out" / "norm.yaml").is_file()


REGISTRIES = """\
class Spec:
    def __init__(self, **fields):
        self.__dict__.update(op="norm.rms_norm", backend="torch", target="m:f", capabilities=[], **fields)


class Registry:
    def __init__(self, *specs):
        self.specs = list(specs)

    def all_specs(self):
        return self.specs


class Loud:
    def __repr__(self):
        raise RuntimeError("no repr today")


cyclic = Registry(Spec())
cyclic.specs[0].registry = cyclic  # refers back to the registry: an endless walk
deep = Registry(Spec(extra=eval("[" * 200 + "]" * 200)))
loud = Registry(Spec(extra=Loud()))
"""


@pytest.mark.parametrize(
    ("registry", "message"),
    [
        ("cyclic", "a registry value is nested deeper than 64 levels (or refers to itself)"),
        ("deep", "a registry value is nested deeper than 64 levels (or refers to itself)"),
        ("loud", "cannot be read: RuntimeError: no repr today"),
    ],
)
@pytest.mark.parametrize("command", ["dump-registry", "import-registry"])
def test_a_registry_that_cannot_be_walked_is_a_usage_error(
    command: str, registry: str, message: str, workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace.module("kc_hostile_registries", REGISTRIES)
    out = tmp_path / "out"
    reference = f"kc_hostile_registries:{registry}"
    line = refused(capsys, [command, reference, "--out", str(out)], out)
    separator = ": " if message.startswith("a ") else " "
    assert line == f"error: registry {reference!r}{separator}{message}"
