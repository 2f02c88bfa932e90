"""Tests for kcatalog.kernels.triton._rows: tunables, the device's limits, and the launch arithmetic."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch

rows = pytest.importorskip("kcatalog.kernels.triton._rows")
triton_ln = pytest.importorskip("kcatalog.kernels.triton.layernorm")

# What torch reports for an H200 (cudaDeviceProp), and for a CDNA3 part through HIP.
H200 = rows.SmLimits(sms=132, regs=65536, threads=2048, shared=233472, warp_size=32, reg_unit=256, shared_reserved=1024)
MI300 = rows.SmLimits(sms=304, regs=65536, threads=2048, shared=65536, warp_size=64, reg_unit=512, shared_reserved=0)


# ------------------------------------------------------------------------------------------ tunables


def test_override_applies_inside_the_block_only() -> None:
    tunables = triton_ln.TUNING
    assert tunables.get() is tunables.default
    with tunables.override(programs_per_sm=0, row_tile=8192) as inner:
        assert tunables.get() is inner and (inner.programs_per_sm, inner.row_tile) == (0, 8192)
        with tunables.override(row_tile=1024):
            assert (tunables.get().programs_per_sm, tunables.get().row_tile) == (0, 1024)
        assert tunables.get() is inner
    assert tunables.get() is tunables.default


def test_override_is_restored_after_an_error_and_rejects_unknown_fields() -> None:
    tunables = triton_ln.TUNING
    with pytest.raises(RuntimeError), tunables.override(loop_block=256):
        raise RuntimeError
    assert tunables.get() is tunables.default
    with pytest.raises(TypeError, match="loop_blocks"), tunables.override(loop_blocks=256):
        pass


def test_override_is_local_to_its_thread() -> None:
    seen: list[int] = []
    with triton_ln.TUNING.override(programs_per_sm=7):
        worker = threading.Thread(target=lambda: seen.append(triton_ln.TUNING.get().programs_per_sm))
        worker.start()
        worker.join()
    assert seen == [triton_ln.TUNING.default.programs_per_sm]


def test_tunables_are_frozen_and_replaced_ones_start_a_fresh_memo() -> None:
    default = triton_ln.TUNING.default
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.row_tile = 1  # type: ignore[misc]
    default.config(4096, 64, 132)
    assert dataclasses.replace(default, row_tile=2048)._configs == {}
    assert dataclasses.replace(default) == default  # the memo takes no part in equality


def test_config_memo_is_bounded() -> None:
    tiling = rows.RowTiling()
    for n in range(1, 5000):
        tiling.config(n, 1, 1)
    assert len(tiling._configs) <= 4096
    assert tiling.config(7, 1, 1) == rows.RowTiling()._choose(7, 1, 2)


# ------------------------------------------------------------------------------------------ the device


def fake_properties(monkeypatch: pytest.MonkeyPatch, **fields: object) -> None:
    """torch.cuda.get_device_properties answers with `fields` (and the cached limits are forgotten)."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(**fields))
    rows._sm_limits.cache_clear()


@pytest.fixture(autouse=True)
def _forget_limits() -> Iterator[None]:
    yield
    rows._sm_limits.cache_clear()


def test_sm_limits_come_from_the_device_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_properties(
        monkeypatch,
        multi_processor_count=132,
        regs_per_multiprocessor=65536,
        max_threads_per_multi_processor=2048,
        shared_memory_per_multiprocessor=233472,
        warp_size=32,
    )
    monkeypatch.setattr(torch.version, "hip", None)
    assert rows.sm_limits(torch.device("cuda", 0)) == H200
    assert rows.num_sms(torch.device("cuda", 0)) == 132


def test_sm_limits_on_rocm_use_its_wavefront_and_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_properties(
        monkeypatch,
        multi_processor_count=304,
        regs_per_multiprocessor=65536,
        max_threads_per_multi_processor=2048,
        shared_memory_per_multiprocessor=65536,
        warp_size=64,
    )
    monkeypatch.setattr(torch.version, "hip", "6.2")
    assert rows.sm_limits(torch.device("cuda", 0)) == MI300


