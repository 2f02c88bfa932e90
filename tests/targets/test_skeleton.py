"""Parsing without function bodies: always to the same index as a whole parse, and never hiding a syntax error
(checked unless the bytecode cache vouches for the source)."""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import py_compile
import sysconfig
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kcatalog.pyresolve import TargetChecker
from kcatalog.pyresolve.index import ModuleIndex, index_module
from kcatalog.pyresolve.skeleton import _compiles, without_bodies


def summary(result: ModuleIndex) -> Any:
    """Everything an index holds, comparable."""

    def bindings(values: Any) -> Any:
        return tuple((b.kind, b.line, b.module, b.name, cls(b.cls) if b.cls else None) for b in values)

    def cls(c: Any) -> Any:
        return (c.line, {k: bindings(v) for k, v in c.members.items()}, c.bases, c.metaclass, c.decorators)

    return (
        {k: bindings(v) for k, v in result.names.items()},
        result.stars,
        result.all,
        result.all_dynamic,
        result.getattr,
        dict(result.unbound),
        dict(result.attributes),
        dict(result.global_names),
        result.dynamic,
    )


def same_index(source: bytes) -> bool | None:
    """Whether the skeleton gives the index a whole parse gives (None: it would not be used)."""
    tree = without_bodies(source)
    if tree is None:
        return None
    return summary(index_module(tree, "m", False, source)) == summary(
        index_module(ast.parse(source), "m", False, source)
    )


TRICKY = [
    # a string in a body holding lines that look like code at column 0
    'def f():\n    s = """\nx = 1\ndef g(): pass\n"""\n    return s\ny = 2\n',
    # a backslash continuation to column 0 inside a body
    "def f():\n    return 1 + \\\n2\nz = 3\n",
    # brackets continued to column 0 inside a body (falls back to a whole parse)
    "def f():\n    x = [\n1,\n]\n    return x\nw = 4\n",
    # a comment at column 0 inside a body, with quotes and a backslash
    "def f():\n# it's here \\\n    return 1\nv = 5\n",
    # a multi-line header, decorators, a one-line def, async, nested defs and classes
    "@deco(\n  1)\ndef f(a,\n      b=(1,\n2)) -> int:\n    def inner(): pass\n    return a\n"
    "def one(): return 1\nclass C:\n    async def m(self):\n        class Local: pass\n        return 1\n"
    "    x = 1\nu = 6\n",
    # a body that runs to the end of a file without a final newline
    "import sys\ndef f():\n    return 1",
    # defs under if/try/with at the top level, and a def in a string at the top level
    "import os\nif os.name:\n    def f():\n        return 1\nelse:\n    def f(): pass\ntry:\n    def g():\n        pass\n"
    "except Exception:\n    pass\n'''\ndef fake():\n    pass\n'''\nt = 7\n",
    # a walrus in a body must not leak to the top level
    "def f():\n    if (leak := 1):\n        return leak\n",
]


@pytest.mark.parametrize("source", TRICKY)
def test_tricky_sources_index_as_parsed_whole(source: str) -> None:
    assert same_index(source.encode()) in (True, None)


def test_the_standard_library_indexes_as_parsed_whole() -> None:
    """Every module of the standard library's top level: the skeleton's index equals the whole parse's."""
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    compared = 0
    for path in files:
        source = Path(path).read_bytes()
        if b"\r" in source:
            continue
        result = same_index(source)
        assert result in (True, None), path
        compared += result is True
    assert compared > len(files) // 2


def module(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kcfx_skel.py"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


SOURCE = "def kernel(x):\n    return x\n\n\nclass K:\n    def forward(self, x):\n        return x\n"


def test_only_bytecode_of_this_very_source_spares_the_syntax_check(tmp_path: Path) -> None:
    path = module(tmp_path, SOURCE)
    source = path.read_bytes()
    assert not _compiles(source, str(path))  # no bytecode: the syntax is checked
    py_compile.compile(str(path), doraise=True)
    assert _compiles(source, str(path))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))  # the bytecode is now stale
    assert not _compiles(source, str(path))


@pytest.mark.parametrize(
    ("mode", "used"),
    [
        (py_compile.PycInvalidationMode.CHECKED_HASH, True),
        (py_compile.PycInvalidationMode.UNCHECKED_HASH, True),
    ],
)
def test_hash_based_bytecode(tmp_path: Path, mode: py_compile.PycInvalidationMode, used: bool) -> None:
    path = module(tmp_path, SOURCE)
    py_compile.compile(str(path), doraise=True, invalidation_mode=mode)
    assert _compiles(path.read_bytes(), str(path)) is used
    edited = path.read_bytes().replace(b"return x", b"return y")
    path.write_bytes(edited)
    expected = mode is py_compile.PycInvalidationMode.UNCHECKED_HASH  # the import system would not look
    assert _compiles(edited, str(path)) is expected


def test_a_syntax_error_in_a_body_is_found_where_no_bytecode_vouches(tmp_path: Path, monkeypatch: Any) -> None:
    path = module(tmp_path, "def kernel(x):\n    return x *\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    problem = TargetChecker().check("kcfx_skel:kernel")
    assert problem is not None and problem.code == "KC306"
    assert (
        problem.message == "module 'kcfx_skel' cannot be imported: syntax error in kcfx_skel.py, line 2: invalid syntax"
    )
    assert (
        importlib.util.cache_from_source(str(path)) and not Path(importlib.util.cache_from_source(str(path))).exists()
    )


def test_a_syntax_error_the_compiler_finds_is_found_too(tmp_path: Path, monkeypatch: Any) -> None:
    module(tmp_path, "def kernel(x):\n    global x\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    problem = TargetChecker().check("kcfx_skel:kernel")
    assert problem is not None and problem.code == "KC306"
    assert problem.message.endswith("kcfx_skel.py, line 2: name 'x' is parameter and global")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("return 1\n\ndef kernel(x):\n    return x\n", "line 1: 'return' outside function"),
        ("def kernel(x):\n    return x\n\nbreak\n", "line 4: 'break' outside loop"),
        ("def kernel(x):\n    return x\n\nawait kernel\n", "line 4: 'await' outside function"),
    ],
)
def test_what_only_compiling_finds_is_found(tmp_path: Path, monkeypatch: Any, source: str, message: str) -> None:
    """Importing the module would reject these; its symbol table alone accepts them."""
    module(tmp_path, source)
    monkeypatch.syspath_prepend(str(tmp_path))
    problem = TargetChecker().check("kcfx_skel:kernel")
    assert problem is not None and problem.code == "KC306"
    assert problem.message.endswith(message), problem.message
