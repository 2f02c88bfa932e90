"""Op handles and kernel(): dispatch on the tensor's device and dtype, caching, scopes, and a racing first call."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

import kcatalog
from kcatalog import CatalogError, KernelSpec, NoEligibleBackendError

if TYPE_CHECKING:
    from catalog_builder import Workspace

    from kcatalog import Catalog

torch = pytest.importorskip("torch")

THREADS = 32

# Counts its own imports in a module that outlives it, and sleeps in its body to widen any race.
COUNTED = """
import time

import kc_sel_import_log

kc_sel_import_log.imports.append(__name__)
time.sleep(0.05)


def kernel(*args, **kwargs):
    return kernel
"""


@pytest.fixture
def by_dtype(workspace: Workspace) -> Workspace:
    """g.op over float32/float16: 'f32' only float32, 'f16' only float16, 'anyd' both; ranked in that order."""
    workspace.named_functions("kc_sel_dtype", ["f32", "f16", "anyd"])
    workspace.write(
        {
            "op": workspace.op(
                {
                    "f32": {"target": "kc_sel_dtype:f32", "dtypes": ["float32"]},
                    "f16": {"target": "kc_sel_dtype:f16", "dtypes": ["float16"]},
                    "anyd": "kc_sel_dtype:anyd",
                },
                dtypes=["float32", "float16"],
                signature="(x: Tensor, w: Tensor) -> Tensor",
            )
        },
        backends=["f32", "f16", "anyd"],
    )
    return workspace


def _spy_on_resolve(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    """Record (platform, dtype) of every resolution the catalog makes."""
    calls: list[tuple[str, str | None]] = []
    real = catalog.runtime.resolve_spec

    def resolve_spec(op: str, platform: Any = None, dtype: str | None = None, **kwargs: Any) -> KernelSpec:
        calls.append((str(platform), dtype))
        return real(op, platform, dtype, **kwargs)

    monkeypatch.setattr(catalog.runtime, "resolve_spec", resolve_spec)
    return calls


def test_handle_dispatches_on_dtype(by_dtype: Workspace) -> None:
    rms = by_dtype.load().op("g.op")
    w = torch.ones(4, dtype=torch.float16)
    assert rms(torch.ones(4, dtype=torch.float32), w) == "f32"
    assert rms(torch.ones(4, dtype=torch.float16), w) == "f16"
    assert rms(x=torch.ones(4, dtype=torch.float32), w=w) == "f32"
    assert rms.__name__ == "g_op"


def test_handle_checks_eligibility_of_the_dtype(by_dtype: Workspace) -> None:
    rms = by_dtype.load().op("g.op")
    with pytest.raises(
        NoEligibleBackendError,
        match=r"^no backend of op 'g\.op' can run on cpu: f32: does not support "
        r"bfloat16 \(supports float32\); f16: .*; anyd: does not support bfloat16",
    ):
        rms(torch.ones(4, dtype=torch.bfloat16), None)


@pytest.mark.parametrize(
    "signature",
    ["(w: Tensor, x: Tensor) -> Tensor", "(w: Tensor, /, x: Tensor) -> Tensor", "(w: Tensor, *, x: Tensor) -> Tensor"],
    ids=["positional", "after-positional-only", "keyword-only"],
)
def test_handle_dispatches_on_the_declared_dispatch_arg(workspace: Workspace, signature: str) -> None:
    workspace.named_functions("kc_sel_dtype", ["f32", "f16"])
    workspace.write(
        {
            "op": workspace.op(
                {
                    "f32": {"target": "kc_sel_dtype:f32", "dtypes": ["float32"]},
                    "f16": {"target": "kc_sel_dtype:f16", "dtypes": ["float16"]},
                },
                dtypes=["float32", "float16"],
                signature=signature,
                dispatch_arg="x",
            )
        },
        backends=["f32", "f16"],
    )
    handle = workspace.load().op("g.op")
    w16, x32 = torch.ones(2, dtype=torch.float16), torch.ones(2, dtype=torch.float32)
    assert handle(w16, x=x32) == "f32"
    if "*" not in signature:
        assert handle(w16, x32) == "f32"


def test_dispatch_arg_missing_from_the_signature_is_a_load_time_error(workspace: Workspace) -> None:
    workspace.named_functions("kc_sel_dtype", ["f32"])
    workspace.write(
        {
            "op": workspace.op(
                {"f32": "kc_sel_dtype:f32"}, signature="(x: Tensor, w: Tensor) -> Tensor", dispatch_arg="weight"
            )
        },
        backends=["f32"],
    )
    with pytest.raises(CatalogError) as info:
        workspace.load()
    [error] = [d for d in info.value.diagnostics if d.is_error]
    assert (error.code, error.message) == (
        "KC208",
        "dispatch_arg names 'weight', not a parameter of op 'g.op'; parameters: x, w",
    )
    assert error.location is not None and error.location.path.endswith("g.yaml")


def test_handle_resolves_once_per_device_and_dtype(by_dtype: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = by_dtype.load()
    calls = _spy_on_resolve(catalog, monkeypatch)
    handle = catalog.op("g.op")
    for _ in range(3):
        for dtype in (torch.float32, torch.float16, torch.float32):
            handle(torch.ones(2, dtype=dtype), None)
    assert calls == [("cpu", "float32"), ("cpu", "float16")]


def test_handle_honours_use_while_a_scope_is_open(by_dtype: Workspace) -> None:
    catalog = by_dtype.load()
    handle = catalog.op("g.op")
    x32 = torch.ones(2, dtype=torch.float32)
    with catalog.use({"g.op": "anyd"}):  # the first call inside a scope must not fill the cache
        assert handle(x32, None) == "anyd"
    assert handle(x32, None) == "f32"
    with catalog.use({"g.op": "anyd"}):  # nor may the cache hide an open scope
        assert handle(x32, None) == "anyd"
        with catalog.use({"g.*": "f32"}):
            assert handle(x32, None) == "f32"
        assert handle(x32, None) == "anyd"
    assert handle(x32, None) == "f32"


def test_handle_in_another_thread_does_not_see_a_scope(by_dtype: Workspace) -> None:
    catalog = by_dtype.load()
    handle = catalog.op("g.op")
    x32 = torch.ones(2, dtype=torch.float32)
    seen: list[str] = []
    with catalog.use({"g.op": "anyd"}):
        thread = threading.Thread(target=lambda: seen.append(handle(x32, None)))
        thread.start()
        thread.join(10)
        assert handle(x32, None) == "anyd"
    assert seen == ["f32"]


# -- a racing first call ---------------------------------------------------------------------------------


@pytest.fixture
def counted(workspace: Workspace) -> tuple[Catalog, list[str]]:
    """A catalog whose one backend's module records each import of itself in kc_sel_import_log.imports."""
    workspace.module("kc_sel_import_log", "imports = []\n")
    workspace.module("kc_sel_counted", COUNTED)
    workspace.write({"op": workspace.op({"only": "kc_sel_counted:kernel"})}, backends=["only"])
    catalog = workspace.load()
    import kc_sel_import_log  # type: ignore[import-not-found]

    return catalog, kc_sel_import_log.imports


