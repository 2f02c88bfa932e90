"""File names and user strings in every output format: a line break, carriage return, ANSI escape, Unicode line
separator, bidirectional override or undecodable byte in a catalog file's name, a key, a layer's directory or an
exception's text can never fake, hide or erase a line of kcatalog's output. Text formats escape them as Python
does ('\\n', '\\x1b'); JSON keeps them exact."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from catalog_builder import Workspace

from kcatalog.tools.cli import main

# A file name that, printed raw, ends its line, erases it, and writes a line of its own (and hides the rest).
FAKE = "x\nFound 0 errors.\x1b[2K\rAll checks passed!\x1b[8m"
HOSTILE_NAMES = {
    "newline-ansi": FAKE,
    "separators": "tab\tls\u2028ps\u2029nel\x85",
    "bidi": "evil\u202etxt.lmay\u200b",
    "bell-backspace-delete": "a\x07b\x08c\x7f",
}
if sys.platform != "darwin":  # macOS file systems refuse names that are not UTF-8
    HOSTILE_NAMES["undecodable"] = os.fsdecode(b"bad\xff\xfe")
# A key, unknown to the schema, that the KC101 message quotes: YAML's double-quoted escapes make it hostile too.
HOSTILE_KEY = '"k\\e[2K\\rAll checks passed!\\u2028\\x85"'
ESCAPED_KEY = "k\\x1b[2K\\rAll checks passed!\\u2028\\x85"


def escaped(text: str) -> str:
    """What the text formats print for `text`."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def no_control_characters(text: str) -> None:
    """Every line printable: what a terminal or a log viewer shows is what kcatalog wrote, line for line."""
    for line in text.split("\n"):
        assert line.isprintable(), repr(line)


@pytest.fixture
def hostile_catalog(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The clean minimal catalog, one broken manifest under each hostile name, one manifest with a hostile key."""
    directory = workspace.minimal()
    for name in HOSTILE_NAMES.values():
        workspace.files({f"{name}.yaml": "kcatalog: 1\ngroup: broken\nops: 3\n"})
    workspace.files({"keyed.yaml": f"kcatalog: 1\ngroup: keyed\n{HOSTILE_KEY}: 1\nops: {{}}\n"})
    monkeypatch.chdir(directory)
    return directory


def validate(capsys: pytest.CaptureFixture[str], output_format: str) -> str:
    code = main(["validate", ".", "--output-format", output_format, "--no-targets"])
    out, err = capsys.readouterr()
    assert (code, err) == (1, "")
    return out


def expected_paths() -> list[str]:
    return sorted(f"{name}.yaml" for name in HOSTILE_NAMES.values())


def test_concise_escapes_file_names_and_messages(hostile_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = validate(capsys, "concise")
    no_control_characters(out)
    lines = out.splitlines()  # also splits at \u2028, \x85, ...: none is left raw
    broken = sorted(line for line in lines if line.endswith("KC103 'ops': input should be a mapping, got int 3"))
    assert broken == sorted(
        f"{escaped(path)}:3:6: KC103 'ops': input should be a mapping, got int 3" for path in expected_paths()
    )
    assert f"keyed.yaml:3:1: KC101 unknown field '{ESCAPED_KEY}'" in lines
    assert lines[-1] == f"Found {len(HOSTILE_NAMES) + 1} errors in {len(HOSTILE_NAMES) + 1} files."
    assert len(lines) == len(HOSTILE_NAMES) + 2  # one line per diagnostic, and the summary: nothing faked


def test_github_escapes_file_names_and_messages(hostile_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = validate(capsys, "github")
    no_control_characters(out)
    lines = out.splitlines()
    assert len(lines) == len(HOSTILE_NAMES) + 1 and all(line.startswith("::error file=") for line in lines)
    files = sorted(line.removeprefix("::error file=").partition(",line=")[0] for line in lines)
    workflow = [escaped(path).replace("%", "%25").replace(":", "%3A").replace(",", "%2C") for path in expected_paths()]
    assert files == sorted([*workflow, "keyed.yaml"])
    assert any(line.endswith(f"::KC101 unknown field '{ESCAPED_KEY}'") for line in lines)


def test_json_keeps_file_names_exact(hostile_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = validate(capsys, "json")
    assert out.isascii()  # json escapes every control character itself
    document = json.loads(out)
    paths = sorted(d["path"] for d in document["diagnostics"] if d["code"] == "KC103")
    assert paths == expected_paths()
    assert document["summary"] == {"errors": len(HOSTILE_NAMES) + 1, "warnings": 0, "files": len(HOSTILE_NAMES) + 1}


def test_error_lines_on_stderr_are_escaped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    option = "--x\nerased\x1b[2K\rfaked\x1b[8m"  # no space: argparse takes it for an option, and quotes it
    assert main(["validate", str(tmp_path), option]) == 2
    err = capsys.readouterr().err
    no_control_characters(err)
    assert err.splitlines()[-1] == f"error: unrecognized arguments: {escaped(option)}"
    assert main(["import-registry", "--from-json", str(tmp_path / f"{FAKE}.json"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    no_control_characters(err)
    assert err.splitlines()[-1].startswith(f"error: cannot read {escaped(str(tmp_path / FAKE))}.json: ")


def test_a_layer_directory_is_escaped_in_the_layers_table(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = workspace.minimal(name=FAKE)
    monkeypatch.chdir(directory.parent)
    assert main(["layers", FAKE]) == 0
    out = capsys.readouterr().out
    no_control_characters(out)
    assert len(out.splitlines()) == 2 and escaped(FAKE) in out  # the header and the one layer


def test_an_exception_text_is_escaped_where_explain_quotes_it(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    workspace.module("kc_loud_kernel", f"raise ImportError({FAKE!r})\n\n\ndef rms_norm(x, weight):\n    return x\n")
    workspace.module("kc_quiet_kernel", "def rms_norm(x, weight):\n    return x\n")
    backends = {"loud": "kc_loud_kernel:rms_norm", "quiet": "kc_quiet_kernel:rms_norm"}
    op = workspace.op(backends, signature="(x: Tensor, weight: Tensor) -> Tensor", reference="quiet")
    directory = workspace.write({"rms_norm": op}, backends=["loud", "quiet"], group="norm")
    assert main(["explain", "norm.rms_norm", "--catalog", str(directory), "--platform", "cpu", "--import"]) == 0
    out = capsys.readouterr().out
    no_control_characters(out)
    assert f"  loud: import failed on first use: ImportError: {escaped(FAKE)}" in out.splitlines()
    (logged,) = [r.getMessage() for r in caplog.records if r.name == "kcatalog"]  # the fallback's warning
    assert logged.startswith(f"backend 'loud' of op 'norm.rms_norm' failed to import ({escaped(FAKE)})")
