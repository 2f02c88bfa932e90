"""The per-module index: what a module's top level binds, and how, as the code runs at import."""

from __future__ import annotations

import ast
import sys
import textwrap

import pytest

from kcatalog.pyresolve.index import CLASS, DEF, FROM, MODULE, VALUE, ModuleIndex, Star, decide, index_module


def index(source: str, name: str = "pkg.mod", is_package: bool = False) -> ModuleIndex:
    text = textwrap.dedent(source)
    return index_module(ast.parse(text), name, is_package, text.encode())


def kinds(result: ModuleIndex, name: str) -> list[str]:
    return [binding.kind for binding in result.names[name]]


def test_every_binding_form() -> None:
    result = index(
        """
        import os, numpy.linalg
        import torch.nn as nn
        from .base import Base as B
        from .. import sibling
        def f(): pass
        async def g(): pass
        class C: pass
        x = y = 1
        a, (b, *c) = 1, (2, 3)
        [d] = [4]
        e: int = 5
        for i, (j, k) in []: pass
        with open(__file__) as (h, q): pass
        if (w := 1): pass
        [z for z in () if (v := z)]
        try:
            pass
        except OSError as err:
            caught = err
        match 1:
            case [m1, *m2]: pass
            case {"k": m3, **m4}: pass
            case int(m5) | str(m5) as m6: pass
        """
    )
    assert kinds(result, "os") == [MODULE]
    assert result.names["numpy"][0].module == "numpy"  # `import a.b` binds a
    assert result.names["nn"][0].module == "torch.nn"
    assert (result.names["B"][0].kind, result.names["B"][0].module, result.names["B"][0].name) == (
        FROM,
        "pkg.base",
        "Base",
    )
    assert result.names["sibling"][0].module == ""  # beyond the top-level package
    assert kinds(result, "f") == kinds(result, "g") == [DEF]
    assert kinds(result, "C") == [CLASS]
    for name in ("x", "y", "a", "b", "c", "d", "e", "i", "j", "k", "h", "q", "w", "v", "caught"):
        assert kinds(result, name) == [VALUE], name
    for name in ("m1", "m2", "m3", "m4", "m5", "m6"):
        assert kinds(result, name) == [VALUE], name
    assert "z" not in result.names  # a comprehension's variable stays in it
    assert "err" not in result.names  # `except ... as err` unbinds err when the handler ends


def test_relative_imports_of_a_package_are_relative_to_itself() -> None:
    result = index("from . import sub\nfrom .sub import k\nfrom .. import up\n", "pkg", is_package=True)
    assert (result.names["sub"][0].module, result.names["k"][0].module) == ("pkg", "pkg.sub")
    assert result.names["up"][0].module == ""


@pytest.mark.parametrize(
    ("source", "bound", "unbound"),
    [
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\n", [], ["x"]),
        ("import typing\nif typing.TYPE_CHECKING:\n    x = 1\n", [], ["x"]),
        ("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    x = 1\nelse:\n    y = 1\n", ["y"], ["x"]),
        ("from typing import TYPE_CHECKING\nif not TYPE_CHECKING:\n    x = 1\nelse:\n    y = 1\n", ["x"], ["y"]),
        ("if TYPE_CHECKING and other:\n    x = 1\n", [], ["x"]),
        ("if TYPE_CHECKING or other:\n    x = 1\n", ["x"], []),
        ("if 0:\n    x = 1\n", [], ["x"]),
        ("import sys\nif sys.version_info >= (3, 0):\n    x = 1\nelse:\n    y = 1\n", ["x"], ["y"]),
        ("import sys\nif sys.version_info < (3,):\n    x = 1\n", [], ["x"]),
        ("import sys\nif sys.version_info[:2] >= (99, 0):\n    x = 1\n", [], ["x"]),
        ("import sys\nif (3, 0) <= sys.version_info:\n    x = 1\n", ["x"], []),
        ("import sys\nif sys.version_info.major == 3:\n    x = 1\n", ["x"], []),
        ("import sys\nif sys.platform == 'darwin':\n    x = 1\n", ["x"], []),  # undecidable: maybe bound
        ("import os\nif os.environ.get('X'):\n    x = 1\nelse:\n    y = 1\n", ["x", "y"], []),
        ("while False:\n    x = 1\n", [], ["x"]),
    ],
)
def test_branches_decided_here_and_branches_that_may_run(source: str, bound: list[str], unbound: list[str]) -> None:
    result = index(source)
    for name in bound:
        assert name in result.names, name
    for name in unbound:
        assert name not in result.names, name
        assert name in result.unbound, name


def test_del_unbinds_in_straight_line_code_only() -> None:
    result = index(
        """
        import os
        a = b = c = 1
        del a
        if os.environ.get("X"):
            del b
        c = 2
        del c
        c = 3
        """
    )
    assert "a" not in result.names and result.unbound["a"] == "deleted by 'del' at line 4"
    assert "b" in result.names  # deleted on one branch only: may still be bound
    assert "c" in result.names  # bound again after its del


def test_the_last_binding_wins_in_straight_line_code_and_every_way_counts_in_branches() -> None:
    result = index(
        """
        try:
            from ._fast import kernel
        except ImportError:
            def kernel(x): return x
        def once(): pass
        once = 1
        """
    )
    assert kinds(result, "kernel") == [FROM, DEF]
    assert kinds(result, "once") == [VALUE]


def test_annotations_without_a_value_bind_nothing() -> None:
    result = index("x: int\ny: int = 1\n")
    assert "x" not in result.names and result.unbound["x"] == "only annotated (line 1), never assigned"
    assert "y" in result.names


