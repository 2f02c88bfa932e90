"""Following a target through what the sources bind: bases in method resolution order, re-exports, star
imports, what cannot be followed, what may not be walked through, and the module that defines the object."""

from __future__ import annotations

import ast
import gc
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Site

import kcatalog
from kcatalog.pyresolve import TargetChecker, target_modules

Write = Callable[..., None]


@pytest.fixture
def write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Write]:
    """`write(name, source)`: a throwaway module `name` ('a.b' makes package a) on sys.path, never imported."""
    root = tmp_path / "modules"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    written: list[str] = []

    def write(name: str, source: str) -> None:
        parts = name.split(".")
        directory = root.joinpath(*parts[:-1])
        directory.mkdir(parents=True, exist_ok=True)
        for depth in range(1, len(parts)):
            init = root.joinpath(*parts[:depth], "__init__.py")
            if not init.exists():
                init.write_text("")
        (directory / f"{parts[-1]}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        written.append(parts[0])

    yield write
    assert not [name for name in sys.modules if name.partition(".")[0] in written]  # nothing was imported


def problem(target: str) -> str | None:
    found = TargetChecker().check(target)
    return None if found is None else f"{found.code} {found.message}"


def test_methods_in_c3_order_across_modules(write: Write) -> None:
    write("kcr_mro.a", "class A:\n    def m(self): ...\n    def only_a(self): ...\n")
    write("kcr_mro.b", "from kcr_mro.a import A\nclass B(A):\n    pass\n")
    write("kcr_mro.c", "from kcr_mro.a import A\nclass C(A):\n    def m(self): ...\n")
    write("kcr_mro.d", "from kcr_mro.b import B\nfrom kcr_mro.c import C\nclass D(B, C):\n    pass\n")
    checker = TargetChecker()
    assert checker.check("kcr_mro.d:D.m") is None
    assert checker.defining_module("kcr_mro.d:D.m") == "kcr_mro.c"  # C3: D, B, C, A (depth first would say A)
    assert checker.defining_module("kcr_mro.d:D.only_a") == "kcr_mro.a"
    assert checker.defining_module("kcr_mro.d:D.__init__") == "builtins"  # object's


def test_nested_classes_and_bases_seen_from_the_class_body(write: Write) -> None:
    write(
        "kcr_nested",
        """
        class Outer:
            class Base:
                def deep(self): ...
            class Child(Base):  # Base as the class body sees it: Outer.Base
                pass
        class Base:
            pass
        """,
    )
    assert problem("kcr_nested:Outer.Child.deep") is None


def test_builtin_bases(write: Write) -> None:
    write("kcr_builtin", "class Table(dict):\n    pass\nclass Failure(RuntimeError):\n    pass\n")
    assert problem("kcr_builtin:Table.setdefault") is None
    assert problem("kcr_builtin:Failure.with_traceback") is None
    assert problem("kcr_builtin:Table.nope") == "KC302 target 'kcr_builtin:Table.nope': class 'Table' defines no 'nope'"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "import abc\nclass K(abc.ABC):\n    def f(self): ...\n",
            "KC302 target 'kcr_meta:K.g': class 'K' defines no 'g', nor do its bases (abc.ABC)",
        ),
        (
            "from dataclasses import dataclass\n@dataclass\nclass K:\n    def f(self): ...\n",
            "KC302 target 'kcr_meta:K.g': class 'K' defines no 'g'",
        ),
        (
            "class K(metaclass=Registry):\n    def f(self): ...\n",
            "KC304 target 'kcr_meta:K.g': 'g' not found in class 'K', whose metaclass 'Registry' may add attributes; "
            "not verifiable statically",
        ),
        (
            "@register('rms')\nclass K:\n    def f(self): ...\n",
            "KC304 target 'kcr_meta:K.g': 'g' not found in class 'K', which is decorated with 'register', which may "
            "add attributes or replace it; not verifiable statically",
        ),
        (
            "class K(make_base()):\n    def f(self): ...\n",
            "KC304 target 'kcr_meta:K.g': 'g' not found in class 'K' or the bases that could be read: a base of "
            "class 'K' is a call expression; not verifiable statically",
        ),
        (
            "from math import inf as Base\nclass K(Base):\n    def f(self): ...\n",
            "KC304 target 'kcr_meta:K.g': 'g' not found in class 'K' or the bases that could be read: base 'Base' "
            "of class 'K' cannot be read: 'Base' is imported from 'math' (line 1 of 'kcr_meta'), but module 'math' "
            "is compiled ({math}); not verifiable statically",
        ),
    ],
)
def test_what_may_add_class_attributes_makes_a_missing_one_unverifiable(
    source: str, expected: str, write: Write, site: Site
) -> None:
    write("kcr_meta", source)
    assert problem("kcr_meta:K.f") is None
    math = next(line for line in site.expected() if "'math:sqrt'" in line).partition("compiled (")[2].partition(")")[0]
    assert problem("kcr_meta:K.g") == expected.replace("{math}", math)


