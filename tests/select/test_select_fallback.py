"""Fallback: a backend whose import fails gives way to the next eligible one (or raises, when strict or named)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from kcatalog import CatalogError, KernelImportError, NoEligibleBackendError, Rejected, RejectKind

if TYPE_CHECKING:
    from catalog_builder import Workspace

BROKEN = """
def kernel(*args, **kwargs):
    return "broken"


raise RuntimeError("boom: libkernel.so not found")
"""
FAILURE = "RuntimeError: boom: libkernel.so not found"


@pytest.fixture
def catalog_dir(workspace: Workspace) -> Workspace:
    """g.op: 'broken' (ranked first, its module raises on import), then 'good'."""
    workspace.module("kc_sel_broken", BROKEN)
    workspace.named_functions("kc_sel_good", ["kernel"])
    workspace.write(
        {"op": workspace.op({"broken": "kc_sel_broken:kernel", "good": "kc_sel_good:kernel"})},
        backends=["broken", "good"],
    )
    return workspace


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kcatalog" and r.levelno == logging.WARNING]


def test_import_failure_falls_back_to_the_next_eligible_backend(
    catalog_dir: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    catalog = catalog_dir.load()
    caplog.set_level(logging.WARNING, logger="kcatalog")
    assert catalog.select("g.op", "cpu").chosen.backend == "broken"  # type: ignore[union-attr]  # nothing known yet
    assert catalog.kernel("g.op")() == "kernel"
    assert catalog.kernel("g.op")() == "kernel"
    assert catalog.resolve("g.op", "cpu")() == "kernel"
    assert _warnings(caplog) == [
        "backend 'broken' of op 'g.op' failed to import (boom: libkernel.so not found); "
        "falling back to the next eligible backend"
    ]
    selection = catalog.select("g.op", "cpu")
    assert selection.chosen.backend == "good"  # type: ignore[union-attr]
    assert selection.rejected == (
        Rejected("broken", f"import failed on first use: {FAILURE}", RejectKind.IMPORT_FAILED),
    )


def test_import_failure_raises_when_strict(catalog_dir: Workspace, caplog: pytest.LogCaptureFixture) -> None:
    catalog = catalog_dir.load(strict=True)
    with pytest.raises(
        KernelImportError,
        match=rf"^cannot load backend 'broken' of op 'g\.op' from 'kc_sel_broken:kernel': {FAILURE}$",
    ) as info:
        catalog.kernel("g.op")
    error = info.value
    assert (error.op, error.backend, error.target) == ("g.op", "broken", "kc_sel_broken:kernel")
    assert isinstance(error.__cause__, RuntimeError)
    assert str(error.__cause__) == "boom: libkernel.so not found"
    assert isinstance(error, CatalogError) and isinstance(error, ImportError)
    assert _warnings(caplog) == []
    with pytest.raises(KernelImportError):  # a failure is not cached as a success, nor silently skipped
        catalog.kernel("g.op")


def test_explicitly_named_backend_that_fails_to_import_raises(
    catalog_dir: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    catalog = catalog_dir.load()
    with pytest.raises(KernelImportError, match=r"^cannot load backend 'broken' of op 'g\.op'") as info:
        catalog.kernel("g.op", backend="broken")
    assert isinstance(info.value.__cause__, RuntimeError)
    assert _warnings(caplog) == []
    assert catalog.kernel("g.op", backend="good")() == "kernel"


def test_explicitly_named_backend_known_to_have_failed_raises_with_the_failure(catalog_dir: Workspace) -> None:
    catalog = catalog_dir.load()
    catalog.kernel("g.op")  # falls back, remembering the failure
    with pytest.raises(
        NoEligibleBackendError,
        match=rf"^no backend of op 'g\.op' can run on cpu: broken: import failed on first use: {FAILURE}$",
    ):
        catalog.select("g.op", "cpu", backend="broken")


def test_when_every_import_fails_the_error_lists_every_failure(
    workspace: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    workspace.module("kc_sel_broken", BROKEN)
    workspace.module("kc_sel_broken2", "import kc_sel_no_such_module\n\n\ndef kernel():\n    pass\n")
    workspace.write(
        {"op": workspace.op({"one": "kc_sel_broken:kernel", "two": "kc_sel_broken2:kernel"})}, backends=["one", "two"]
    )
    catalog = workspace.load()
    with pytest.raises(NoEligibleBackendError) as info:
        catalog.kernel("g.op")
    assert info.value.rejected == (
        Rejected("one", f"import failed on first use: {FAILURE}", RejectKind.IMPORT_FAILED),
        Rejected(
            "two",
            "import failed on first use: ModuleNotFoundError: No module named 'kc_sel_no_such_module'",
            RejectKind.IMPORT_FAILED,
        ),
    )
    assert len(_warnings(caplog)) == 2


def test_op_handle_falls_back_too(catalog_dir: Workspace) -> None:
    torch = pytest.importorskip("torch")
    catalog = catalog_dir.load()
    assert catalog.op("g.op")(torch.zeros(2)) == "kernel"
    assert catalog.select("g.op", "cpu").chosen.backend == "good"  # type: ignore[union-attr]
