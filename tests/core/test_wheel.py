"""The built wheel ships the catalog and schemas, and an installed copy loads its own catalog."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from catalog_builder import child_env

import kcatalog

REPO = Path(__file__).resolve().parents[2]
# Build from a copy: an in-tree build would write build/ and *.egg-info into the working tree.
NOT_BUILT = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "tests", "benchmarks"
)


def pip(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-cache-dir", *args],  # no ~/.cache/pip
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=NOT_BUILT)
    pip(
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--quiet",
        "--wheel-dir",
        str(root / "dist"),
        str(source),
        cwd=root,
    )
    [built] = (root / "dist").glob("kcatalog-*.whl")
    return built


@pytest.fixture(scope="module")
def site(wheel: Path) -> Path:
    target = wheel.parent.parent / "site"
    pip("install", "--no-deps", "--quiet", "--target", str(target), str(wheel), cwd=wheel.parent)
    return target


def packaged(wheel: Path, folder: str, suffix: str) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {
            name.removeprefix(f"kcatalog/{folder}/")
            for name in archive.namelist()
            if name.startswith(f"kcatalog/{folder}/") and name.endswith(suffix)
        }


def test_wheel_ships_every_manifest(wheel: Path) -> None:  # and the tuned tables under catalog/tuned/
    shipped = {path.relative_to(REPO / "catalog").as_posix() for path in (REPO / "catalog").rglob("*.yaml")}
    assert "tuned/cuda_9.0.yaml" in shipped
    assert packaged(wheel, "catalog", ".yaml") == shipped


def test_wheel_ships_the_schemas(wheel: Path) -> None:
    assert packaged(wheel, "schemas", ".json") == {path.name for path in (REPO / "schemas").glob("*.json")}


def test_wheel_ships_py_typed(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        assert "kcatalog/py.typed" in archive.namelist()


INSTALLED_SCRIPT = """\
import json
import kcatalog

catalog = kcatalog.load_catalog()
print(json.dumps({"file": kcatalog.__file__, "ops": catalog.ops(), "warnings": [str(w) for w in catalog.warnings]}))
"""


def python_in(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run python with only the installed wheel's kcatalog importable, from a directory outside the repo."""
    env = child_env() | {"PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=site.parent, env=env, timeout=120
    )


def test_installed_wheel_loads_its_shipped_catalog(site: Path) -> None:
    result = python_in(site, "-c", INSTALLED_SCRIPT)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert Path(report["file"]).resolve().is_relative_to(site.resolve())
    assert report["ops"] == kcatalog.load_catalog().ops()
    assert report["warnings"] == []


def test_installed_wheel_validates_its_catalog(site: Path) -> None:
    result = python_in(site, "-m", "kcatalog", "validate")
    assert (result.returncode, result.stdout, result.stderr) == (0, "All checks passed!\n", "")


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        return archive.read(name).decode()


def test_wheel_metadata_names_the_project(wheel: Path) -> None:
    """Project URLs, authors and classifiers, as pyproject.toml declares them; the README as the long description."""
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    headers, _, description = wheel_metadata(wheel).partition("\n\n")
    lines = headers.splitlines()
    for label, url in project["urls"].items():
        assert f"Project-URL: {label}, {url}" in lines
    assert "Author: kcatalog developers" in lines
    assert {line.removeprefix("Classifier: ") for line in lines if line.startswith("Classifier: ")} == set(
        project["classifiers"]
    )
    assert "Description-Content-Type: text/markdown" in lines
    assert description.strip() == (REPO / "README.md").read_text(encoding="utf-8").strip()


def test_installed_wheel_reports_its_version(wheel: Path, site: Path) -> None:
    version = wheel.name.split("-")[1]
    result = python_in(site, "-m", "kcatalog", "--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"kcatalog {version}\n", "")
    result = python_in(site, "-c", "import kcatalog; print(kcatalog.__version__)")
    assert (result.returncode, result.stdout) == (0, f"{version}\n")
