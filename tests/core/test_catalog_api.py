"""The registry a load produces: lookups, errors that name what exists, positions, lazy kernel imports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from catalog_builder import child_env

import kcatalog
from kcatalog import (
    Catalog,
    CatalogError,
    KernelImportError,
    KernelSpec,
    Location,
    Platform,
    UnknownBackendError,
    UnknownOpError,
)
from kcatalog.compat import registry

if TYPE_CHECKING:
    from catalog_builder import Workspace

SHIPPED_CATALOG = Path(kcatalog.__file__).resolve().parent / "catalog"  # package data: the manifests in the wheel

SETTINGS = """\
kcatalog: 1
backends:
  torch: {description: reference}
  triton: {description: fused kernels}
priority: [triton, torch]
"""


def manifest(torch_target: str, triton_target: str = "kcatalog.kernels.triton.layernorm:rms_norm") -> str:
    """A 'norm' group: rms_norm with torch and triton backends, layer_norm with torch only."""
    return f"""\
kcatalog: 1
group: norm
ops:
  rms_norm:
    description: RMS norm over the last dim
    signature: "(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor"
    reference: torch
    dtypes: [float32]
    backends:
      torch:
        target: {torch_target}
      triton:
        target: {triton_target}
  layer_norm:
    description: layer norm over the last dim
    signature: "(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor"
    reference: torch
    dtypes: [float32]
    backends:
      torch:
        target: kcatalog.kernels.torch.layernorm:layer_norm
"""


@pytest.fixture
def small_catalog(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Catalog]:
    """`make(torch_target, **load_options)`: load a two-op catalog written by the workspace (the cwd, for short paths)."""

    def make(torch_target: str = "kcatalog.kernels.torch.layernorm:rms_norm", **options: object) -> Catalog:
        directory = workspace.files({"kcatalog.yaml": SETTINGS, "norm.yaml": manifest(torch_target)})
        monkeypatch.chdir(directory)
        return kcatalog.load_catalog([directory], **options)

    return make


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Platform detection imports torch (seconds); these tests are about imports, not about the platform."""
    monkeypatch.setattr(Platform, "detect", classmethod(lambda cls: cls("cpu")))


@pytest.fixture(scope="module")
def shipped() -> Catalog:
    return kcatalog.load_catalog()


