"""Locating modules without running any code: the walk of sys.path, what it finds where, what it never calls,
and fingerprints that change exactly when what a check read changes."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import subprocess
import sys
import types
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import Site

import kcatalog
from kcatalog.pyresolve import TargetChecker, current_fingerprint, finder, kinds
from kcatalog.pyresolve.finder import Finder


def where(name: str) -> tuple[str | None, str | None, tuple[str, ...] | None]:
    located = finder.locate(name).location
    return (located.kind, located.origin, located.search) if located else (None, None, None)


def test_regular_packages_namespace_portions_and_plain_modules(site: Site) -> None:
    root = str(site.root)
    assert where("kcfx") == (kinds.SOURCE, f"{root}/kcfx/__init__.py", (f"{root}/kcfx",))
    assert where("kcfx.ns") == (kinds.NAMESPACE, None, (f"{root}/kcfx/ns",))  # a directory without __init__.py
    assert where("kcfx.ns.deep.mod") == (kinds.SOURCE, f"{root}/kcfx/ns/deep/mod.py", None)
    assert where("kcfx_ns.sub") == (kinds.NAMESPACE, None, (f"{root}/kcfx_ns/sub",))
    assert where("kcfx.fast")[:2] == (kinds.EXTENSION, f"{root}/kcfx/fast{importlib.machinery.EXTENSION_SUFFIXES[0]}")
    assert site.imported() == []


def test_namespace_portions_are_gathered_over_every_path_entry(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    other = site.root.parent / "other_site"
    (other / "kcfx_ns" / "sub").mkdir(parents=True)
    (other / "kcfx_ns" / "sub" / "second.py").write_text("def k(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(other))
    assert where("kcfx_ns")[2] == (str(other / "kcfx_ns"), str(site.root / "kcfx_ns"))
    checker = TargetChecker()
    assert checker.check("kcfx_ns.sub.second:k") is None
    assert checker.check("kcfx_ns.sub.m:k") is None


def test_a_package_wins_over_a_module_and_an_earlier_entry_over_a_later_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "kcfx_order").mkdir(parents=True)
    (first / "kcfx_order" / "__init__.py").write_text("")
    (first / "kcfx_order.py").write_text("")
    second.mkdir()
    (second / "kcfx_shadowed.py").write_text("")
    (first / "kcfx_shadowed").mkdir()  # a namespace portion only: a module on a later entry wins
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    assert where("kcfx_order")[1] == str(first / "kcfx_order" / "__init__.py")
    assert where("kcfx_shadowed")[:2] == (kinds.SOURCE, str(second / "kcfx_shadowed.py"))


def test_built_in_frozen_and_aliased_modules() -> None:
    assert where("sys")[0] == kinds.BUILTIN
    kind, origin, _ = where("os")
    assert (
        kind in (kinds.FROZEN, kinds.SOURCE) and origin is not None and origin.endswith("os.py")
    )  # frozen: read from os.py
    assert TargetChecker().check("os:makedirs") is None
    alias = finder.locate("os.path").location  # os.path is posixpath (or ntpath), set by os at import
    assert alias is not None and alias.via == os.path.__name__
    checker = TargetChecker()
    assert checker.check("os.path:join") is None
    assert checker.defining_module("os.path:join") == os.path.__name__


def test_kcatalog_itself_is_found_by_plain_path_search() -> None:
    """The editable install puts src/ on sys.path with a .pth file: no import hook is needed to find it."""
    package = Path(kcatalog.__file__).parent
    assert where("kcatalog.kernels.torch.layernorm")[1] == str(package / "kernels" / "torch" / "layernorm.py")
    script = (
        "import sys\n"
        "from kcatalog.pyresolve import locate\n"
        "print(locate('kcatalog.kernels.torch.layernorm').location.origin)\n"
        "print([type(f).__name__ for f in sys.meta_path if type(f).__name__.startswith('_Editable')])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [str(package / "kernels" / "torch" / "layernorm.py"), "[]"]


def test_zip_archives_on_sys_path_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "kernels.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("kcfx_zipped/__init__.py", "from .norm import rms_norm\n")
        zipped.writestr("kcfx_zipped/norm.py", "def rms_norm(x, weight):\n    return x\n")
    monkeypatch.syspath_prepend(str(archive))
    kind, origin, search = where("kcfx_zipped")
    assert (kind, origin, search) == (
        kinds.SOURCE,
        str(archive / "kcfx_zipped" / "__init__.py"),
        (str(archive / "kcfx_zipped"),),
    )
    checker = TargetChecker()
    assert checker.check("kcfx_zipped:rms_norm") is None
    assert checker.defining_module("kcfx_zipped:rms_norm") == "kcfx_zipped.norm"
    problem = checker.check("kcfx_zipped.norm:layer_norm")
    assert problem is not None and problem.code == "KC302"
    assert "kcfx_zipped" not in sys.modules


def test_module_names_never_become_paths(site: Site) -> None:
    for name in ("kcfx..layers", "kcfx./etc", "kcfx.la\x00yers", "../kcfx"):
        assert finder.locate(name).location is None


# -- code that must never run ------------------------------------------------------------------------------


class Recorder(importlib.abc.MetaPathFinder):
    """A third-party import hook that records every call made to it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        self.calls.append(fullname)
        return None


