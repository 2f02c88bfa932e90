"""SGLang's own code on kcatalog: the real `sglang.kernels` of SGLang 0.5.23 (its wheel, from the package index,
unpacked once into pytest's cache; only that subpackage, beside torch and msgspec) migrated by
`kcatalog import-registry`, and SGLang's own selector given kcatalog's drop-in registry (`kcatalog.compat`).

- `select_kernel` gives the same outcome with either registry, for every op with no backend, with each of its
  backends and with one it lacks, on cuda 9.0, hip and cpu: the same spec, or the same exception and message;
- the registry API answers alike (`get` of an unknown op is an empty list, as SGLang's callers expect);
- the migrated catalog chooses what SGLang's fused ops (`BaseFusedOp`) choose, by their class `priority`;
- the ops left to declaration order are those SGLang's selector cannot choose for by itself, each with a warning.

Only where the package index cannot be reached does this skip, and it says so.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sglang_wheels import SGL_KERNEL, SGLANG, cache_for, sgl_kernel_site, sglang_site

import kcatalog
from kcatalog.compat import CatalogRegistry
from kcatalog.compat import registry as compat_registry
from kcatalog.tools.cli import main


@dataclass(frozen=True)
class SGLang:
    """SGLang's kernels package, imported: its modules that this test drives."""

    registry: Any  # sglang.kernels.registry.registry, as its group packages filled it
    selector: ModuleType
    fused_op: ModuleType
    spec: ModuleType


@pytest.fixture(scope="module")
def sglang(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SGLang]:
    site = sglang_site(cache_for(request.config, tmp_path_factory, f"sglang-{SGLANG}"))
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        try:
            kernels = importlib.import_module("sglang.kernels")
            yield SGLang(kernels.registry, kernels.selector, kernels.fused_op, kernels.spec)
        finally:
            for name in [name for name in sys.modules if name == "sglang" or name.startswith("sglang.")]:
                del sys.modules[name]


@dataclass(frozen=True)
class Migrated:
    catalog: kcatalog.Catalog
    output: list[str]  # what import-registry printed
    directory: Path  # the catalog import-registry wrote


@pytest.fixture(scope="module")
def migrated(sglang: SGLang, tmp_path_factory: pytest.TempPathFactory) -> Migrated:
    out = tmp_path_factory.mktemp("sglang-catalog") / "catalog"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["import-registry", "sglang.kernels.registry:registry", "--out", str(out)])
    assert code == 0, printed.getvalue()
    # Its targets are checked against SGLang's source by `kcatalog validate`; here only what is chosen matters.
    catalog = kcatalog.load_catalog(out, cache=False, check_targets=False)
    return Migrated(catalog, printed.getvalue().splitlines(), out)


@pytest.fixture(scope="module")
def ours(migrated: Migrated) -> CatalogRegistry:
    return compat_registry(migrated.catalog)


def platforms(spec: ModuleType) -> dict[str, Any]:
    """SGLang's PlatformInfo for the platforms compared."""
    info = spec.PlatformInfo
    return {"cuda:9.0": info("cuda", 9, 0), "hip": info("hip"), "cpu": info("cpu")}


def facts(spec: Any) -> tuple[str, str, str, frozenset[tuple[str, Any, Any]]]:
    """What SGLang's code reads of a spec: op, backend, target, and each capability's device and arch window."""
    capabilities = frozenset((c.device.value, c.min_cuda_arch, c.max_cuda_arch) for c in spec.capabilities)
    return spec.op, spec.backend.value, spec.target, capabilities


def test_the_migration_takes_every_spec(sglang: SGLang, migrated: Migrated, ours: CatalogRegistry) -> None:
    assert len(sglang.registry.all_specs()) == 510 and len(sglang.registry.ops()) == 476
    assert [facts(spec) for spec in ours.all_specs()] == [facts(spec) for spec in sglang.registry.all_specs()]
    assert migrated.output[-2].startswith("Wrote 21 files to ") and "476 ops, 510 backend specs" in migrated.output[-2]


Outcome = tuple[str, str, str]


def outcome(select_kernel: Callable[..., Any], op: str, backend: Any) -> Outcome:
    """What SGLang's `select_kernel` gives: the spec's backend and target, or the exception's type and text."""
    try:
        spec = select_kernel(op, backend=backend)
    except Exception as exc:
        return "raised", type(exc).__name__, str(exc)
    return "spec", spec.backend.value, spec.target


