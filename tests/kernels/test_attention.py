"""Tests for the attention group (rotary_embedding, in place on query and key).

Triton kernels run under TRITON_INTERPRET=1 (tests/conftest.py) against the torch reference, always
on clones of the same inputs: the rotated dims must match, and everything the op must not touch (the
pass-through tail of partial rotary, v in a fused qkv buffer, positions, the cache) must stay
bit-identical. The interpreter truncates float32 -> bfloat16 (the GPU rounds to nearest), so bf16
errors here are ~4e-3, inside the 1e-2 tolerance.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from kcatalog.kernels.torch import attention as ref
from kcatalog.testing import check_close

triton_attn = pytest.importorskip("kcatalog.kernels.triton.attention")

MANIFEST = yaml.safe_load((Path(__file__).resolve().parents[2] / "catalog" / "attention.yaml").read_text())
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]
MAX_POS = 4096
H200_SMS = 132  # the launch configuration as on the GPU these kernels were tuned on
DEFAULTS = triton_attn.TUNING.default


@pytest.fixture(autouse=True)
def h200() -> Iterator[None]:
    """Launch as on an H200 (decode tokens split their heads over programs, as the cases below intend)."""
    with triton_attn.TUNING.override(sms=H200_SMS):
        yield


def tol(dtype: torch.dtype) -> float:
    """The manifest's rotary_embedding tolerance at `dtype`."""
    return float(MANIFEST["ops"]["rotary_embedding"]["tolerance"][str(dtype).removeprefix("torch.")])


def gen(*key: object) -> torch.Generator:
    """A generator seeded from the case, so every case gets its own reproducible inputs."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def cos_sin_cache(rot_dim: int, base: float = 10000.0, max_pos: int = MAX_POS) -> torch.Tensor:
    """vLLM's float32 cache: [max_pos, rot_dim], cos of every position's angles, then sin."""
    inv_freq = 1.0 / base ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float64), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).float()


def make_qk(
    g: torch.Generator, t: int, hq: int, hk: int, head_size: int, dtype: torch.dtype, three_d: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random query/key, [T, H * head_size] or [T, H, head_size]."""
    q = torch.randn(t, hq, head_size, generator=g).to(dtype)
    k = torch.randn(t, hk, head_size, generator=g).to(dtype)
    return (q, k) if three_d else (q.view(t, -1), k.view(t, -1))


