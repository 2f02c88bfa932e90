"""benchmarks/load_waves.py's SASS reading, on hand-written SASS: a load whose address (or destination) depends
on an earlier load's data starts a new wave; independent loads share one."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "load_waves.py"


@pytest.fixture(scope="module")
def waves() -> ModuleType:
    spec = importlib.util.spec_from_file_location("load_waves_under_test", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def sass(*lines: str) -> str:
    return "\n".join(f"        /*{16 * i:04x}*/                   {line} ;  /* 0x0 */" for i, line in enumerate(lines))


def test_a_gather_is_two_waves(waves: ModuleType) -> None:
    text = sass(
        "LDG.E.64 R4, desc[UR4][R2.64]",  # the position
        "LDG.E.128 R8, desc[UR4][R20.64]",  # q: independent of it
        "IMAD.WIDE R6, R4, 0x4, R12",  # the cache row's address: waits for the position
        "LDG.E.128 R12, desc[UR4][R6.64]",
        "FMUL R16, R8, R12",
        "STG.E.128 desc[UR4][R20.64], R16",
    )
    assert waves.load_waves(text) == [2, 1]


def test_reusing_a_loads_register_waits_for_it(waves: ModuleType) -> None:
    text = sass(
        "LDG.E.128 R4, desc[UR4][R2.64]",
        "@!P0 LDG.E.128 R8, desc[UR4][R2.64+0x10]",  # predicated: still a load of wave 0
        "MOV R5, RZ",  # overwrites a register the first load is writing: waits for it
        "LDG.E R12, desc[UR4][R2.64+0x20]",
    )
    assert waves.load_waves(text) == [2, 1]


def test_independent_loads_are_one_wave(waves: ModuleType) -> None:
    text = sass("LDG.E.128 R4, desc[UR4][R2.64]", "LDG.E.128 R8, desc[UR4][R2.64+0x10]", "IADD3 R20, R21, 0x1, RZ")
    assert waves.load_waves(text) == [2]
