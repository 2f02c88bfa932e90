"""A catalog file given by name is read as a load of its directory would read it: a symlink that leaves the
catalog directory is refused unread (KC005), also the settings file beside it, a file that is no catalog file
(*.yaml, *.yml) is not read, and the settings (so the allow-list) are those of the directory the name is in,
never those of where a symlink points."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import kcatalog
from kcatalog.tools.cli import main

ESCAPE = """\
kcatalog: 1
group: evil
ops:
  shell:
    description: runs a shell
    signature: "(x: Tensor) -> Tensor"
    reference: torch
    dtypes: [float32]
    backends:
      torch: {target: "os:system"}
"""
PERMISSIVE = "kcatalog: 1\nbackends:\n  torch: {description: reference}\npriority: [torch]\n"


@pytest.fixture
def catalog(workspace: Any) -> Path:
    """The minimal catalog, its settings allowing only kcatalog.kernels."""
    directory: Path = workspace.minimal()
    settings = directory / "kcatalog.yaml"
    settings.write_text(settings.read_text() + "allowed_modules: [kcatalog.kernels]\n")
    return directory


def validate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    code = main(["validate", *args])
    out, err = capsys.readouterr()
    assert err == ""
    return code, out.splitlines()


def test_a_file_given_by_name_that_links_out_of_its_catalog_is_refused_unread(
    catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(ESCAPE + "junk: !!python/object/apply:os.system [touch PWNED]\n")
    (catalog / "evil.yaml").symlink_to(outside)
    refused = f"evil.yaml:1:1: KC005 symlink leaves the catalog directory (points to '{outside}'); refused"
    assert validate(capsys, str(catalog)) == (1, [f"{catalog}/{refused}", "Found 1 error in 1 file."])
    assert validate(capsys, str(catalog / "evil.yaml")) == (1, [f"{catalog}/{refused}", "Found 1 error in 1 file."])
    monkeypatch.chdir(catalog)
    assert validate(capsys, "evil.yaml") == (1, [refused, "Found 1 error in 1 file."])
    with pytest.raises(kcatalog.CatalogError) as raised:
        kcatalog.load_catalog(["evil.yaml"], cache=False)
    assert [d.code for d in raised.value.diagnostics] == ["KC005"]


def test_a_link_to_a_system_file_is_never_parsed(
    catalog: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    system = Path("/etc/passwd")
    if not system.is_file():
        pytest.skip("no /etc/passwd here")
    (catalog / "passwd.yaml").symlink_to(system)
    monkeypatch.chdir(catalog)
    assert validate(capsys, "passwd.yaml") == (
        1,
        [
            "passwd.yaml:1:1: KC005 symlink leaves the catalog directory (points to '/etc/passwd'); refused",
            "Found 1 error in 1 file.",
        ],
    )
    code, out = validate(capsys, str(system))  # named itself: not a catalog file, so not read either
    assert code == 1
    assert out[0] == "KC006 path '/etc/passwd' is not a catalog file (*.yaml, *.yml)"
    assert not any("KC001" in line or "KC1" in line for line in out)  # nothing of it was parsed


def test_the_settings_beside_a_file_given_by_name_may_not_link_out(
    catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A permissive settings file linked in from elsewhere would drop the allow-list for the manifest given."""
    permissive = tmp_path / "permissive.yaml"
    permissive.write_text(PERMISSIVE)
    settings = catalog / "kcatalog.yaml"
    settings.unlink()
    settings.symlink_to(permissive)
    (catalog / "norm.yaml").write_text(ESCAPE)
    refused = f"{settings}:1:1: KC005 symlink leaves the catalog directory (points to '{permissive}'); refused"
    for given in (catalog, catalog / "norm.yaml"):
        code, out = validate(capsys, str(given))
        assert code == 1
        assert refused in out  # and so no settings file: KC206


def test_a_file_given_through_a_link_inside_its_catalog_gets_that_catalogs_allow_list(
    catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link's directory decides the settings, wherever the working directory is: here the link is in the
    catalog (with its allow-list) and its target in a subdirectory without settings."""
    sub = catalog / "vendor"
    sub.mkdir()
    (sub / "ops.yaml").write_text(ESCAPE)
    (catalog / "ops.yaml").symlink_to(sub / "ops.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not above the catalog: the settings are found beside the name only
    code, out = validate(capsys, str(catalog / "ops.yaml"))
    assert code == 1
    assert out == [
        f"{sub}/ops.yaml:10:23: KC305 target 'os:system' is outside the allowed modules (kcatalog.yaml "
        "allowed_modules: kcatalog.kernels)",
        "Found 1 error in 1 file.",
    ]
    assert validate(capsys, str(catalog))[1][0] == out[0]  # as the directory's load says


@pytest.mark.parametrize("kind", ["dangling", "loop"])
def test_a_broken_link_given_by_name_is_reported(
    kind: str, catalog: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind == "loop":
        (catalog / "a.yaml").symlink_to("b.yaml")
        (catalog / "b.yaml").symlink_to("a.yaml")
    else:
        (catalog / "a.yaml").symlink_to("gone.yaml")
    monkeypatch.chdir(catalog)
    code, out = validate(capsys, "a.yaml")
    assert code == 1
    assert out[0] in (
        "KC006 path 'a.yaml' does not exist",
        "a.yaml:1:1: KC005 cannot read file: symlink is dangling or loops",
    )
