"""Inputs deep enough to exhaust a recursive walk: targets of thousands of dotted parts, chains of re-exports,
signatures and size expressions that parse but nest hundreds of levels. Each ends as a located diagnostic (or a
clean check), never a RecursionError out of check_catalog or load_catalog, never exit 2 from the CLI."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from catalog_builder import Workspace

import kcatalog
from kcatalog import CatalogError, check_catalog
from kcatalog.tools.cli import main

MANIFEST = """\
kcatalog: 1
group: norm
ops:
  rms_norm:
    description: RMS norm over the last dim
    signature: "SIGNATURE"
    reference: torch
    dtypes: [float32]
SAMPLES    backends:
      torch:
        target: TARGET
"""  # the signature value starts at 6:16, the target value (without samples) at 11:17


def manifest(
    signature: str = "(x: Tensor, weight: Tensor) -> Tensor",
    target: str = "kcatalog.kernels.torch.layernorm:rms_norm",
    samples: str = "",
) -> str:
    return MANIFEST.replace("SIGNATURE", signature).replace("TARGET", target).replace("SAMPLES", samples)


@pytest.fixture
def catalog_with(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """`write(text)`: the clean settings plus norm.yaml holding `text`, made the working directory."""

    def write(text: str) -> Path:
        workspace.minimal(with_manifest=False)
        directory = workspace.files({"norm.yaml": text})
        monkeypatch.chdir(directory)
        return directory

    return write


def diagnostics_of(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """check_catalog's diagnostics; the CLI prints the same lines and exits 0 or 1, with nothing on stderr."""
    _, diagnostics = check_catalog(["."])
    code = main(["validate", "."])
    out, err = capsys.readouterr()
    assert (code, err) == (1 if any(d.is_error for d in diagnostics) else 0, "")
    assert out.splitlines()[: len(diagnostics)] == [str(d) for d in diagnostics]
    return [str(d) for d in diagnostics]


def loads_without_recursing(directory: Path) -> kcatalog.Catalog | CatalogError:
    """A cold and then a warm load (through the session's private cache): the catalog, or the CatalogError."""
    found: kcatalog.Catalog | CatalogError | None = None
    for _ in ("cold", "warm"):
        try:
            found = kcatalog.load_catalog([directory])
        except CatalogError as exc:  # a RecursionError is no CatalogError: it fails the test
            found = exc
    assert found is not None
    return found