def test_star_imports_live_dead_and_certain() -> None:
    result = index(
        """
        import sys
        from typing import TYPE_CHECKING
        from .a import *
        if TYPE_CHECKING:
            from .dead import *
        if sys.platform == "win32":
            from .maybe import *
        """,
        "pkg.mod",
    )
    assert result.stars == (Star("pkg.a", 4, True), Star("pkg.maybe", 8, False))


@pytest.mark.parametrize(
    ("source", "names", "dynamic"),
    [
        ("__all__ = ['a', 'b']\n", ("a", "b"), False),
        (
            "__all__ = ('a',)\n__all__ += ['b']\n__all__.append('c')\n__all__.extend(('d',))\n",
            ("a", "b", "c", "d"),
            False,
        ),
        ("from .x import __all__ as x_all\n__all__ = ['a'] + x_all\n", None, True),
        ("__all__ = ['a']\n__all__ += other\n", None, True),
        ("def f(): pass\n", None, False),
    ],
)
def test_all_literal_or_not(source: str, names: tuple[str, ...] | None, dynamic: bool) -> None:
    result = index(source)
    assert (result.all, result.all_dynamic) == (names, dynamic)


def test_classes_members_bases_metaclass_decorators() -> None:
    result = index(
        """
        import abc, typing
        @dataclass
        @register("rms")
        class K(Base, mod.Other, typing.Generic[T], make(), metaclass=abc.ABCMeta):
            __slots__ = ("slot",)
            x = 1
            y: int
            def method(self): pass
            class Inner: pass
            if TYPE_CHECKING:
                hidden = 1
            del x
        K.added = staticmethod(len)
        setattr(K, "also", len)
        """
    )
    cls = result.names["K"][0].cls
    assert cls is not None
    assert sorted(cls.members) == ["Inner", "__slots__", "method", "slot"]
    assert cls.bases == (("Base",), ("mod", "Other"), ("typing", "Generic"), "a call expression")
    assert cls.metaclass == ("abc", "ABCMeta")
    assert cls.decorators == (("dataclass",), ("register",))
    assert cls.unbound["hidden"].startswith("bound only under 'if TYPE_CHECKING:'")
    assert cls.unbound["x"] == "deleted by 'del' at line 13"
    assert result.attributes["K"] == frozenset({"added", "also"})


def test_names_a_function_may_bind_make_a_module_dynamic() -> None:
    result = index(
        """
        def setup():
            global late, later
            late = later = 1
        """
    )
    assert result.global_names == {"late": 3, "later": 3}
    assert index("globals()['x'] = 1\n").dynamic == "uses globals() (line 1)"
    assert index("import sys\nsys.modules[__name__] = object()\n").dynamic == (
        "changes itself through sys.modules (line 2)"
    )
    assert index("def f(): pass\n").dynamic is None


def test_globals_only_read_or_rebinding_a_name_it_holds_binds_none() -> None:
    # sgl_kernel's loop: it can only replace names that exist, so it hides no missing one.
    loop = """
    for _name in NAMES:
        if _name in globals() and DEBUG:
            globals()[_name] = wrap(globals()[_name], globals().get("x"))
    """
    assert index(loop).dynamic is None
    assert index("if 'x' not in globals():\n    x = 1\n").dynamic is None
    assert index("for k, v in globals().items():\n    pass\n").dynamic is None


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("globals()[_name] = 1\n", 1),  # not tested to be there
        ("if _name in globals():\n    _name = 'other'\n    globals()[_name] = 1\n", 3),  # the tested name changes
        ("if _name in globals():\n    pass\nelse:\n    globals()[_name] = 1\n", 4),  # where it is not there
        ("if other in globals():\n    globals()[_name] = 1\n", 2),
        ("globals().update(k=1)\n", 1),
        ("exec('k = 1', globals())\n", 1),
        ("del globals()['k']\n", 1),
        ("def f():\n    globals()['k'] = 1\n", 2),  # a def's body: the tree may not hold it (skeleton.py)
        ("def globals():\n    return {}\nif k in globals():\n    globals()[k] = 1\n", 1),  # not the builtin
        ("# globals()\n", 1),
    ],
)
def test_globals_that_may_bind_a_new_name_makes_a_module_dynamic(source: str, line: int) -> None:
    assert index(source).dynamic == f"uses globals() (line {line})"


def test_module_getattr() -> None:
    assert index("def __getattr__(name): ...\n").getattr
    assert not index("class C:\n    def __getattr__(self, name): ...\n").getattr


def test_decide() -> None:
    def parsed(text: str) -> ast.expr:
        return ast.parse(text, mode="eval").body

    major, minor = sys.version_info[:2]
    assert decide(parsed(f"sys.version_info >= ({major}, {minor})")) is True
    assert decide(parsed(f"sys.version_info[1] > {minor}")) is False
    assert decide(parsed("sys.version_info >= '3'")) is None  # comparing a tuple with a str: not decided
    assert decide(parsed("sys.platform.startswith('linux')")) is None
    assert decide(parsed("not (TYPE_CHECKING or 0)")) is True


def test_class_bodies_bind_members_as_module_bodies_bind_names() -> None:
    result = index(
        """
        import sys
        class K:
            for loop_member in (1,):
                pass
            with open(__file__) as with_member:
                pass
            if (walrus_member := 1):
                pass
            first, (second, *rest) = 1, (2, 3)
            if sys.platform == "darwin":
                maybe = 1
            try:
                from ._fast import fast
            except ImportError:
                fast = None
            annotated: int
        """
    )
    cls = result.names["K"][0].cls
    assert cls is not None
    expected = {"loop_member", "with_member", "walrus_member", "first", "second", "rest", "maybe", "fast"}
    assert set(cls.members) == expected
    assert [b.kind for b in cls.members["fast"]] == [FROM, VALUE]
    assert cls.unbound["annotated"] == "only annotated (line 17), never assigned"
