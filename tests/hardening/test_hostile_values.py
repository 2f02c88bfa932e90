"""Hostile values inside well-formed YAML: explicit scalar tags, huge numerals, aliased keys and strings,
signatures and target modules too complex to parse. Each must end as diagnostics (never an exception out of
check_catalog, never exit 2 from the CLI), quickly and in bounded memory; and loading must not leak."""

from __future__ import annotations

import gc
import re
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kcatalog import check_catalog
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

HOSTILE = "hostile.yaml"
HEAD = "kcatalog: 1\ngroup: hostile\n"  # the hostile part starts on line 3
MINIMAL_OP = """\
kcatalog: 1
group: norm
ops:
  rms_norm:
    description: RMS norm over the last dim
    signature: SIGNATURE
    reference: torch
    dtypes: [float32]
    backends:
      torch:
        target: TARGET
"""  # the signature value starts at 6:16, the target value at 11:17


def minimal_op(
    signature: str = '"(x: Tensor, weight: Tensor) -> Tensor"',
    target: str = "kcatalog.kernels.torch.layernorm:rms_norm",
) -> str:
    return MINIMAL_OP.replace("SIGNATURE", signature).replace("TARGET", target)


@pytest.fixture
def catalog_with(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], Path]:
    """`write(name, text)`: the clean settings plus one manifest, made the working directory."""

    def write(name: str, text: str) -> Path:
        workspace.minimal(with_manifest=False)
        directory = workspace.files({name: text})
        monkeypatch.chdir(directory)
        return directory

    return write


def refused(expected: str, capsys: pytest.CaptureFixture[str], *, within_s: float = 1.0) -> None:
    """check_catalog returns no catalog and exactly the expected diagnostic, in time; the CLI exits 1 with it."""
    start = time.perf_counter()
    catalog, diagnostics = check_catalog(["."])
    elapsed = time.perf_counter() - start
    assert catalog is None
    assert [bool(re.match(expected, str(d))) for d in diagnostics] == [True], [str(d) for d in diagnostics]
    assert elapsed < within_s, f"refusing took {elapsed:.2f} s"
    code = main(["validate", "."])
    out, err = capsys.readouterr()
    assert (code, err) == (1, ""), err
    assert re.match(expected, out.splitlines()[0])


# -- explicit standard tags and numerals ------------------------------------------------------------------------