def _race(call: Callable[[], Any]) -> list[Any]:
    """THREADS threads make `call` at the same moment; their results, or the first exception."""
    barrier = threading.Barrier(THREADS)
    results: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait(10)
        try:
            value = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            with lock:
                errors.append(exc)
            return
        with lock:
            results.append(value)

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    if errors:
        raise errors[0]
    assert len(results) == THREADS
    return results


def test_first_handle_call_from_many_threads_imports_once(counted: tuple[Catalog, list[str]]) -> None:
    catalog, imports = counted
    handle = catalog.op("g.op")
    x = torch.ones(2)
    assert "kc_sel_counted" not in sys.modules
    results = _race(lambda: handle(x))
    assert imports == ["kc_sel_counted"]
    assert len({id(fn) for fn in results}) == 1
    assert results[0] is catalog.info("g.op").backends["only"].load()


def test_first_handle_call_from_many_threads_resolves_once(
    counted: tuple[Catalog, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog, _ = counted
    calls = _spy_on_resolve(catalog, monkeypatch)
    handle = catalog.op("g.op")
    x = torch.ones(2)
    _race(lambda: handle(x))
    assert Counter(calls) == {("cpu", "float32"): 1}


def test_first_kernel_call_from_many_threads_imports_once(counted: tuple[Catalog, list[str]]) -> None:
    catalog, imports = counted
    catalog.platform()  # detect outside the race; it is not what this test is about
    results = _race(lambda: catalog.kernel("g.op"))
    assert imports == ["kc_sel_counted"]
    assert len({id(fn) for fn in results}) == 1
    assert catalog.kernel("g.op") is results[0]


def test_a_handle_passes_each_default_as_declared_cold_and_from_the_cache(workspace: Workspace, tmp_path: Any) -> None:
    """Defaults equal as values but not as types (True, 1, 1.0) stay apart in the load cache, and a list default
    keeps the handle's exact parameter list (it is a fresh list per handle, as in a Python def)."""
    torch = pytest.importorskip("torch")
    workspace.module("kc_sel_defaults", "def echo(x, k, sizes=None):\n    return (k, type(k).__name__, sizes)\n")
    signatures = {
        "as_bool": "(x: Tensor, k: bool = True, sizes: list[int] = [1, 2]) -> Tensor",
        "as_int": "(x: Tensor, k: int = 1, sizes: list[int] = [1, 2]) -> Tensor",
        "as_float": "(x: Tensor, k: float = 1.0, sizes: list[int] = [1, 2]) -> Tensor",
    }
    ops = {name: workspace.op({"ref": "kc_sel_defaults:echo"}, signature=sig) for name, sig in signatures.items()}
    directory = workspace.write(ops, backends=["ref"])
    x = torch.zeros(2)
    for expected_outcome in ("written", "hit"):
        catalog = kcatalog.load_catalog(directory, cache=tmp_path / "cache")
        assert catalog.cache_status.outcome.value == expected_outcome
        assert [catalog.op(f"g.{name}")(x) for name in signatures] == [
            (True, "bool", [1, 2]),
            (1, "int", [1, 2]),
            (1.0, "float", [1, 2]),
        ]