def test_an_unreadable_base_before_the_one_defining_the_method_hides_where_it_is_defined(write: Write) -> None:
    write(
        "kcr_hidden",
        "from math import inf as Compiled\nclass Known:\n    def m(self): ...\nclass K(Compiled, Known):\n    pass\n",
    )
    checker = TargetChecker()
    assert checker.check("kcr_hidden:K.m") is None  # it exists, whatever the compiled base holds
    assert checker.defining_module("kcr_hidden:K.m") is None  # but the compiled base might define it first


def test_methods_of_an_instance_made_at_the_top_of_its_module(write: Write) -> None:
    write("kcr_inst.base", "class Base:\n    def forward_cuda(self, x): ...\n")
    write(
        "kcr_inst.ops",
        """
        from kcr_inst.base import Base

        class Op(Base):
            def forward_native(self, x): ...

        OP = Op()
        OP.forward_extra = len

        class Holder:
            inner = Op()
        """,
    )
    checker = TargetChecker()
    assert checker.check("kcr_inst.ops:OP.forward_native") is None
    assert checker.defining_module("kcr_inst.ops:OP.forward_native") == "kcr_inst.ops"
    assert checker.check("kcr_inst.ops:OP.forward_cuda") is None
    assert checker.defining_module("kcr_inst.ops:OP.forward_cuda") == "kcr_inst.base"  # inherited
    assert checker.check("kcr_inst.ops:OP.forward_extra") is None  # set on the instance at the top level
    assert checker.check("kcr_inst.ops:Holder.inner.forward_cuda") is None  # an instance in a class body
    assert problem("kcr_inst.ops:OP.forward_hip") == (
        "KC304 target 'kcr_inst.ops:OP.forward_hip': 'OP' is the result of a call to 'Op' (line 7 of "
        "'kcr_inst.ops'): class 'Op' defines no 'forward_hip', nor do its bases (kcr_inst.base.Base) (did you mean "
        "'forward_native'?), and an instance may be given attributes when it runs (in __init__, say); not verifiable "
        "statically"
    )


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("def make():\n    return 1\nX = make()\n", "'make' is a function, whose result only running it shows"),
        (
            "class Op:\n    def __new__(cls):\n        return 1\n    def f(self): ...\nX = Op()\n",
            "class 'Op' defines __new__, which may return another object",
        ),
        (
            "class Base:\n    def __new__(cls):\n        return 1\nclass Op(Base):\n    def f(self): ...\nX = Op()\n",
            "class 'Op' defines __new__ (in its base 'Base'), which may return another object",
        ),
        (
            "class Meta(type):\n    def __call__(cls):\n        return 1\nclass Op(metaclass=Meta):\n"
            "    def f(self): ...\nX = Op()\n",
            "class 'Op' has the metaclass 'Meta', whose __call__ may return another object",
        ),
        (
            "class Op(make_base()):\n    def f(self): ...\nX = Op()\n",
            "class 'Op' has a base that cannot be read, which may define __new__ (a base of class 'Op' is a call "
            "expression)",
        ),
    ],
)
def test_an_instance_whose_call_decides_at_run_time_is_unverifiable(source: str, why: str, write: Write) -> None:
    write("kcr_made", source)
    line = source.count("\n")
    assert problem("kcr_made:X.f") == (
        f"KC304 target 'kcr_made:X.f': 'X' is the result of a call to '{source.split('X = ')[1].split('(')[0]}' "
        f"(line {line} of 'kcr_made'); {why}; 'f' on it is not verifiable statically"
    )