def test_no_hook_is_called_and_a_module_only_a_hook_has_is_unverifiable(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(sys, "meta_path", [recorder, *sys.meta_path])
    checker = TargetChecker()
    assert checker.check("kcfx.layers.norm:FusedQKNorm.forward_cuda") is None
    problem = checker.check("kcfx_only_hooked:kernel")
    assert problem is not None and problem.code == "KC304"
    assert f"the third-party import hook {Recorder.__module__}.Recorder might provide it" in problem.message
    assert recorder.calls == []


def test_sys_modules_entries_are_never_read_beyond_their_dict(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    touched: list[str] = []

    class Proxy(types.ModuleType):
        def __getattribute__(self, name: str) -> Any:
            touched.append(name)
            return super().__getattribute__(name)

    class NotAModule:
        def __getattr__(self, name: str) -> Any:
            touched.append(name)
            raise AttributeError(name)

    monkeypatch.setitem(sys.modules, "kcfx_proxy", Proxy("kcfx_proxy"))
    monkeypatch.setitem(sys.modules, "kcfx_object", NotAModule())
    monkeypatch.setitem(sys.modules, "kcfx.layers", Proxy("kcfx.layers"))  # found by the walk: never looked at
    checker = TargetChecker()
    for target in ("kcfx_proxy:kernel", "kcfx_object:kernel"):
        problem = checker.check(target)
        assert problem is not None and problem.code == "KC304", problem
        assert f"is only in sys.modules (a {__name__}." in problem.message
    assert checker.check("kcfx.layers:FusedQKNorm.forward_cuda") is None
    assert touched == []


def test_a_module_a_hook_loaded_is_unverifiable_naming_its_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    class VendorLoader(importlib.abc.Loader):
        def create_module(self, spec: Any) -> None:
            return None

        def exec_module(self, module: types.ModuleType) -> None:
            module.kernel = len  # type: ignore[attr-defined]

    spec = importlib.machinery.ModuleSpec("kcfx_vendor_loaded", VendorLoader())
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "kcfx_vendor_loaded", module)
    problem = TargetChecker().check("kcfx_vendor_loaded:kernel")
    assert problem is not None and problem.code == "KC304"
    assert problem.message == (
        "target 'kcfx_vendor_loaded:kernel': module 'kcfx_vendor_loaded' is found only through a third-party "
        f"import hook ({VendorLoader.__module__}.{VendorLoader.__qualname__}); not verifiable statically"
    )


def test_setuptools_editable_finders_are_followed_through_their_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project" / "kcfx_editable"
    project.mkdir(parents=True)
    (project / "__init__.py").write_text("from .ops import kernel\n")
    (project / "ops.py").write_text("def kernel(x):\n    return x\n")
    calls: list[str] = []
    namespace = types.ModuleType("__editable___kcfx_editable_0_1_finder")
    namespace.MAPPING = {"kcfx_editable": str(project)}  # type: ignore[attr-defined]

    class _EditableFinder:  # what setuptools writes: find_spec is a classmethod
        @classmethod
        def find_spec(cls, fullname: str, path: Any = None, target: Any = None) -> None:
            calls.append(fullname)

    _EditableFinder.__module__ = namespace.__name__
    monkeypatch.setitem(sys.modules, namespace.__name__, namespace)
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, _EditableFinder])
    checker = TargetChecker()
    assert checker.check("kcfx_editable:kernel") is None
    assert checker.defining_module("kcfx_editable:kernel") == "kcfx_editable.ops"
    assert calls == []


