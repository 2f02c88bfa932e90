"""Module indexes kept between checks (pyresolve/index_record.py): an index read back is the index, a key stands
for everything it is computed from, and a source indexed before is neither parsed nor syntax-checked again."""

from __future__ import annotations

import ast
import dataclasses
import marshal
import os
import sysconfig
import textwrap
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from kcatalog.pyresolve import TargetChecker, skeleton, target_modules
from kcatalog.pyresolve.index import ModuleIndex, index_module
from kcatalog.pyresolve.index_record import decode, encode, index_key

EVERY_FORM = """
from __future__ import annotations
import os, sys
import torch.nn as nn
from .base import Base as B, helper
from .. import sibling
from .stars import *
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from os import sep as hidden
__all__ = ["Op", "OP"]
__all__ += ["f"]
def f(): pass
class Meta(type): pass
@register("x")
class Op(B, nn.Module, metaclass=Meta):
    __slots__ = ("a",)
    x: int
    y = 1
    inner = B()
    class Nested(Op):
        def m(self): pass
    def forward(self): pass
OP = Op()
OP.cuda = f
setattr(f, "hip", f)
del sibling
def setup():
    global late
    late = 1
for _name in ["f"]:
    if _name in globals():
        globals()[_name] = f
"""


def plain(value: Any) -> Any:
    """An index as nested plain values, every field of every dataclass in it (a class index by its contents)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *(plain(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if isinstance(value, (MappingProxyType, dict)):
        return (type(value).__name__, {key: plain(item) for key, item in value.items()})
    if isinstance(value, tuple):
        return tuple(plain(item) for item in value)
    return value


def index(source: str, name: str = "pkg.mod") -> ModuleIndex:
    text = textwrap.dedent(source)
    return index_module(ast.parse(text), name, False, text.encode())


STDLIB = ("typing.py", "enum.py", "dataclasses.py", "argparse.py", "functools.py", "collections/__init__.py")


@pytest.mark.parametrize("module", ["every form", *STDLIB])
def test_an_index_read_back_is_the_index(module: str) -> None:
    if module == "every form":
        original = index(EVERY_FORM)
    else:
        source = Path(sysconfig.get_paths()["stdlib"], module).read_bytes()
        original = index_module(ast.parse(source), module.removesuffix(".py"), False, source)
    decoded = decode(encode(original))
    assert decoded is not None
    assert plain(decoded) == plain(original)


def test_the_every_form_module_uses_every_field() -> None:
    """So that the round trip above covers every kind of value an index holds."""
    found = index(EVERY_FORM)
    op = found.names["Op"][0].cls
    assert op is not None and op.metaclass and op.decorators and op.members["Nested"][0].cls is not None
    assert found.names["OP"][0].called == ("Op",) and found.stars and found.all and found.attributes
    assert found.global_names and found.unbound and op.unbound


@pytest.mark.parametrize("data", [b"", b"\x00garbage", marshal.dumps((99, ())), encode(index("x = 1"))[:-3]])
def test_what_is_not_an_index_decodes_to_none(data: bytes) -> None:
    assert decode(data) is None


def test_a_key_stands_for_the_source_the_module_and_its_kind() -> None:
    key = index_key("pkg.mod", False, "ab" * 64)
    assert key == index_key("pkg.mod", False, "ab" * 64)
    others = {index_key("pkg.other", False, "ab" * 64), index_key("pkg.mod", True, "ab" * 64)}
    others.add(index_key("pkg.mod", False, "cd" * 64))
    assert key not in others and len(others) == 3
    assert all(c in "0123456789abcdef" for c in key)  # a file name, never a path


class DictStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def put(self, key: str, data: bytes) -> None:
        self.data[key] = data


def test_a_source_indexed_before_is_neither_parsed_nor_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kcir_pkg").mkdir()
    (tmp_path / "kcir_pkg" / "__init__.py").write_text("from .ops import OP\n")
    (tmp_path / "kcir_pkg" / "ops.py").write_text("class Op:\n    def forward(self):\n        return 1\nOP = Op()\n")
    (tmp_path / "kcir_broken.py").write_text("def f():\n    return (\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    targets = ["kcir_pkg:OP.forward", "kcir_pkg.ops:Op.nope", "kcir_broken:f"]
    store = DictStore()
    cold = TargetChecker(store)
    first = [cold.check(target) for target in targets]
    assert len(store.data) == 2  # the package and its module; the one with a syntax error is never recorded
    assert first[0] is None and first[1] is not None and first[2] is not None and first[2].code == "KC306"

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(target_modules, "syntax_tree", refuse)
    warm = TargetChecker(store)
    assert [warm.check(target) for target in targets[:2]] == first[:2]
    assert warm.defining_module(targets[0]) == "kcir_pkg.ops"
    monkeypatch.setattr(target_modules, "syntax_tree", skeleton.syntax_tree)
    assert TargetChecker(store).check(targets[2]) == first[2]  # still checked, and still an error

    edited = "class Op:\n    def forward(self):\n        return (\n"
    (tmp_path / "kcir_pkg" / "ops.py").write_text(edited)  # an edit: another key, checked afresh
    problem = TargetChecker(store).check("kcir_pkg.ops:Op.forward")
    assert problem is not None and problem.code == "KC306"
    assert os.path.basename(str(tmp_path / "kcir_pkg" / "ops.py")) in problem.message