def run_both(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_size: int, cache: torch.Tensor, is_neox: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate (q, k) in place with the triton kernel; return the reference's result on clones."""
    q_ref, k_ref = q.clone(), k.clone()
    ref.rotary_embedding(positions, q_ref, k_ref, head_size, cache, is_neox)
    assert triton_attn.rotary_embedding(positions, q, k, head_size, cache, is_neox) is None
    return q_ref, k_ref


# (T, Hq, Hk, head_size, rot_dim, 3-D): GQA with full rotary; partial rotary with a non-power-of-two
# half (24) and head_size 80; a decode token of a Llama-3-8B layer (heads split over 8 programs);
# MHA with rot_dim 32 of 96.
CASES = [(9, 8, 2, 64, 64, False), (7, 6, 2, 80, 48, True), (1, 32, 8, 128, 128, False), (5, 4, 4, 96, 32, True)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("t,hq,hk,head_size,rot_dim,three_d", CASES)
def test_triton_vs_reference(
    t: int, hq: int, hk: int, head_size: int, rot_dim: int, three_d: bool, is_neox: bool, dtype: torch.dtype
) -> None:
    g = gen("rope", t, hq, hk, head_size, rot_dim, three_d, is_neox, dtype)
    cache = cos_sin_cache(rot_dim)
    positions = torch.randint(0, MAX_POS, (t,), generator=g)
    q, k = make_qk(g, t, hq, hk, head_size, dtype, three_d)
    q0, k0, cache0, pos0 = q.clone(), k.clone(), cache.clone(), positions.clone()
    q_ref, k_ref = run_both(positions, q, k, head_size, cache, is_neox)
    name = f"rope {t}x{hq}/{hk}x{head_size} rot {rot_dim} neox={is_neox} {dtype}"
    check_close(f"{name} q", q, q_ref, tol(dtype))
    check_close(f"{name} k", k, k_ref, tol(dtype))
    # The pass-through dims of partial rotary, the cache and the positions are left bit-identical.
    for x, x0 in ((q, q0), (k, k0)):
        tail, tail0 = x.reshape(t, -1, head_size)[..., rot_dim:], x0.reshape(t, -1, head_size)[..., rot_dim:]
        assert torch.equal(tail, tail0)
    assert torch.equal(cache, cache0) and torch.equal(positions, pos0)


@pytest.mark.parametrize("rot", [128, 96], ids=["full", "partial"])
def test_triton_unmasked_tiles(rot: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`unmasked_tiles`: where every program's tiles hold only real heads (one program per token, all its heads),
    the launch says so (WHOLE_Q/WHOLE_K) and the result is the masked kernel's, bit for bit."""
    t, hq, hk, hs = 5, 8, 2, 128
    g = gen("whole", rot)
    cache = cos_sin_cache(rot)
    positions = torch.randint(0, MAX_POS, (t,), generator=g)
    q, k = make_qk(g, t, hq, hk, hs, torch.bfloat16, False)
    seen: list[dict[str, object]] = []
    launch = triton_attn.launch

    def spy(kernel: object, grid: object) -> object:
        run = launch(kernel, grid)
        return lambda *args, **kwargs: (seen.append(kwargs), run(*args, **kwargs))[1]

    monkeypatch.setattr(triton_attn, "launch", spy)
    q1, k1, q2, k2 = q.clone(), k.clone(), q.clone(), k.clone()
    with triton_attn.TUNING.override(sms=1, programs_per_sm=1):  # 5 tokens fill this "GPU": no head split
        triton_attn.rotary_embedding(positions, q1, k1, hs, cache, True)
        with triton_attn.TUNING.override(unmasked_tiles=True):
            q_ref, k_ref = run_both(positions, q2, k2, hs, cache, True)
    assert [(kw["WHOLE_Q"], kw["WHOLE_K"]) for kw in seen] == [(False, False), (True, True)]
    assert [kw.get("maxnreg") for kw in seen] == [48, 48]  # the register limit reaches the launch
    assert torch.equal(q1, q2) and torch.equal(k1, k2)
    check_close("rope unmasked q", q2, q_ref, tol(torch.bfloat16))
    check_close("rope unmasked k", k2, k_ref, tol(torch.bfloat16))


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("three_d", [False, True], ids=["2d", "3d"])
def test_triton_fused_qkv_views(three_d: bool, is_neox: bool) -> None:
    """q and k as strided views into one [T, (Hq + 2 Hk) * hs] qkv buffer, as engines pass them: the
    token stride is the qkv width, v and everything else in the buffer stays bit-identical."""
    t, hq, hk, hs, rot = 6, 4, 2, 64, 32
    g = gen("qkv", three_d, is_neox)
    qkv = torch.randn(t, (hq + 2 * hk) * hs, generator=g).to(torch.bfloat16)
    cache = cos_sin_cache(rot)
    positions = torch.randint(0, MAX_POS, (t,), generator=g)

    def views(buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if three_d:
            heads = buf.view(t, hq + 2 * hk, hs)
            return heads[:, :hq], heads[:, hq : hq + hk]
        return buf[:, : hq * hs], buf[:, hq * hs : (hq + hk) * hs]

    qkv_ref = qkv.clone()
    ref.rotary_embedding(positions, *views(qkv_ref), hs, cache, is_neox)
    triton_attn.rotary_embedding(positions, *views(qkv), hs, cache, is_neox)
    check_close("fused qkv", qkv, qkv_ref, tol(torch.bfloat16))
    assert torch.equal(qkv[:, (hq + hk) * hs :], qkv_ref[:, (hq + hk) * hs :])  # v untouched


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_triton_cache_in_activation_dtype_int32_positions(dtype: torch.dtype) -> None:
    """A cos_sin_cache stored in the activations' dtype, and strided int32 positions."""
    t, hq, hk, hs = 5, 4, 1, 64
    g = gen("cache_dtype", dtype)
    cache = cos_sin_cache(hs).to(dtype)
    positions = torch.randint(0, MAX_POS, (2 * t,), generator=g).to(torch.int32)[::2]  # strided, too
    q, k = make_qk(g, t, hq, hk, hs, dtype, False)
    q_ref, k_ref = run_both(positions, q, k, hs, cache, True)
    check_close("cache dtype q", q, q_ref, tol(dtype))
    check_close("cache dtype k", k, k_ref, tol(dtype))


def test_invalid_arguments() -> None:
    q, k = torch.zeros(3, 2 * 64), torch.zeros(3, 64)
    positions = torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match="rot_dim"):
        triton_attn.rotary_embedding(positions, q, k, 64, torch.zeros(10, 128), True)
    with pytest.raises(ValueError, match="multiple of head_size"):
        triton_attn.rotary_embedding(positions, q, torch.zeros(3, 70), 64, torch.zeros(10, 64), True)
    with pytest.raises(ValueError, match="tokens"):
        triton_attn.rotary_embedding(positions[:2], q, k, 64, torch.zeros(10, 64), True)
    empty = torch.zeros(0, 64)
    triton_attn.rotary_embedding(positions[:0], empty, empty, 64, torch.zeros(10, 64), True)


def test_launch_config_shapes() -> None:
    """Prefill: one program per token, cos/sin once per token, ptxas's register limit at up to 8 warps; decode:
    heads split over programs, no register limit."""
    sms = H200_SMS
    assert DEFAULTS.config(16384, 32, 8, 64, sms) == (32, 8, 1, 8, 48)  # Llama-3-8B prefill
    assert DEFAULTS.config(16384, 64, 8, 64, sms) == (64, 8, 1, 16, 0)  # Llama-3-70B prefill
    assert DEFAULTS.config(16384, 128, 8, 64, sms) == (64, 8, 2, 16, 0)  # too many heads for one tile
    assert DEFAULTS.config(1, 32, 8, 64, sms) == (8, 8, 4, 8, 0)  # decode: 4 programs of 8 q heads, 8 warps
    assert DEFAULTS.config(512, 32, 8, 64, sms) == (32, 8, 1, 8, 48)
    assert DEFAULTS.config(64, 32, 8, 64, sms) == (8, 8, 4, 8, 0)  # 64 tokens: still too few for the SMs
    assert DEFAULTS.config(1, 32, 8, 64, 2) == (8, 8, 4, 8, 0)  # decode on a 2-SM device: 4 programs
    more = dataclasses.replace(DEFAULTS, values_per_thread=64)  # 2 warps: the limit grows with the values
    assert more.config(16384, 32, 8, 64, sms) == (32, 8, 1, 2, 192)
    for t in (1, 7, 64, 300, 4096):
        for hq, hk in ((32, 8), (28, 4), (8, 8), (1, 1), (40, 40)):
            for half in (16, 24, 32, 64):
                bhq, bhk, split, warps, regs = DEFAULTS.config(t, hq, hk, half, H200_SMS)
                assert bhq & (bhq - 1) == 0 and bhk & (bhk - 1) == 0
                assert bhk <= max(bhq, triton_attn.TUNING.default.max_tile)
                assert split * bhq >= hq and split * bhk >= hk  # every head is covered
                assert 1 <= warps <= 16 and regs in (0, 48)
                assert not regs or warps <= 8


# --------------------------------------------------------------------------- reference, torch_compile


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_reference_against_complex_float64(is_neox: bool) -> None:
    """RoPE as complex multiplication in float64: (x1 + i x2) * (cos + i sin) per rotated pair."""
    t, hq, hk, hs, rot = 9, 3, 1, 64, 48
    g = gen("f64", is_neox)
    cache = cos_sin_cache(rot)
    positions = torch.randint(0, MAX_POS, (t,), generator=g)
    q, k = make_qk(g, t, hq, hk, hs, torch.float32, True)
    q_ref, k_ref = q.clone(), k.clone()
    ref.rotary_embedding(positions, q_ref, k_ref, hs, cache, is_neox)
    rotor = torch.complex(*cache.double()[positions].chunk(2, dim=-1))[:, None, :]  # [T, 1, rot/2]
    for x, out in ((q, q_ref), (k, k_ref)):
        x64 = x.double()
        rot_part = x64[..., :rot]
        if is_neox:
            z = torch.complex(rot_part[..., : rot // 2], rot_part[..., rot // 2 :]) * rotor
            expect = torch.cat((z.real, z.imag), dim=-1)
        else:
            z = torch.complex(rot_part[..., 0::2], rot_part[..., 1::2]) * rotor
            expect = torch.stack((z.real, z.imag), dim=-1).flatten(-2)
        check_close("ref rope vs complex", out[..., :rot], expect, 1e-6)
        assert torch.equal(out[..., rot:], x[..., rot:])


def test_torch_compile_backend() -> None:
    """One small float32 case: inductor's C++ compile on CPU costs seconds per graph."""
    from kcatalog.kernels.compiled import attention as compiled_attn

    t, hq, hk, hs, rot = 6, 4, 2, 32, 32
    g = gen("compiled")
    cache = cos_sin_cache(rot)
    positions = torch.randint(0, MAX_POS, (t,), generator=g)
    q, k = make_qk(g, t, hq, hk, hs, torch.float32, False)
    q_ref, k_ref = q.clone(), k.clone()
    ref.rotary_embedding(positions, q_ref, k_ref, hs, cache, True)
    assert compiled_attn.rotary_embedding(positions, q, k, hs, cache, True) is None
    check_close("compiled rope q", q, q_ref, 1e-5)
    check_close("compiled rope k", k, k_ref, 1e-5)
    assert compiled_attn.rotary_embedding.__name__ == "rotary_embedding"