def test_sglangs_selector_chooses_alike_on_the_drop_in(
    sglang: SGLang, ours: CatalogRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    selector, theirs = sglang.selector, sglang.registry
    backend_enum = sglang.spec.KernelBackend
    calls = []
    for op in [*theirs.ops(), "sglang.no_such_op"]:
        registered = [spec.backend for spec in theirs.get(op)]
        absent = next(backend for backend in backend_enum if backend not in registered)
        calls += [(op, backend) for backend in (None, *registered, absent)]
    results: dict[str, dict[str, list[Outcome]]] = {}
    for name, platform in platforms(sglang.spec).items():
        monkeypatch.setattr(selector, "_platform", lambda platform=platform: platform)
        for label, registry in (("sglang", theirs), ("kcatalog", ours)):
            monkeypatch.setattr(selector, "registry", registry)
            results.setdefault(name, {})[label] = [outcome(selector.select_kernel, op, b) for op, b in calls]
    for name, by_registry in results.items():
        differ = [(c, s, k) for c, s, k in zip(calls, by_registry["sglang"], by_registry["kcatalog"]) if s != k]
        assert not differ, f"{name}: {len(differ)} of {len(calls)} calls differ, e.g. {differ[:3]}"
    seen = {(kind, what) for by_registry in results.values() for kind, what, _ in by_registry["sglang"]}
    assert {("raised", "KeyError"), ("raised", "ValueError")} <= seen  # every path of the selector was taken
    assert len(calls) * len(results) == 4386 + 3 * 2  # SGLang's 476 ops with their 510 backends, and an unknown op


def test_the_registry_api_answers_alike(sglang: SGLang, ours: CatalogRegistry) -> None:
    theirs = sglang.registry
    assert ours.get("sglang.no_such_op") == theirs.get("sglang.no_such_op") == []
    assert ours.ops() == theirs.ops()
    for spec in theirs.all_specs():
        mine = ours.get_backend(spec.op, spec.backend)
        assert facts(mine) == facts(spec) and mine.backend == spec.backend and ours.has(spec.op)
        for platform in platforms(sglang.spec).values():
            assert mine.is_available(platform) == spec.is_available(platform), (spec.op, spec.backend, platform)
    absent = sglang.spec.KernelBackend.TORCH_NPU
    for registry in (theirs, ours):
        with pytest.raises(KeyError, match="torch_npu"):
            registry.get_backend("activation.silu_and_mul", absent)
    native = sglang.spec.KernelBackend.TORCH  # a bound method of SGLang's module-level fused op
    loaded = ours.get_backend("activation.silu_and_mul", native).load()
    assert loaded == theirs.get_backend("activation.silu_and_mul", native).load()


# -- SGLang's fused ops ----------------------------------------------------------------------------------------

# Of a fused op's module, what its class statement needs: the module's heavy imports (Triton, SGLang's server
# runtime) are left out, so only the class is built, over SGLang's own BaseFusedOp, enums and capabilities.
CLASS_IMPORTS = {"__future__", "typing", "sglang.kernels.fused_op", "sglang.kernels.spec"}


def fused_op_class(sglang: SGLang, module_name: str, owner: str) -> type:
    """SGLang's class behind a fused op's targets 'module:owner.forward_...' (a class or an instance of one): from
    the module where it is imported, else by running the class statement from SGLang's source."""
    module = sys.modules.get(module_name)
    if module is not None:
        obj = getattr(module, owner)
        return obj if isinstance(obj, type) else type(obj)
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), spec.origin)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    name = owner
    if name not in classes:  # `OWNER = Cls()`
        (made,) = [s.value for s in tree.body if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == owner]
        assert isinstance(made, ast.Call) and isinstance(made.func, ast.Name)
        name = made.func.id
    body: list[ast.stmt] = [
        node
        for node in tree.body
        if (isinstance(node, ast.ImportFrom) and node.module in CLASS_IMPORTS)
        or (isinstance(node, ast.Import) and all(alias.name in ("torch", "logging") for alias in node.names))
    ]
    namespace: dict[str, Any] = {"__name__": module_name}
    exec(compile(ast.Module([*body, classes[name]], []), spec.origin, "exec"), namespace)
    cls = namespace[name]
    assert issubclass(cls, sglang.fused_op.BaseFusedOp)
    return cls  # type: ignore[no-any-return]


def fused_ops(sglang: SGLang) -> dict[str, type]:
    """Each op whose specs are methods of one of SGLang's fused ops, and that op's class."""
    owners = {}
    for spec in sglang.registry.all_specs():
        module, _, path = spec.target.partition(":")
        if "." in path:
            owners[spec.op] = (module, path.partition(".")[0])
    return {op: fused_op_class(sglang, module, owner) for op, (module, owner) in owners.items()}