def test_a_globals_loop_rebinding_existing_names_hides_no_missing_one(write: Write) -> None:
    write(
        "kcr_glob",
        """
        from os import sep, getcwd
        for _name in ["sep", "getcwd", "missing"]:
            if _name in globals():
                globals()[_name] = str(globals()[_name])
        """,
    )
    assert problem("kcr_glob:sep") is None
    assert problem("kcr_glob:dsv3_fused_a_gemm") == (
        "KC302 target 'kcr_glob:dsv3_fused_a_gemm': module 'kcr_glob' defines no 'dsv3_fused_a_gemm'"
    )


def test_attributes_set_on_names_after_their_definition(write: Write) -> None:
    write("kcr_set", "class K:\n    pass\nK.forward = len\ndef f(x): ...\nsetattr(f, 'cuda', f)\n")
    assert problem("kcr_set:K.forward") is None
    assert problem("kcr_set:f.cuda") is None


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "def __getattr__(name):\n    raise AttributeError(name)\n",
            "KC304 target 'kcr_dyn:k': 'k' not found in the source of 'kcr_dyn', which defines __getattr__; "
            "not verifiable statically",
        ),
        (
            "globals().update(k=len)\n",
            "KC304 target 'kcr_dyn:k': 'k' not found in the source of 'kcr_dyn', which uses globals() (line 1); "
            "not verifiable statically",
        ),
        (
            "def setup():\n    global k\n    k = len\n",
            "KC304 target 'kcr_dyn:k': 'k' in 'kcr_dyn' is assigned only inside a function ('global k', line 2); "
            "not verifiable statically",
        ),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from os import sep as k\n",
            "KC302 target 'kcr_dyn:k': module 'kcr_dyn' defines no 'k' ('k' is bound only under "
            "'if TYPE_CHECKING:', which is false at run time)",
        ),
    ],
)
def test_names_the_source_does_not_show(source: str, expected: str, write: Write) -> None:
    write("kcr_dyn", source)
    assert problem("kcr_dyn:k") == expected


def test_re_exports(write: Write) -> None:
    write("kcr_re.impl", "def kernel(x): ...\n")
    write("kcr_re.mid", "from .impl import kernel as renamed\n")
    write("kcr_re.api", "from kcr_re.mid import renamed\nfrom .impl import missing\nfrom .absent import other\n")
    write("kcr_re.cycle_a", "from .cycle_b import x\n")
    write("kcr_re.cycle_b", "from .cycle_a import x\n")
    checker = TargetChecker()
    assert checker.check("kcr_re.api:renamed") is None
    assert checker.defining_module("kcr_re.api:renamed") == "kcr_re.impl"
    assert problem("kcr_re.api:missing") == (
        "KC302 target 'kcr_re.api:missing': 'missing' is imported from 'kcr_re.impl' (line 2 of 'kcr_re.api'), "
        "but module 'kcr_re.impl' defines no 'missing'"
    )
    assert problem("kcr_re.api:other") == (
        "KC301 target 'kcr_re.api:other': 'other' is imported from 'kcr_re.absent' (line 3 of 'kcr_re.api'), but "
        "module 'kcr_re.absent' not found: package 'kcr_re' has no module 'absent'; "
        "its modules: api, cycle_a, cycle_b, impl, mid"
    )
    assert (problem("kcr_re.cycle_a:x") or "").endswith(
        "'x' is only re-exported in a cycle of imports through 'kcr_re.cycle_a', never defined"
    )


def test_star_imports_follow_all_and_public_names(write: Write) -> None:
    write("kcr_star.listed.sub", "def deep(): ...\n")
    write("kcr_star.listed.__init__", "__all__ = ['kept', 'sub']\ndef kept(): ...\ndef dropped(): ...\n")
    write("kcr_star.public", "import os\ndef shown(): ...\ndef _hidden(): ...\n")
    write("kcr_star.api", "from .listed import *\nfrom .public import *\n")
    checker = TargetChecker()
    assert checker.check("kcr_star.api:kept") is None
    assert checker.check("kcr_star.listed:sub.deep") is None  # __all__ names a submodule: the star import imports it
    assert (checker.check("kcr_star.api:sub.deep") or pytest.fail()).code == "KC305"  # ... into api: not api's own
    assert checker.check("kcr_star.api:shown") is None
    assert (checker.check("kcr_star.api:dropped") or pytest.fail()).code == "KC302"
    assert (checker.check("kcr_star.api:_hidden") or pytest.fail()).code == "KC302"
    assert (checker.check("kcr_star.api:os.sep") or pytest.fail()).code == "KC305"  # public, but a module