def test_sm_limits_fall_back_to_the_smallest_gpu_when_torch_does_not_say(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_properties(monkeypatch, multi_processor_count=40)
    monkeypatch.setattr(torch.version, "hip", None)
    limits = rows.sm_limits(torch.device("cuda", 0))
    assert (limits.sms, limits.regs, limits.threads, limits.shared, limits.warp_size) == (40, 65536, 1024, 65536, 32)


def test_num_sms_off_the_gpu_is_one() -> None:
    assert rows.num_sms(torch.device("cpu")) == 1
    assert rows.Spread().device_sms(torch.device("cpu")) == 1
    assert rows.Spread(sms=132).device_sms(torch.device("cpu")) == 132


def test_resident_per_sm() -> None:
    """Registers, threads and shared memory each cap the blocks that fit; at least one always does."""
    assert rows.resident_per_sm(32, 0, 4, H200) == 16  # threads: 2048 / 128
    assert rows.resident_per_sm(255, 16, 4, H200) == 2  # registers: 8192 per warp, 4 warps
    assert rows.resident_per_sm(40, 100_000, 4, H200) == 2  # shared memory
    assert rows.resident_per_sm(32, 0, 1, H200) == 16  # the architectural cap
    assert rows.resident_per_sm(255, 0, 32, H200) == 1  # nothing fits: still one
    assert rows.resident_per_sm(128, 0, 4, MI300) == 2  # 64-wide wavefronts: 8192 registers each
    assert rows.resident_per_sm(32, 20_000, 4, MI300) == 3  # 64 KiB of LDS


def test_persistent_programs() -> None:
    assert rows.persistent_programs(8192, 132, 8, 8) == 1024  # 8 tiles per program
    assert rows.persistent_programs(1000, 132, 8, 8) == 0  # fewer than 8 tiles per SM: one program per tile
    assert rows.persistent_programs(8192, 132, 0, 8) == 0
    assert rows.persistent_programs(1057, 132, 8, 8) == 529  # the same number of tiles (within one) each


def test_num_warps_steps() -> None:
    steps = (8192, 2048, 512, 256)
    assert [rows.num_warps(v, steps) for v in (1, 255, 256, 512, 2047, 2048, 8191, 8192, 1 << 20)] == [
        1,
        1,
        2,
        4,
        4,
        8,
        8,
        16,
        16,
    ]


# ---------------------------------------------------------------------------------- annotations


def _written_in(fn: object, path: str | None) -> bool:
    """Whether `fn` is a function whose code is in the file `path` (not generated, nor imported)."""
    inner = inspect.unwrap(fn) if callable(fn) else fn  # through functools.wraps (lru_cache, contextmanager)
    return inspect.isfunction(inner) and inner.__code__.co_filename == path


def _launch_code() -> list[tuple[str, object]]:
    """Every Python function and method the Triton modules define (the @triton.jit bodies excluded)."""
    import kcatalog.kernels.triton as package

    found: list[tuple[str, object]] = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                methods = vars(obj).items()
                found += [(f"{info.name}.{name}.{m}", f) for m, f in methods if _written_in(f, module.__file__)]
            elif _written_in(obj, module.__file__):
                found.append((f"{info.name}.{name}", obj))
    return found


def test_launch_code_is_fully_annotated() -> None:
    """mypy cannot check the Triton modules' Python code for missing annotations (the override that lets the
    @triton.jit bodies go unannotated covers the whole module), so this test does."""
    code = _launch_code()
    assert len(code) > 20
    missing = [
        name
        for name, fn in code
        if "return" not in fn.__annotations__  # type: ignore[attr-defined]
        or any(
            p.name not in fn.__annotations__  # type: ignore[attr-defined]
            for p in inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
            if p.name not in ("self", "cls")
        )
    ]
    assert missing == []


def test_integer_helpers_match_triton() -> None:
    """cdiv and next_power_of_2 give what triton's host functions give (they replace them in launch code)."""
    import triton

    for n in [0, 1, 2, 3, 5, 64, 100, 1023, 1024, 1025, 28672, 152064, (1 << 31) + 7]:
        assert rows.next_power_of_2(n) == triton.next_power_of_2(n)
        for d in (1, 2, 3, 7, 64, 1000, 4096):
            assert rows.cdiv(n, d) == triton.cdiv(n, d)