def sglang_choice(sglang: SGLang, cls: type, device: str) -> str | None:
    """The backend SGLang's fused op runs on the platform (its `auto_selected_backend`, else `forward_native`,
    the torch backend); None where it runs a platform forward (`forward_cpu`...), which no spec names."""
    op = cls.__new__(cls)  # the selection reads only the class: its priority, capabilities and methods
    chosen = sglang.fused_op.BaseFusedOp.auto_selected_backend(op)
    if chosen is not None:
        return str(chosen.value)
    forwards = {"cuda:9.0": ("forward_cuda",), "hip": ("forward_hip", "forward_cuda"), "cpu": ("forward_cpu",)}
    return None if any(op._defined_method(name) for name in forwards[device]) else "torch"


def test_the_migrated_catalog_chooses_as_sglangs_fused_ops(
    sglang: SGLang, migrated: Migrated, monkeypatch: pytest.MonkeyPatch
) -> None:
    classes = fused_ops(sglang)
    assert len(classes) == 10
    for device, platform in platforms(sglang.spec).items():
        monkeypatch.setattr(sglang.fused_op, "_platform", lambda platform=platform: platform)
        expected = {op: sglang_choice(sglang, cls, device) for op, cls in classes.items()}
        if device == "cuda:9.0":  # SGLang picks an optimized backend for every one: jit, aot, triton or cute_dsl
            assert set(expected.values()) == {"jit", "aot", "triton", "cute_dsl"}
        chosen = {op: migrated.catalog.select(op, device).backend for op in classes if expected[op] is not None}
        assert chosen == {op: backend for op, backend in expected.items() if backend is not None}, device


def test_the_ops_left_to_declaration_order_are_those_sglang_cannot_choose_for(
    sglang: SGLang, migrated: Migrated, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = sglang.spec.PlatformInfo
    everywhere = [info("cuda", *arch) for arch in ((8, 0), (9, 0), (10, 0), (10, 3), (12, 0))]
    everywhere += [info(device) for device in ("hip", "musa", "npu", "cpu")]
    ambiguous = set()  # where SGLang's selector asks the caller to name a backend
    for platform in everywhere:
        monkeypatch.setattr(sglang.selector, "_platform", lambda platform=platform: platform)
        for op in sglang.registry.ops():
            kind, what, text = outcome(sglang.selector.select_kernel, op, None)
            if what == "ValueError" and "has multiple backends usable" in text:
                ambiguous.add(op)
    warned = {match[1] for match in map(re.compile(r"KC709 warning: op '([^']+)'").match, migrated.output) if match}
    assert warned == ambiguous - set(fused_ops(sglang))
    assert len(warned) == 9


@pytest.fixture(scope="module")
def sgl_kernel(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sglang-kernel's `sgl_kernel` (the version SGLang pins), where the migrated catalog's AOT targets point."""
    return sgl_kernel_site(cache_for(request.config, tmp_path_factory, f"sglang-kernel-{SGL_KERNEL}"))


def test_the_migrated_catalog_validates_against_sglangs_source(
    migrated: Migrated, sgl_kernel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kcatalog validate` of the migrated catalog against SGLang's tree and sglang-kernel: the one target really
    absent from that sglang-kernel is an error at its line, though its module rebinds names through globals();
    methods of the fused-op instances SGLang makes at module level resolve; what stays "cannot tell" is what only
    running SGLang decides, and its message says why."""
    monkeypatch.syspath_prepend(str(sgl_kernel))
    monkeypatch.delenv("KCATALOG_NO_CACHE", raising=False)
    found = [d for d in kcatalog.check_catalog([migrated.directory]).diagnostics if d.code.startswith("KC3")]
    (error,) = [d for d in found if d.is_error]
    assert error.code == "KC302"
    assert error.message.startswith(
        "target 'sgl_kernel:dsv3_fused_a_gemm': module 'sgl_kernel' defines no 'dsv3_fused_a_gemm'"
    )
    assert error.location is not None
    lines = Path(error.location.path).read_text(encoding="utf-8").splitlines()
    assert "sgl_kernel:dsv3_fused_a_gemm" in lines[error.location.line - 1]
    assert not [d for d in found if "_FUSED_NORM_FP4_QUANT" in d.message]
    warnings = [d for d in found if not d.is_error]
    assert warnings and all(
        d.code == "KC304" and "is the result of a call to 'register_fused_op'" in d.message for d in warnings
    ), "\n".join(map(str, warnings))