def test_explicit_standard_tags_with_valid_values_are_read(catalog_with: Callable[[str, str], Path]) -> None:
    catalog_with(HOSTILE, HEAD.replace("kcatalog: 1", "kcatalog: !!int '1'") + "description: !!str 12\n")
    catalog, diagnostics = check_catalog(["."])
    assert diagnostics == []
    assert catalog is not None
    assert catalog.settings.priority == ("triton", "torch")  # the clean settings file was read too


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n: !!int abc\n", r"3:4: KC003 'abc' is not a valid !!int value"),
        ("n: !!float abc\n", r"3:4: KC003 'abc' is not a valid !!float value"),
        ("n: !!bool maybe\n", r"3:4: KC003 'maybe' is not a valid !!bool value"),
        ("n: !!int\n", r"3:4: KC003 '' is not a valid !!int value"),
        ("? !!int abc\n: 1\n", r"3:3: KC003 'abc' is not a valid !!int value"),
    ],
    ids=["int", "float", "bool", "empty-int", "int-key"],
)
def test_an_explicit_tag_that_does_not_fit_its_value_is_a_diagnostic(
    text: str, expected: str, catalog_with: Callable[[str, str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    catalog_with(HOSTILE, HEAD + text)
    refused(rf"^{HOSTILE}:{expected}$", capsys)


@pytest.mark.parametrize(
    ("text", "where", "length"),
    [
        ("n: " + "1" * 5000 + "\n", "3:4", 5000),
        ("kcatalog: " + "1" * 5000 + "\ngroup: hostile\n", "1:11", 5000),
        ("n: 1" + ":59" * 200 + ".5\n", "3:4", 603),  # float('1:59:...') overflows: 'int too large to convert to float'
        ("n: 1" + ":59" * 30_000 + "\n", "3:4", 90_001),  # ~0.5 s today, quadratic: a 4 MiB one takes hours
    ],
    ids=["int-5000-digits", "format-version-5000-digits", "base-60-float-overflow", "base-60-int-quadratic"],
)
def test_an_overlong_numeral_is_refused_quickly(
    text: str, where: str, length: int, catalog_with: Callable[[str, str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    catalog_with(HOSTILE, text if text.startswith("kcatalog") else HEAD + text)
    refused(
        rf"^{HOSTILE}:{where}: KC004 !!(int|float) scalar of {length} characters, over the 100-character limit$",
        capsys,
        within_s=0.25,
    )


# -- aliases ------------------------------------------------------------------------------------------------------


def test_a_key_repeated_through_an_alias_is_a_duplicate_key(
    catalog_with: Callable[[str, str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    catalog_with(HOSTILE, HEAD + "&k description: x\n*k : y\n")
    refused(rf"^{HOSTILE}:3:1: KC002 duplicate key 'description' \(first defined at line 3, column 1\)$", capsys)


def test_an_int_key_repeated_through_an_alias_is_a_duplicate_and_no_text(workspace: Workspace) -> None:
    # Two independent problems of one key: written twice, and not text. The file is read past the first.
    workspace.minimal(with_manifest=False)
    directory = workspace.files({HOSTILE: HEAD + "&k 7: x\n*k : y\n"})
    catalog, diagnostics = check_catalog([directory])
    assert catalog is None
    assert [(d.code, d.message) for d in diagnostics] == [
        ("KC002", "duplicate key '7' (first defined at line 3, column 1)"),
        ("KC103", "key '7': keys should be text, got int 7"),
    ]


def aliased_long_string(chars: int, refs: int) -> str:
    """One long invalid target, anchored once, in an op referenced `refs` times: small file, huge expansion."""
    ops = "\n".join(f"  op{i}: *op" for i in range(1, refs))
    return minimal_op(target=f'"not a target {"x" * chars}"').replace("  rms_norm:", "  op0: &op") + ops + "\n"


def test_aliases_of_a_long_string_are_bounded(catalog_with: Callable[[str, str], Path]) -> None:
    catalog_with("norm.yaml", aliased_long_string(chars=1_000_000, refs=40))
    tracemalloc.start()
    try:
        catalog, diagnostics = check_catalog(["."])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert catalog is None
    assert sum(len(str(d)) for d in diagnostics) < 1_000_000
    assert peak < 50 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    assert [d.code for d in diagnostics] == ["KC004"]
    assert re.match(
        r"^norm\.yaml:\d+:\d+: KC004 more than \d+ characters of text after alias expansion$", str(diagnostics[0])
    )


# -- signatures and target modules too complex to parse ---------------------------------------------------------


@pytest.mark.parametrize("default", ["1" + "+1" * 10_000, "-" * 10_000 + "1"], ids=["recursion", "parser-stack"])
def test_a_signature_too_complex_to_parse_is_a_diagnostic(
    default: str, catalog_with: Callable[[str, str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    catalog_with("norm.yaml", minimal_op(signature=f'"(x: Tensor, w: int = {default}) -> Tensor"'))
    refused(
        r"^norm\.yaml:6:16: KC103 'signature': signature '\(x: Tensor, w: int = [-+1]+\.\.\.' is too deeply "
        r"nested to parse$",
        capsys,
    )


NESTED = "1" + "+1" * 10_000


@pytest.mark.parametrize(
    "args",
    [
        f'x: {{shape: ["{NESTED}"]}}',
        f'x: {{shape: [T], range: ["{NESTED}", 2]}}',
        f'x: "${NESTED}"',
    ],
    ids=["shape", "range", "dollar-argument"],
)
def test_a_size_expression_too_complex_to_parse_is_a_diagnostic(
    args: str, catalog_with: Callable[[str, str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    samples = f"    samples:\n      sizes: {{T: [1]}}\n      args:\n        {args}\n        weight: {{shape: [T]}}\n"
    catalog_with("norm.yaml", minimal_op().replace("    backends:", samples + "    backends:"))
    refused(r"^norm\.yaml:\d+:\d+: KC210 samples of op 'norm\.rms_norm', argument 'x': .*too deeply nested.*$", capsys)


def test_a_target_module_too_complex_to_parse_is_a_diagnostic(
    catalog_with: Callable[[str, str], Path], workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace.module("kc_hard_nested", "x = 1" + " + 1" * 10_000 + "\n\n\ndef kernel(x):\n    return x\n")
    catalog_with("norm.yaml", minimal_op(target="kc_hard_nested:kernel"))
    refused(
        r"^norm\.yaml:11:17: KC306 module 'kc_hard_nested' cannot be imported: kc_hard_nested\.py is too deeply "
        r"nested to parse$",
        capsys,
    )


# -- resources ----------------------------------------------------------------------------------------------------


def test_repeated_loads_retain_no_memory() -> None:
    shipped = Path(__file__).resolve().parents[2] / "catalog"
    for _ in range(3):  # warm caches that are meant to fill once (signatures, distributions)
        check_catalog([shipped], check_targets=False)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20):
            check_catalog([shipped], check_targets=False)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 256 * 1024, f"20 loads of the shipped catalog retained {grown / 2**20:.1f} MiB"