# -- targets of many dotted parts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("parts", [330, 3000])
def test_a_target_of_thousands_of_dotted_parts_is_a_diagnostic(
    parts: int, catalog_with: Callable[[str], Path], workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace.module("kc_deep_plain", "def rms_norm(x, weight):\n    return x\n")
    module = "kc_deep_plain." + ".".join(f"p{i}" for i in range(1, parts))
    directory = catalog_with(manifest(target=f"{module}:rms_norm"))
    assert diagnostics_of(capsys) == [
        f"norm.yaml:11:17: KC301 module '{module}' not found: 'kc_deep_plain' is a module, not a package"
    ]
    assert isinstance(loads_without_recursing(directory), CatalogError)


def test_a_missing_package_of_thousands_of_parts_is_unavailable(
    catalog_with: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    module = ".".join(f"kc_absent_{i}" for i in range(3000))
    directory = catalog_with(manifest(target=f"{module}:rms_norm"))
    (line,) = diagnostics_of(capsys)
    assert line.startswith(f"norm.yaml:11:17: KC303 warning: module '{module}' unavailable here")
    catalog = loads_without_recursing(directory)
    assert isinstance(catalog, kcatalog.Catalog)
    with pytest.raises(kcatalog.NoEligibleBackendError, match="import failed on first use"):  # importlib recurses
        catalog.kernel("norm.rms_norm")


# -- chains of re-exports ------------------------------------------------------------------------------------------


def _reexport_chain(workspace: Workspace, length: int) -> str:
    """kc_chain_0 re-exports rms_norm from kc_chain_1, ..., which kc_chain_<length> defines; the first module."""
    for index in range(length):
        workspace.module(f"kc_chain_{index}", f"from kc_chain_{index + 1} import rms_norm\n")
    workspace.module(f"kc_chain_{length}", "def rms_norm(x, weight):\n    return x\n")
    return "kc_chain_0"


def test_a_short_chain_of_re_exports_is_followed(
    catalog_with: Callable[[str], Path], workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog_with(manifest(target=f"{_reexport_chain(workspace, 60)}:rms_norm"))
    assert diagnostics_of(capsys) == []


def test_a_chain_of_a_thousand_re_exports_is_given_up(
    catalog_with: Callable[[str], Path], workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = catalog_with(manifest(target=f"{_reexport_chain(workspace, 1000)}:rms_norm"))
    (line,) = diagnostics_of(capsys)
    assert line.startswith(
        "norm.yaml:11:17: KC304 warning: target 'kc_chain_0:rms_norm': 'rms_norm' is imported from 'kc_chain_1' "
        "(line 1 of 'kc_chain_0'), but 'rms_norm' is imported from 'kc_chain_2'"
    )
    assert line.endswith("but more than 64 re-exports to follow (line 1 of 'kc_chain_64'); not verifiable statically")
    assert isinstance(loads_without_recursing(directory), kcatalog.Catalog)


# -- signatures and size expressions that parse, but nest too deeply to walk ----------------------------------------


@pytest.mark.parametrize(
    "signature",
    [
        "(x: " + ".".join(["a"] * 1500) + ") -> Tensor",  # an attribute chain
        "(x: " + " | ".join(["int"] * 1500) + ") -> Tensor",  # a union
        "(x: Tensor) -> Tensor" + "[int]" * 1200,  # subscripts
        "(x: Tensor, w: int = " + "-" * 1500 + "1) -> Tensor",  # unary operators
        "(x: Tensor, w: int = " + "not " * 1500 + "1) -> Tensor",
        "(x: Tensor, w: int = " + "+".join(["1"] * 1500) + ") -> Tensor",  # a sum: parsed, compile() recursed
        "(x: " + "list[" * 120 + "int" + "]" * 120 + ") -> Tensor",  # within the parser's 200 brackets
    ],
    ids=["attributes", "union", "subscripts", "unary-minus", "not", "sum", "brackets"],
)
def test_a_signature_nested_hundreds_of_levels_is_a_diagnostic(
    signature: str, catalog_with: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    directory = catalog_with(manifest(signature=signature))
    shown = re.escape(signature[:57])
    (line,) = diagnostics_of(capsys)
    assert re.fullmatch(
        rf"norm\.yaml:6:16: KC103 'signature': signature '{shown}\.\.\.' is nested more than 100 levels deep", line
    )
    assert isinstance(loads_without_recursing(directory), CatalogError)


def test_a_signature_nested_a_few_levels_is_read(
    catalog_with: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    catalog_with(manifest(signature="(x: Tensor, weight: " + "list[" * 20 + "int" + "]" * 20 + ") -> Tensor"))
    assert [line for line in diagnostics_of(capsys) if "KC103" in line] == []


@pytest.mark.parametrize("default", ["{[1]: 2}", "{1, [2]}"], ids=["dict-key", "set-item"])
def test_an_unhashable_literal_default_is_no_literal(
    default: str, catalog_with: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    directory = catalog_with(manifest(signature=f"(x: Tensor, weight: Tensor, w: object = {default}) -> Tensor"))
    assert diagnostics_of(capsys) == []
    catalog = loads_without_recursing(directory)
    assert isinstance(catalog, kcatalog.Catalog)
    assert catalog.info("norm.rms_norm").parameters.exact is False  # type: ignore[union-attr]  # forwarded as given
    assert callable(catalog.op("norm.rms_norm"))


SAMPLES = "    samples:\n      sizes: {T: [3], H: [8]}\n      args:\n        x: {shape: [T, SUM]}\n        weight: {shape: [H]}\n"


@pytest.mark.parametrize("terms", [150, 1200])
def test_a_size_expression_nested_hundreds_of_levels_is_a_diagnostic(
    terms: int, catalog_with: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """1,200 terms parse, and passed validate; building the inputs (`kcatalog test`) then recursed."""
    catalog_with(manifest(samples=SAMPLES.replace("SUM", "+".join(["H"] * terms))))
    assert diagnostics_of(capsys) == [
        "norm.yaml:12:9: KC210 samples of op 'norm.rms_norm', argument 'x': "
        "'H+H+H+H+H+H+H+H+H+H+H+H+H+H+H+H+H+H+H+H+...' is nested more than 100 levels deep"
    ]
