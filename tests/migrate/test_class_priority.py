"""Orders kept on the classes a registry's targets are methods of (migrate/class_priority.py): read from the
source without importing it, through instances, bases of the same module and of another (also by a relative
import), and module-level names; from the live class where the module is imported; nothing where the source does
not tell. SGLang's own fused ops: tests/migrate/test_sglang.py."""

from __future__ import annotations

import enum
import importlib
import sys

from catalog_builder import Workspace

from kcatalog.migrate.class_priority import ClassOrder, class_orders, enum_members

BASE = """
import enum


class Backend(enum.Enum):
    FAST = "fast"
    SLOW = "slow"
    GPU = "gpu_x"


DEFAULT: tuple = (Backend.GPU, Backend.FAST, Backend.SLOW)


class BaseOp:
    priority = DEFAULT
"""

OPS = """
import triton_that_is_not_installed  # importing this module would fail: the reader never does
from .base import Backend, BaseOp as Base


class Inherits(Base):
    def forward_fast(self): ...


class Own(Base):
    priority = ("slow", Backend.FAST)


class Local(Own):
    pass


INSTANCE = Own()


class Computed(Base):
    priority = tuple(reversed((Backend.FAST, Backend.SLOW)))


class Unreadable(make_base()):
    pass


class NotBackends(Base):
    priority = (Backend.FAST, Backend.TURBO)


class Plain:
    pass
"""

OWNERS = ("Inherits", "Own", "Local", "INSTANCE", "Computed", "Unreadable", "NotBackends", "Plain")


class Backend(enum.Enum):  # the registry's backend enum, as its live specs carry it
    FAST = "fast"
    SLOW = "slow"
    GPU = "gpu_x"


def orders(package: str) -> dict[str, ClassOrder]:
    members = enum_members([Backend.FAST])
    targets = [(f"grp.{owner.lower()}", f"{package}.ops:{owner}.forward_fast") for owner in OWNERS]
    return class_orders(targets, members, members.values())


def test_enum_members_are_every_member_also_unused() -> None:
    assert enum_members([Backend.FAST, "text", None]) == {"FAST": "fast", "SLOW": "slow", "GPU": "gpu_x"}


def test_orders_are_read_from_the_source_without_importing_it(workspace: Workspace) -> None:
    package = workspace.package("kcprio_src", {"__init__": "", "base": BASE, "ops": OPS})
    found = orders(package)
    assert f"{package}.ops" not in sys.modules and f"{package}.base" not in sys.modules
    own = ("slow", "fast")
    assert found == {
        "grp.inherits": ClassOrder(("gpu_x", "fast", "slow"), f"{package}.ops:Inherits.priority"),
        "grp.own": ClassOrder(own, f"{package}.ops:Own.priority"),
        "grp.local": ClassOrder(own, f"{package}.ops:Local.priority"),
        "grp.instance": ClassOrder(own, f"{package}.ops:INSTANCE.priority"),
    }  # Computed, Unreadable, NotBackends (TURBO is no backend) and Plain: the source does not tell an order


def test_an_imported_module_is_read_live(workspace: Workspace) -> None:
    importable = OPS.replace("import triton_that_is_not_installed", "").replace("make_base()", "object")
    importable = importable.replace("Backend.TURBO", '"turbo"')
    package = workspace.package("kcprio_live", {"__init__": "", "base": BASE, "ops": importable})
    module = importlib.import_module(f"{package}.ops")  # now the values the engine ranks by are these
    module.Computed.priority = (Backend.SLOW,)
    found = orders(package)
    assert found["grp.computed"] == ClassOrder(("slow",), f"{package}.ops:Computed.priority")
    assert found["grp.own"].order == found["grp.instance"].order == ("slow", "fast")
    assert "grp.plain" not in found and "grp.notbackends" not in found


def test_only_member_targets_have_owners(workspace: Workspace) -> None:
    package = workspace.package("kcprio_paths", {"__init__": "", "base": BASE, "ops": OPS})
    members = enum_members([Backend.FAST])
    targets = [("a.b", f"{package}.ops:Own"), ("a.c", f"{package}.ops:Own.forward.fast"), ("a.d", "nowhere:X.y")]
    assert class_orders(targets, members, members.values()) == {}