def test_transformers_alias_finder_counts_only_for_modules_of_its_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers appends a finder on import that serves only old module paths inside its own package: a module
    missing elsewhere stays missing (KC301, KC303), not unverifiable; one missing inside it is unverifiable."""
    (tmp_path / "kcfx_vend" / "transformers").mkdir(parents=True)
    (tmp_path / "kcfx_vend" / "__init__.py").write_text("")
    (tmp_path / "kcfx_vend" / "transformers" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls: list[str] = []

    class _LegacyModuleAliasFinder:
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
            calls.append(fullname)

    _LegacyModuleAliasFinder.__module__ = "kcfx_vend.transformers.utils.import_utils"  # a vendored transformers
    _LegacyModuleAliasFinder.__qualname__ = "_LegacyModuleAliasFinder"
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, _LegacyModuleAliasFinder()])
    checker = TargetChecker()
    missing, absent = checker.check("kcfx_vend.kcfx_nope:f"), checker.check("kcfx_absent_pkg.mod:f")
    assert missing is not None and missing.code == "KC301"
    assert absent is not None and absent.code == "KC303"
    inside = checker.check("kcfx_vend.transformers.old_path:f")
    assert inside is not None and inside.code == "KC304"
    assert "kcfx_vend.transformers.utils.import_utils._LegacyModuleAliasFinder might provide it" in inside.message
    assert calls == []


def test_importing_transformers_leaves_missing_modules_missing() -> None:
    """The real finder, as transformers installs it: a typo in kcatalog.kernels stays an error."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed here")
    script = (
        "import sys, transformers\n"
        "from kcatalog.pyresolve import TargetChecker\n"
        "print(any(type(f).__name__ == '_LegacyModuleAliasFinder' for f in sys.meta_path))\n"
        "print(TargetChecker().check('kcatalog.kernels.tirton.layernorm:rms_norm').code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["True", "KC301"]


def test_setuptools_distutils_shim_is_never_called() -> None:
    """`distutils.core:setup` made the shim import setuptools (~100 modules); `pip:main` made it remove itself."""
    pytest.importorskip("_distutils_hack")
    script = (
        "import sys\n"
        "from kcatalog.pyresolve import TargetChecker\n"
        "shims = [f for f in sys.meta_path if type(f).__name__ == 'DistutilsMetaFinder']\n"
        "if not shims:\n"
        "    print('no shim'); raise SystemExit\n"
        "checker = TargetChecker()\n"
        "print(checker.check('distutils.core:setup'))\n"
        "print(checker.check('pip:main'))\n"
        "print('setuptools' in sys.modules, shims[0] in sys.meta_path)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "SETUPTOOLS_USE_DISTUTILS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    lines = done.stdout.splitlines()
    if lines == ["no shim"]:
        pytest.skip("setuptools' distutils shim is not installed here")
    distutils, pip, state = lines
    assert distutils.startswith("KC304 warning: target 'distutils.core:setup': module 'distutils.core' is found only")
    assert "_distutils_hack.DistutilsMetaFinder" in distutils
    assert pip == "None" or pip.startswith("KC303")  # pip:main resolves statically (where pip is installed)
    assert state == "False True"  # setuptools not imported; the shim still installed


# -- fingerprints --------------------------------------------------------------------------------------------


def recorded(checker: TargetChecker) -> dict[str, tuple[Any, ...]]:
    return {fingerprint.module: fingerprint.found for fingerprint in checker.fingerprints()}


def test_fingerprints_cover_every_module_read_and_looked_for(site: Site) -> None:
    checker = TargetChecker()
    for target in (
        "kcfx.layers.norm:FusedQKNorm.forward_torch_compile",  # reads kcfx.layers.base for the base class
        "kcfx.reexport:kernel",  # reads the chain kcfx.chain.first, .second, .third
        "kcfx.stars_platform:fused",  # looks for kcfx._mac_only and does not find it
        "kcfx.stars:loop_kernel",  # reads kcfx.bindings through the star import
        "kcfx_ns.sub.m:k",
    ):
        checker.check(target)
    found = recorded(checker)
    for module in (
        "kcfx.layers.base",
        "kcfx.chain.first",
        "kcfx.chain.second",
        "kcfx.chain.third",
        "kcfx._mac_only",
        "kcfx.bindings",
        "kcfx_ns.sub.m",
    ):
        assert module in found
    assert found["kcfx._mac_only"][0] == "not found"
    assert {module: current_fingerprint(module) for module in found} == found


@pytest.mark.parametrize(
    "change",
    [
        "the source is edited, same size",
        "a namespace portion earlier on the path holds the module",
        "a package earlier on the path shadows the package",
        "the missing module appears",
        "a portion becomes a regular package, hiding the others",
    ],
)
def test_fingerprints_change_when_what_was_read_changes(
    change: str, site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    later = tmp_path / "later"
    (later / "kcfx_ns" / "sub").mkdir(parents=True)
    (later / "kcfx_ns" / "sub" / "second.py").write_text("def k(x):\n    return x\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(later)])
    checker = TargetChecker()
    for target in ("kcfx.chain.third:kernel", "kcfx_ns.sub.m:k", "kcfx_ns.sub.second:k", "kcfx.stars_platform:fused"):
        checker.check(target)
    before = recorded(checker)
    earlier = tmp_path / "earlier"
    if change == "the source is edited, same size":
        third = site.root / "kcfx" / "chain" / "third.py"
        third.write_text(third.read_text().replace("return x", "return y"))
        changed = {"kcfx.chain.third"}
    elif change == "a namespace portion earlier on the path holds the module":
        (earlier / "kcfx_ns" / "sub").mkdir(parents=True)
        (earlier / "kcfx_ns" / "sub" / "m.py").write_text("def k(x):\n    return x\n")
        monkeypatch.syspath_prepend(str(earlier))
        changed = {"kcfx_ns.sub.m"}
    elif change == "a package earlier on the path shadows the package":
        (earlier / "kcfx" / "chain").mkdir(parents=True)
        (earlier / "kcfx" / "__init__.py").write_text("")
        (earlier / "kcfx" / "chain" / "__init__.py").write_text("")
        (earlier / "kcfx" / "chain" / "third.py").write_text("def kernel(x):\n    return x\n")
        monkeypatch.syspath_prepend(str(earlier))
        # every module found under kcfx is now found elsewhere (or not at all); a module still not found is
        # still not found, which is all a check of it depended on
        changed = {module for module in before if module.startswith("kcfx.") and before[module][0] != "not found"}
    elif change == "the missing module appears":
        (site.root / "kcfx" / "_mac_only.py").write_text("def fused(x):\n    return x\n")
        changed = {"kcfx._mac_only"}
    else:
        (site.root / "kcfx_ns" / "__init__.py").write_text("")
        changed = {"kcfx_ns.sub.second"}  # now in a regular package: the later portion is no longer searched
    now = {module: current_fingerprint(module) for module in before}
    assert {module for module in before if now[module] != before[module]} == changed


def test_a_finder_caches_what_it_saw_for_one_check_only(site: Site) -> None:
    first = Finder()
    assert first.locate("kcfx.late") == first.locate("kcfx.late")
    assert first.locate("kcfx.late").location is None
    (site.root / "kcfx" / "late.py").write_text("")
    assert first.locate("kcfx.late").location is None  # the same check sees the same tree
    assert Finder().locate("kcfx.late").location is not None


def test_find_spec_names_what_the_walk_finds(site: Site) -> None:
    """The cache fingerprints PyYAML and pydantic with it: a spec with an origin, from the walk, calling no hook."""
    import yaml

    spec = finder.find_spec("yaml", None)
    assert spec is not None and spec.origin == yaml.__file__ and spec.submodule_search_locations is not None
    namespace = finder.find_spec("kcfx_ns", None)
    assert namespace is not None and namespace.origin is None
    assert finder.find_spec("deep", [str(site.root / "kcfx" / "ns")]) is not None
    assert finder.find_spec("kcfx_absent", None) is None


def test_a_third_party_path_hook_makes_a_missing_module_unverifiable(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def vendor_path_hook(entry: str) -> Any:
        calls.append(entry)
        raise ImportError(entry)

    monkeypatch.setattr(sys, "path_hooks", [*sys.path_hooks, vendor_path_hook])
    problem = TargetChecker().check("kcfx.not_here:kernel")
    assert problem is not None and problem.code == "KC304"
    assert f"{__name__}.{vendor_path_hook.__qualname__} might provide it" in problem.message
    assert calls == []


def test_a_module_loaded_from_a_file_the_walk_does_not_reach_is_read_from_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plugin systems load modules with spec_from_file_location: the module in sys.modules is that file's."""
    path = tmp_path / "elsewhere" / "plugin_kernels.py"
    path.parent.mkdir()
    path.write_text("def kernel(x):\n    return x\n")
    spec = importlib.util.spec_from_file_location("kcfx_plugin", path)
    assert spec is not None
    monkeypatch.setitem(sys.modules, "kcfx_plugin", importlib.util.module_from_spec(spec))  # not executed
    checker = TargetChecker()
    assert checker.check("kcfx_plugin:kernel") is None
    assert (checker.check("kcfx_plugin:other") or pytest.fail()).code == "KC302"
    assert where("kcfx_plugin")[:2] == (kinds.SOURCE, str(path))


def test_a_packages_modules_leave_out_its_bytecode_directory(tmp_path: Path) -> None:
    """Listed in a KC301 'its modules: ...', __pycache__ (written beside any imported source) is no module."""
    package = tmp_path / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "sub").mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("")
    (package / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"")
    assert Finder().submodules([str(package)]) == ["mod", "sub"]