def test_the_allow_list_cannot_be_escaped_through_an_attribute_path() -> None:
    """The issue's repro: with allowed_modules [kcatalog.kernels], `...layernorm:torch.os.system` passed."""
    found = TargetChecker().check("kcatalog.kernels.torch.layernorm:torch.os.system")
    assert found is not None and found.is_error
    assert f"{found.code} {found.message}" == (
        "KC305 target 'kcatalog.kernels.torch.layernorm:torch.os.system': 'torch' in "
        "'kcatalog.kernels.torch.layernorm' is the imported module 'torch'; an attribute path may not walk "
        "through an imported module"
    )


def test_defining_modules(site: Site) -> None:
    checker = TargetChecker()
    assert checker.defining_module("kcfx:ReexportedOp") == "kcfx.layers.base"
    assert checker.defining_module("kcfx.reexport:Norm.forward_cuda") == "kcfx.layers.norm"
    assert checker.defining_module("kcfx.reexport:Norm.forward_native") == "kcfx.layers.base"
    assert checker.defining_module("kcfx:layers") == "kcfx.layers"  # the package's own submodule
    assert checker.defining_module("kcfx.bindings:kernel.cuda") == "kcfx.bindings"
    assert checker.defining_module("kcfx.fast:fused") is None  # compiled: not shown
    assert checker.defining_module("kcfx.imports:os.system") is None  # refused: KC305


@pytest.mark.parametrize("text", ["kcfx.bindings:kernel\n", "kcfx.bindings:ker\rnel", "kcfx.bind\nings:kernel"])
def test_line_breaks_in_a_target_never_reach_a_message_raw(text: str, site: Site) -> None:
    found = TargetChecker().check(text)
    assert found is not None
    assert "\n" not in found.message and "\r" not in found.message
    assert repr(text.partition(":")[2] if "\n" not in text.partition(":")[0] else text.partition(":")[0])[1:-1] in (
        found.message
    )


def test_each_module_is_indexed_once_and_no_syntax_tree_is_kept(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    indexed: list[str] = []
    real = target_modules.index_module

    def counting(tree: ast.Module, name: str, *args: Any) -> Any:
        indexed.append(name)
        return real(tree, name, *args)

    monkeypatch.setattr(target_modules, "index_module", counting)
    checker = TargetChecker()
    catalog, _ = kcatalog.check_catalog([site.catalog], check_targets=False)
    del catalog
    targets = []
    for line in (site.catalog / "fixture.yaml").read_text().splitlines():
        if "target:" in line:
            targets.append(line.partition("target: ")[2].rstrip("}").strip())
    for target in targets * 2:
        checker.check(target)
    assert len(indexed) == len(set(indexed)) > 10
    gc.collect()
    containers = (dict, list, tuple, set, frozenset, type(type.__dict__))
    seen: set[int] = set()
    stack: list[Any] = [checker]
    while stack:  # everything the checker holds on to: its own objects and the containers they hold
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        assert not isinstance(obj, ast.AST), type(obj)
        if isinstance(obj, containers) or type(obj).__module__.startswith("kcatalog."):
            stack.extend(gc.get_referents(obj))
    assert len(seen) > 500  # it did look at the indexes
    assert site.imported() == []


def test_conditions_nested_too_deeply_to_follow_are_unverifiable(write: Write) -> None:
    write("kcr_deep", "if " + "not " * 400 + "x:\n    k = 1\n")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(300)  # as a deeper program would meet it: the parse holds, following it does not
    try:
        found = TargetChecker().check("kcr_deep:k")
    finally:
        sys.setrecursionlimit(limit)
    assert found is not None and (found.code, found.message) == (
        "KC304",
        "target 'kcr_deep:k': module 'kcr_deep' nests its code too deeply to be followed; not verifiable statically",
    )
