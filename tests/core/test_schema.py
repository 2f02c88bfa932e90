"""The pydantic models and the JSON Schemas generated from them: strict, frozen, and committed fresh."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pydantic
import pytest

import kcatalog
from kcatalog.tools.cli import main
from kcatalog.validate import schema

SHIPPED_SCHEMAS = Path(kcatalog.__file__).resolve().parent / "schemas"  # package data: the schemas in the wheel

MODELS = sorted(
    (
        cls
        for _, cls in inspect.getmembers(schema, inspect.isclass)
        if issubclass(cls, pydantic.BaseModel)
        and cls.__module__ == schema.__name__
        and not cls.__name__.startswith("_")
    ),
    key=lambda cls: cls.__name__,
)
# The smallest valid instance of each model, as YAML would give it.
MINIMAL: dict[str, dict[str, object]] = {
    "CapabilityDecl": {"device": "cuda"},
    "BackendDecl": {"target": "pkg.mod:fn"},
    "BackwardDecl": {"op": "rms_norm_backward", "grads": ["x"]},
    "OpDecl": {
        "description": "d",
        "signature": "(x: Tensor) -> Tensor",
        "reference": "torch",
        "dtypes": ["float32"],
        "backends": {"torch": {"target": "pkg.mod:fn"}},
    },
    "OpExtensionDecl": {"backends": {"torch": {"target": "pkg.mod:fn"}}},
    "Manifest": {"kcatalog": 1, "group": "norm"},
    "PolicyDecl": {},
    "KnownBackendDecl": {"description": "d"},
    "Settings": {"kcatalog": 1, "backends": {"torch": {"description": "d"}}, "priority": ["torch"]},
    "SamplesDecl": {"args": {"x": {"shape": ["T"]}}},
    "TensorArgDecl": {"shape": [4]},
    "TunedSettingsDecl": {},
}


def test_every_model_has_a_minimal_example() -> None:
    assert sorted(MINIMAL) == sorted(cls.__name__ for cls in MODELS)


@pytest.mark.parametrize("model", MODELS, ids=lambda cls: cls.__name__)
def test_models_are_frozen(model: type[pydantic.BaseModel]) -> None:
    instance = model.model_validate(MINIMAL[model.__name__])
    field = next(iter(model.model_fields))
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        setattr(instance, field, getattr(instance, field))


@pytest.mark.parametrize("model", MODELS, ids=lambda cls: cls.__name__)
def test_models_forbid_unknown_fields(model: type[pydantic.BaseModel]) -> None:
    with pytest.raises(pydantic.ValidationError) as excinfo:
        model.model_validate({**MINIMAL[model.__name__], "bogus": 1})
    assert [(e["type"], e["loc"]) for e in excinfo.value.errors()] == [("extra_forbidden", ("bogus",))]


def test_the_committed_schemas_are_fresh(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--check"]) == 0
    assert capsys.readouterr().out == "Schemas are up to date.\n"


def rendered(directory: Path) -> dict[str, bytes]:
    """`kcatalog schema --out DIRECTORY`: the schemas generated from the models, by file name."""
    assert main(["schema", "--out", str(directory)]) == 0
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_committed_schemas_match_the_models_byte_for_byte(tmp_path: Path) -> None:
    schemas = rendered(tmp_path)
    assert sorted(schemas) == [
        "layers.v1.json",
        "manifest.v1.json",
        "plan.v1.json",
        "settings.v1.json",
        "trace.v1.json",
        "tuned.v1.json",
    ]
    for name, content in schemas.items():
        assert (SHIPPED_SCHEMAS / name).read_bytes() == content, name


def test_a_modified_schema_fails_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rendered(tmp_path)
    assert main(["schema", "--check", str(tmp_path)]) == 0
    edited = tmp_path / "manifest.v1.json"
    document = json.loads(edited.read_text(encoding="utf-8"))
    document["description"] = "edited by hand"
    edited.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["schema", "--check", str(tmp_path)]) == 1
    assert (
        capsys.readouterr().err == f"{edited}: stale or missing; regenerate with `kcatalog schema --out {tmp_path}`\n"
    )


def test_a_missing_schema_fails_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rendered(tmp_path)
    (tmp_path / "settings.v1.json").unlink()
    assert main(["schema", "--check", str(tmp_path)]) == 1
    assert "settings.v1.json: stale or missing" in capsys.readouterr().err


def test_schema_writes_what_the_check_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in SHIPPED_SCHEMAS.iterdir())
    assert main(["schema", "--check", str(tmp_path)]) == 0


def test_schemas_are_json_schema_2020_12_documents(tmp_path: Path) -> None:
    for name, content in rendered(tmp_path).items():
        document = json.loads(content)
        assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert document["$id"] == name
        assert document["additionalProperties"] is False  # extra="forbid" reaches the editor too


def test_schema_never_writes_into_the_installed_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from a wheel, `kcatalog schema` rewrote the JSON files inside site-packages: without `--out` it writes
    nothing (the package's schemas are the ones it was built with) and says how to write them; `--check` reads."""
    package = tmp_path / "site-packages" / "kcatalog" / "schemas"  # a stand-in for an installed package's copy
    package.mkdir(parents=True)
    for path in SHIPPED_SCHEMAS.iterdir():
        (package / path.name).write_bytes(path.read_bytes())
    (package / "plan.v1.json").write_text("{}\n", encoding="utf-8")  # stale: a write would show
    before = {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in package.iterdir()}
    monkeypatch.setattr("kcatalog.validate.jsonschema.shipped_schema_dir", lambda: package)

    assert main(["schema"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kcatalog schema ")
    assert err.splitlines()[-1] == (
        f"error: give --out DIR to write the schemas (in a source checkout: --out schemas/); the package's own are "
        f"in {package}"
    )
    assert main(["schema", "--check"]) == 1
    assert capsys.readouterr().err == (
        f"{package / 'plan.v1.json'}: stale or missing; regenerate with `kcatalog schema --out {package}`\n"
    )
    assert {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in package.iterdir()} == before