def line_of(path: Path, text: str, after: str | None = None) -> int:
    """1-based number of the first line equal to `text` (after the first line equal to `after`)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(after) if after is not None else 0
    return lines.index(text, start) + 1


# -- the shipped catalog ------------------------------------------------------------------------------


def test_shipped_ops_are_sorted_and_iterable(shipped: Catalog) -> None:
    ops = shipped.ops()
    assert ops == sorted(ops) == list(shipped)
    assert len(shipped) == len(ops)
    assert {"layernorm.rms_norm", "layernorm.layer_norm", "elementwise.softmax"} <= set(ops)
    assert "layernorm.rms_norm" in shipped and "layernorm.nope" not in shipped


def test_get_lists_the_specs_in_declaration_order(shipped: Catalog) -> None:
    specs = shipped.specs("layernorm.rms_norm")
    assert all(isinstance(spec, KernelSpec) and spec.op == "layernorm.rms_norm" for spec in specs)
    assert [spec.backend for spec in specs] == list(shipped.info("layernorm.rms_norm").backends)
    assert specs[0].backend == "torch"


def test_get_backend_and_has(shipped: Catalog) -> None:
    spec = shipped.info("layernorm.rms_norm").backends["torch"]
    assert str(spec.target) == "kcatalog.kernels.torch.layernorm:rms_norm"
    assert spec.dtypes == shipped.info("layernorm.rms_norm").dtypes  # inherited from the op
    drop_in = registry(shipped)  # the SGLang-style name lives in compat
    assert drop_in.has("layernorm.rms_norm")
    assert drop_in.has("layernorm.rms_norm", "torch")
    assert not drop_in.has("layernorm.rms_norm", "cuda")
    assert not drop_in.has("layernorm.nope")
    assert not drop_in.has("layernorm.nope", "torch")


def test_all_specs_is_every_backend_of_every_op(shipped: Catalog) -> None:
    assert shipped.specs() == [spec for op in shipped.ops() for spec in shipped.specs(op)]


def test_info_describes_the_op(shipped: Catalog) -> None:
    info = shipped.info("layernorm.rms_norm")
    assert (info.id, info.group, info.reference) == ("layernorm.rms_norm", "layernorm", "torch")
    assert "float32" in info.dtypes and set(info.tolerance) <= set(info.dtypes)
    assert info.signature.startswith("(x: Tensor, weight: Tensor")
    with pytest.raises(TypeError):
        info.backends["evil"] = info.backends["torch"]  # type: ignore[index]


def test_locations_point_at_the_declarations(shipped: Catalog) -> None:
    manifest_path = SHIPPED_CATALOG / "layernorm.yaml"
    info = shipped.info("layernorm.rms_norm")
    assert Path(info.location.path).resolve() == manifest_path.resolve()
    assert (info.location.line, info.location.col) == (line_of(manifest_path, "  rms_norm:"), 3)
    spec = shipped.info("layernorm.rms_norm").backends["triton"]
    assert spec.location.path == info.location.path
    assert (spec.location.line, spec.location.col) == (line_of(manifest_path, "      triton:", after="  rms_norm:"), 7)


def test_unknown_op_names_the_available_ones(shipped: Catalog) -> None:
    first = shipped.ops()[0].replace(".", r"\.")
    expected = rf"^no op 'layernorm\.rms_nrom' \(did you mean 'layernorm\.rms_norm'\?\)\. Available: {first}, "
    with pytest.raises(UnknownOpError, match=expected):
        shipped.info("layernorm.rms_nrom")


def test_unknown_backend_names_the_available_ones_and_the_declaration(shipped: Catalog) -> None:
    info = shipped.info("layernorm.rms_norm")
    message = (
        f"no 'cuda' backend for op 'layernorm.rms_norm' (declared at {info.location}); "
        f"available: {', '.join(info.backends)}"
    )
    with pytest.raises(UnknownBackendError) as excinfo:
        registry(shipped).get_backend("layernorm.rms_norm", "cuda")
    assert str(excinfo.value) == message


# -- exact errors, on a catalog of two ops -----------------------------------------------------------


def test_lookup_errors_are_key_errors_with_data(small_catalog: Callable[..., Catalog]) -> None:
    catalog = small_catalog()
    with pytest.raises(KeyError):
        catalog.specs("norm.nope")
    with pytest.raises(
        UnknownOpError,
        match=r"^no op 'norm\.rms_nrom' \(did you mean 'norm\.rms_norm'\?\)\. "
        r"Available: norm\.layer_norm, norm\.rms_norm$",
    ) as excinfo:
        catalog.info("norm.rms_nrom")
    assert (excinfo.value.op, excinfo.value.available) == ("norm.rms_nrom", ("norm.layer_norm", "norm.rms_norm"))
    with pytest.raises(UnknownOpError, match=r"^no op 'softmax'\. Available: norm\.layer_norm, norm\.rms_norm$"):
        catalog.info("softmax").backends["torch"]


def test_unknown_backend_is_a_key_error_naming_the_declaration(small_catalog: Callable[..., Catalog]) -> None:
    catalog = small_catalog()
    with pytest.raises(
        UnknownBackendError,
        match=r"^no 'tirton' backend for op 'norm\.rms_norm' "
        r"\(declared at norm\.yaml:4:3\) \(did you mean 'triton'\?\); "
        r"available: torch, triton$",
    ) as excinfo:
        registry(catalog).get_backend("norm.rms_norm", "tirton")
    error = excinfo.value
    assert isinstance(error, KeyError)
    assert (error.op, error.backend, error.available) == ("norm.rms_norm", "tirton", ("torch", "triton"))
    assert error.declared_at == Location("norm.yaml", 4, 3)
    with pytest.raises(
        UnknownBackendError,
        match=r"^no 'aten' backend for op 'norm\.layer_norm' "
        r"\(declared at norm\.yaml:14:3\); available: torch$",
    ):
        registry(catalog).get_backend("norm.layer_norm", "aten")


def test_a_failed_load_raises_with_every_diagnostic(small_catalog: Callable[..., Catalog]) -> None:
    with pytest.raises(CatalogError) as excinfo:
        small_catalog("kcatalog.kernels.torch.layernorm:rms_nrom", require=["norm.softmax"])
    message = str(excinfo.value)
    assert message.splitlines()[0] == "catalog has 2 errors:"
    assert [d.code for d in excinfo.value.diagnostics] == ["KC501", "KC302"]


# -- lazy kernels ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("on_cpu")
def test_kernel_is_imported_on_first_use_and_cached(
    small_catalog: Callable[..., Catalog], workspace: Workspace
) -> None:
    workspace.module(
        "kc_api_lazy",
        """\
        def rms_norm(x, weight, eps=1e-6):
            return "lazy"
    """,
    )
    catalog = small_catalog("kc_api_lazy:rms_norm")
    assert "kc_api_lazy" not in sys.modules
    fn = catalog.kernel("norm.rms_norm", backend="torch")
    assert "kc_api_lazy" in sys.modules
    assert fn is sys.modules["kc_api_lazy"].rms_norm
    assert catalog.kernel("norm.rms_norm", backend="torch") is fn
    assert catalog.info("norm.rms_norm").backends["torch"].load() is fn


@pytest.mark.usefixtures("on_cpu")
def test_a_kernel_that_fails_to_import_names_op_backend_and_target(
    small_catalog: Callable[..., Catalog], workspace: Workspace
) -> None:
    workspace.module(
        "kc_api_broken",
        """\
        raise RuntimeError("boom")

        def rms_norm(x, weight, eps=1e-6):
            return x
    """,
    )
    catalog = small_catalog("kc_api_broken:rms_norm")
    expected = r"^cannot load backend 'torch' of op 'norm\.rms_norm' from 'kc_api_broken:rms_norm': RuntimeError: boom$"
    with pytest.raises(KernelImportError, match=expected) as excinfo:
        catalog.kernel("norm.rms_norm", backend="torch")
    error = excinfo.value
    assert isinstance(error, ImportError) and isinstance(error, CatalogError)
    assert (error.op, error.backend, error.target) == ("norm.rms_norm", "torch", "kc_api_broken:rms_norm")
    assert isinstance(error.__cause__, RuntimeError) and str(error.__cause__) == "boom"
    with pytest.raises(KernelImportError, match=expected):  # a failure is not cached: the next call retries
        catalog.kernel("norm.rms_norm", backend="torch")


@pytest.mark.usefixtures("on_cpu")
def test_an_attribute_gone_at_import_time_is_a_kernel_import_error(
    small_catalog: Callable[..., Catalog], workspace: Workspace
) -> None:
    workspace.module(
        "kc_api_renamed",
        """\
        def rms_norm_v2(x, weight, eps=1e-6):
            return x
    """,
    )
    catalog = small_catalog("kc_api_renamed:rms_norm", check_targets=False)
    with pytest.raises(
        KernelImportError,
        match=r"^cannot load backend 'torch' of op 'norm\.rms_norm' from "
        r"'kc_api_renamed:rms_norm': AttributeError: ",
    ) as excinfo:
        catalog.kernel("norm.rms_norm", backend="torch")
    assert isinstance(excinfo.value.__cause__, AttributeError)


LAZY_LOAD_SCRIPT = """\
import sys
import kcatalog

catalog = kcatalog.load_catalog()
assert not {"torch", "triton"} & set(sys.modules), sorted({"torch", "triton"} & set(sys.modules))
kernels = sorted(m for m in sys.modules if m.startswith("kcatalog.kernels."))
assert not kernels, kernels

import torch

rms_norm = catalog.kernel("layernorm.rms_norm", backend="torch")
x = torch.randn(4, 32, generator=torch.Generator().manual_seed(0))
weight = torch.rand(32, generator=torch.Generator().manual_seed(1)) + 0.5
x64, w64 = x.double(), weight.double()
expected = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64
out = rms_norm(x, weight)
assert out.dtype == torch.float32 and out.shape == x.shape
assert torch.allclose(out.double(), expected, rtol=1e-5, atol=1e-6), (out.double() - expected).abs().max()
print("ok")
"""


def test_loading_imports_no_kernel_and_the_kernel_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", LAZY_LOAD_SCRIPT],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=child_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
