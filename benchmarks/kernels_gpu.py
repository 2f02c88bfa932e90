#!/usr/bin/env python3
"""Check, then time, every catalogued kernel (op x backend) on one GPU in one call.

Run from the repository root (the GPU machine's ``python3``: torch 2.11, triton 3.6)::

    PYTHONPATH=src python3 benchmarks/kernels_gpu.py            # full run, < 7 min on an H200
    PYTHONPATH=src python3 benchmarks/kernels_gpu.py --quick    # a few shapes per op
    PYTHONPATH=src python benchmarks/kernels_gpu.py --device cpu --quick   # CPU smoke: checks only,
                                                                # Triton under TRITON_INTERPRET=1

The ops, their backends, dtypes, tolerances and what they mutate come from ``kcatalog.load_catalog()``
(the public API; each backend imported by ``KernelSpec.load``); this file only knows how to drive each
op (the ``BENCHES`` table: inputs for a shape, the outputs to compare, the fewest bytes the op must
move). In order (benchmarks/BENCH_METHOD.md):

1. copy bandwidth: a large device-to-device copy, bytes read + written: the ceiling for every op;
2. correctness: each op x backend x declared dtype at small awkward shapes (odd and non-power-of-two
   widths, strided rows, GQA/partial/GPT-J rotary), fresh random inputs, against the op's reference
   backend run on inputs upcast to float32 (float64 for float32 inputs), by ‖out - ref‖/‖ref‖ against
   the manifest's per-dtype tolerance; returned outputs land in NaN-poisoned memory; in-place ops are
   checked on what they mutate, and everything else they were given (whole buffers behind views
   included) must stay bit-identical; fp8 quantization is checked as q·scale against the reference's
   (manifest tolerance) and against the input (within e4m3 rounding), and its scales to 1e-5;
3. prefill timings (bf16, then fp16 at the end): every shape is checked again first (that also warms
   up torch.compile), then timed with ``triton.testing.do_bench`` (median, L2 flushed per run);
4. decode timings (1-64 tokens, bf16): N calls on rotating input sets captured in one CUDA graph,
   replayed, time / N;
5. the Llama-3-8B model's shapes (``--phases llama``, run right after the checks): prefill by do_bench and
   again under CUDA-graph replay of rotating input sets larger than the L2 (kernel time without the host),
   decode as above; with ``--sweep full`` or ``--sweep ab``, tuning variants of the Triton backend
   (``TUNING.override``) are timed beside the shipped configuration; ``--sweep gaps`` runs only the cases
   still below Liger-Kernel (``GAPS``), each with its own candidate variants, by CUDA-graph replay.

Every timed phase also times Liger-Kernel's forward kernel for the op where it has one (``liger_contenders``:
its ops-level functions on the same inputs, checked against the same reference; a difference is reported and
the peer still timed). The order is check, llama, prefill (bf16), decode, prefill (fp16).

A time budget (``--budget-s``) keeps the whole run under the device's limit: when it runs short, the
cases still to come are skipped with that reason (torch.compile ones first), never silently.
Results: ``$OUT/kernels_gpu.json`` (every record) and ``$OUT/kernels_gpu.txt`` (tables and targets);
OUT defaults to ./out. Exit status 1 if any correctness check failed or a kernel would not load.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch  # importing torch does not import triton, so TRITON_INTERPRET can still be set in main()

REPO = Path(__file__).resolve().parent.parent
BACKEND_ORDER = ("triton", "torch_compile", "aten", "torch")
TIMED_DTYPES = (torch.bfloat16, torch.float16)
SCALE_TOL = 1e-5  # fp8 scales are one float32 division of the row's absmax: far tighter than q itself
FP8_ROUNDING_TOL = 1 / 16  # e4m3 keeps 3 mantissa bits: rounding moves a value by <= 1/16 of itself
MAX_POSITION = 32768  # rows of the rotary cos/sin cache
LARGE_BYTES = 256e6  # "large shape" for the bandwidth target
TARGET_FRAC = {"attention.rotary_embedding": 0.80}  # of copy bandwidth at large shapes; others: 0.90
DEFAULT_TARGET_FRAC = 0.90
DECODE_TARGET_US = 4.0
DEVICE_CHECK_NUMEL = 1 << 22  # larger outputs are compared on the GPU instead of in kcatalog.testing
# Llama-3-8B (the "llama" phases): hidden, intermediate, heads, head_dim; prefill and decode token counts
LLAMA_HIDDEN, LLAMA_INTERMEDIATE, LLAMA_Q_HEADS, LLAMA_KV_HEADS, LLAMA_HEAD_DIM = 4096, 14336, 32, 8, 128
LLAMA_PREFILL, LLAMA_DECODE = 4096, (1, 16, 64)
LAYER_NORM_WIDE = ((32768, 7168), (65536, 2880))

Params = dict[str, Any]
Args = dict[str, Any]
_T0 = time.perf_counter()  # the budget and the log count from here (after `import torch`)


def log(message: str) -> None:
    """Progress line with the elapsed time, flushed (the device returns only the output's tail)."""
    print(f"[{time.perf_counter() - _T0:6.1f}s] {message}", flush=True)


# --------------------------------------------------------------------------------------------------
# Inputs


@dataclass
class Rng:
    """Seeded random inputs on one device (never zeros)."""

    seed: int
    device: torch.device
    gen: torch.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.gen = torch.Generator(device=self.device).manual_seed(self.seed)

    def normal(self, *shape: int, dtype: torch.dtype, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        """shift + scale * N(0, 1) in `dtype`."""
        x = torch.randn(*shape, generator=self.gen, device=self.device, dtype=torch.float32)
        return (x * scale + shift).to(dtype)

    def rows(self, tokens: int, width: int, dtype: torch.dtype, pad: int = 0) -> torch.Tensor:
        """[tokens, width] N(0, 1); with pad > 0 a view of a wider buffer (row stride width + pad)."""
        return self.normal(tokens, width + pad, dtype=dtype)[:, :width]

    def integers(self, high: int, n: int) -> torch.Tensor:
        """n int64 values in [0, high)."""
        return torch.randint(0, high, (n,), generator=self.gen, device=self.device, dtype=torch.int64)


def _grid(**axes: Iterable[Any]) -> tuple[Params, ...]:
    """Every combination of the axes (first axis outermost) as parameter dicts."""
    keys = list(axes)
    return tuple(dict(zip(keys, values, strict=True)) for values in itertools.product(*axes.values()))


def _llama_rotary(tokens: Iterable[int]) -> tuple[Params, ...]:
    """Llama-3-8B's rotary cases at these token counts, with a float32 cache and one in the activations' dtype."""
    heads = {"Hq": (LLAMA_Q_HEADS,), "Hk": (LLAMA_KV_HEADS,), "hs": (LLAMA_HEAD_DIM,)}
    return _grid(T=tokens, **heads, layout=("2d",), cache=("f32", "act"))


def _shapes(keys: str, *rows: tuple[Any, ...]) -> tuple[Params, ...]:
    """Parameter dicts from a header ("T H pad") and value tuples; missing trailing values are dropped."""
    names = keys.split()
    return tuple(dict(zip(names, row, strict=False)) for row in rows)  # rows may stop early


# --------------------------------------------------------------------------------------------------
# How to drive each op: the table of op "cases"


@dataclass(frozen=True)
class OpBench:
    """What this script needs to know about one op beyond its catalog entry.

    Shapes are small parameter dicts read by `build`; ``prefill[0]`` is the headline shape (the one
    --quick times). `outputs` picks the compared tensors from a call's result and arguments (default:
    the returned tensor(s), or the arguments the manifest says are mutated); `expected` does the same
    for the reference's call on upcast inputs (default: `outputs`).
    """

    build: Callable[[Params, torch.dtype, Rng], Args]
    label: Callable[[Params], str]
    min_bytes: Callable[[Params, torch.dtype], int]
    check: tuple[Params, ...]
    cpu: tuple[Params, ...]
    prefill: tuple[Params, ...]
    decode: tuple[Params, ...]
    outputs: Callable[[Any, Args], dict[str, torch.Tensor]] | None = None
    expected: Callable[[Any, Args], dict[str, torch.Tensor]] | None = None
    ref_dtype: torch.dtype | None = None  # None: float64 for float32 inputs, else float32
    tol_override: dict[str, float] = field(default_factory=dict)
    # the Llama-3-8B model's shapes (hidden 4096, intermediate 14336, 32 q / 8 kv heads of 128; prefill of
    # 4,096 tokens, decode of 1, 16 and 64), timed in the "llama" phases beside Liger-Kernel
    llama_prefill: tuple[Params, ...] = ()
    llama_decode: tuple[Params, ...] = ()


def _rows_label(p: Params) -> str:
    return f"{p['T']}x{p['H']}" + (f" stride {p['H'] + p['pad']}" if p.get("pad") else "")


def _norm_bench(passes: int, weights: int, *, extra: Callable[[Params, torch.dtype, Rng], Args]) -> OpBench:
    """A row-wise op over x [T, H] (`extra` builds its other arguments).

    Fewest bytes: `passes` [T, H] tensors read or written (rms_norm: x in, y out = 2; fused add:
    x and residual, both in and out = 4) plus `weights` vectors of H read once.
    """

    def build(p: Params, dtype: torch.dtype, rng: Rng) -> Args:
        return {"x": rng.rows(p["T"], p["H"], dtype, p.get("pad", 0)), **extra(p, dtype, rng)}

    return OpBench(
        build=build,
        label=_rows_label,
        min_bytes=lambda p, dt: (passes * p["T"] + weights) * p["H"] * dt.itemsize,
        check=_shapes("T H pad", (1, 4096), (7, 1000), (33, 4099, 128), (128, 8192), (64, 5120, 3), (16, 20000)),
        cpu=_shapes("T H pad", (3, 33), (5, 1000, 7), (2, 4099)),
        prefill=_shapes("T H", (8192, 8192), (32768, 4096), (16384, 2048), (4096, 4096), (16384, 5120), (8192, 7168)),
        decode=_grid(H=(4096, 8192), T=(1, 8, 32, 64)),
        llama_prefill=_shapes("T H", (LLAMA_PREFILL, LLAMA_HIDDEN)),
        llama_decode=_grid(H=(LLAMA_HIDDEN,), T=LLAMA_DECODE),
    )


def _with_llama(bench: OpBench, prefill: tuple[Params, ...] = (), decode: tuple[Params, ...] = ()) -> OpBench:
    """`bench` with more Llama-phase shapes after its own."""
    return dataclasses.replace(
        bench, llama_prefill=bench.llama_prefill + prefill, llama_decode=bench.llama_decode + decode
    )


def _weight(p: Params, dtype: torch.dtype, rng: Rng) -> torch.Tensor:
    return rng.normal(p["H"], dtype=dtype, scale=0.1, shift=1.0)


def _act_bench(
    check: tuple[Params, ...] = (), cpu: tuple[Params, ...] = (), llama: dict[str, tuple[Any, ...]] | None = None
) -> OpBench:
    """A gated activation: x [T, 2I] read once, [T, I] written once; `check`/`cpu` add op-specific shapes,
    `llama` extra axes of its Llama-shape cases."""
    llama = llama or {}

    def build(p: Params, dtype: torch.dtype, rng: Rng) -> Args:
        args: Args = {"x": rng.rows(p["T"], 2 * p["I"], dtype, p.get("pad", 0))}
        return args | ({"approximate": p["approximate"]} if "approximate" in p else {})

    def label(p: Params) -> str:
        stride = f" stride {2 * p['I'] + p['pad']}" if p.get("pad") else ""
        return f"{p['T']}x2*{p['I']}{stride}" + (f" {p['approximate']}" if "approximate" in p else "")

    return OpBench(
        build=build,
        label=label,
        min_bytes=lambda p, dt: 3 * p["T"] * p["I"] * dt.itemsize,
        check=_shapes("T I pad", (1, 11008), (7, 1000), (33, 4099, 64), (16, 28672)) + check,
        cpu=_shapes("T I pad", (3, 33), (5, 1000, 6)) + cpu,
        prefill=_grid(T=(8192,), I=(28672, 11008, 14336, 18432)),
        decode=_grid(I=(14336,), T=(1, 8, 32, 64)),
        llama_prefill=_grid(T=(LLAMA_PREFILL,), I=(LLAMA_INTERMEDIATE,), **llama),
        llama_decode=_grid(T=LLAMA_DECODE, I=(LLAMA_INTERMEDIATE,), **llama),
    )


@functools.cache
def _cos_sin_cache(rot_dim: int, device: torch.device) -> torch.Tensor:
    """[MAX_POSITION, rot_dim] float32: cos | sin of Llama's angles (base 10000)."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim))
    angles = torch.outer(torch.arange(MAX_POSITION, dtype=torch.float64), inv_freq)
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(device=device, dtype=torch.float32)


def _build_rotary(p: Params, dtype: torch.dtype, rng: Rng) -> Args:
    """q/k as separate 2-D tensors, as 3-D [T, H, d] views, or as row views of one fused qkv buffer."""
    t, hs, layout = p["T"], p["hs"], p.get("layout", "qkv")
    q_width, k_width = p["Hq"] * hs, p["Hk"] * hs
    if layout == "qkv":
        qkv = rng.rows(t, q_width + 2 * k_width, dtype)
        query, key = qkv[:, :q_width], qkv[:, q_width : q_width + k_width]
    else:
        query, key = rng.rows(t, q_width, dtype), rng.rows(t, k_width, dtype)
        if layout == "3d":
            query, key = query.view(t, p["Hq"], hs), key.view(t, p["Hk"], hs)
    return {
        "positions": rng.integers(MAX_POSITION, t),
        "query": query,
        "key": key,
        "head_size": hs,
        # float32 (SGLang keeps it so on CUDA) or, cache "act", the activations' dtype (vLLM's; transformers' cos/sin)
        "cos_sin_cache": _cos_sin_cache(p.get("rot", hs), rng.device).to(dtype if p.get("cache") == "act" else None),
        "is_neox": p.get("neox", True),
    }


def _rotary_label(p: Params) -> str:
    rot = f" rot {p['rot']}" if p.get("rot", p["hs"]) != p["hs"] else ""
    style = "" if p.get("neox", True) else " gptj"
    cache = " act-cache" if p.get("cache") == "act" else ""
    return f"{p['T']}t q{p['Hq']} k{p['Hk']} d{p['hs']}{rot}{style} {p.get('layout', 'qkv')}{cache}"


def _rotary_bytes(p: Params, dtype: torch.dtype) -> int:
    """q and k read and written at rot_dim per head; one position and one cache row (float32, or the
    activations' dtype with cache "act") per token."""
    rot = p.get("rot", p["hs"])
    cache_item = dtype.itemsize if p.get("cache") == "act" else 4
    return p["T"] * (2 * (p["Hq"] + p["Hk"]) * rot * dtype.itemsize + 8 + rot * cache_item)


def _build_quant(p: Params, dtype: torch.dtype, rng: Rng) -> Args:
    """Rows of N(0, 1) times a per-row magnitude spread over ~e^±1, so the scales differ."""
    rows = rng.normal(p["T"], p["H"] + p.get("pad", 0), dtype=torch.float32)
    rows = rows * rng.normal(p["T"], 1, dtype=torch.float32, scale=0.5).exp()
    return {"x": rows.to(dtype)[:, : p["H"]]}


def _dequantized(result: Any, args: Args) -> dict[str, torch.Tensor]:
    """q * scale, against the reference's (manifest tolerance) and against the input; and the scales."""
    q, scale = result
    dequant = q.float() * scale
    return {"dequant": dequant, "dequant_vs_x": dequant, "scale": scale}


def _quant_expected(result: Any, args: Args) -> dict[str, torch.Tensor]:
    return _dequantized(result, args) | {"dequant_vs_x": args["x"].float()}


BENCHES: dict[str, OpBench] = {
    "layernorm.rms_norm": _with_llama(
        _norm_bench(2, 1, extra=lambda p, dt, rng: {"weight": _weight(p, dt, rng), "eps": 1e-6}),
        # Qwen3's per-head q_norm: rows of head_dim 128, 32 per token
        prefill=_shapes("T H", (LLAMA_PREFILL * LLAMA_Q_HEADS, LLAMA_HEAD_DIM)),
        decode=_grid(H=(LLAMA_HEAD_DIM,), T=tuple(t * LLAMA_Q_HEADS for t in LLAMA_DECODE)),
    ),
    "layernorm.fused_add_rms_norm": _norm_bench(
        4,
        1,
        extra=lambda p, dt, rng: {"residual": rng.rows(p["T"], p["H"], dt), "weight": _weight(p, dt, rng), "eps": 1e-6},
    ),
    "layernorm.layer_norm": _with_llama(
        _norm_bench(
            2,
            2,
            extra=lambda p, dt, rng: {
                "weight": _weight(p, dt, rng),
                "bias": rng.normal(p["H"], dtype=dt, scale=0.1),
                "eps": 1e-5,
            },
        ),
        prefill=_shapes("T H", *LAYER_NORM_WIDE),  # ragged wide rows (DeepSeek-V3's 7168, gpt-oss's 2880)
    ),
    "elementwise.softmax": dataclasses.replace(
        _norm_bench(2, 0, extra=lambda p, dt, rng: {}),
        check=_shapes("T H pad", (1, 4096), (7, 1000), (33, 4099, 128), (64, 8192), (4, 32000, 5), (2, 131072)),
    ),
    "activation.silu_and_mul": _act_bench(),
    "activation.gelu_and_mul": _act_bench(
        check=({"T": 5, "I": 2048, "approximate": "tanh"}, {"T": 3, "I": 4099, "pad": 1, "approximate": "tanh"}),
        cpu=({"T": 2, "I": 100, "approximate": "tanh"},),
        llama={"approximate": ("tanh",)},  # Gemma's gelu_pytorch_tanh (Liger's GeGLU is tanh only)
    ),
    "attention.rotary_embedding": OpBench(
        build=_build_rotary,
        label=_rotary_label,
        min_bytes=_rotary_bytes,
        check=(
            {"T": 1, "Hq": 32, "Hk": 8, "hs": 128},
            {"T": 33, "Hq": 32, "Hk": 8, "hs": 128, "layout": "2d"},
            {"T": 7, "Hq": 8, "Hk": 2, "hs": 64, "neox": False, "layout": "3d"},
            {"T": 17, "Hq": 16, "Hk": 4, "hs": 128, "rot": 64, "layout": "qkv"},
            {"T": 9, "Hq": 12, "Hk": 12, "hs": 80, "rot": 40, "neox": False, "layout": "2d"},
            {"T": 64, "Hq": 64, "Hk": 8, "hs": 128},
        ),
        cpu=(
            {"T": 3, "Hq": 4, "Hk": 2, "hs": 16},
            {"T": 5, "Hq": 2, "Hk": 1, "hs": 32, "rot": 16, "neox": False, "layout": "3d"},
            {"T": 2, "Hq": 3, "Hk": 3, "hs": 20, "rot": 12, "layout": "2d"},
        ),
        prefill=_grid(T=(16384, 4096), Hq=(32, 64), Hk=(8,), hs=(128,)),
        decode=_grid(T=(1, 8, 32, 64), Hq=(32,), Hk=(8,), hs=(128,)),
        # q and k as transformers' q_proj / k_proj give them: separate contiguous [T, H * 128] tensors
        # (the cache in float32, and in the model's dtype as kernelize's bf16 cos/sin: Liger's are bf16)
        llama_prefill=_llama_rotary((LLAMA_PREFILL,)),
        llama_decode=_llama_rotary(LLAMA_DECODE),
    ),
    "quantization.per_token_quant_fp8": OpBench(
        build=_build_quant,
        label=_rows_label,
        min_bytes=lambda p, dt: p["T"] * p["H"] * (dt.itemsize + 1) + p["T"] * 4,
        check=_shapes("T H pad", (1, 4096), (7, 1000), (33, 4099, 128), (128, 8192), (16, 28672, 3)),
        cpu=_shapes("T H pad", (3, 33), (5, 1000, 7), (2, 4099)),
        prefill=_shapes("T H", (16384, 8192), (8192, 7168), (8192, 28672)),
        decode=_grid(H=(4096, 8192), T=(1, 8, 32, 64)),
        outputs=_dequantized,
        expected=_quant_expected,
        ref_dtype=torch.float32,
        tol_override={"scale": SCALE_TOL, "dequant_vs_x": FP8_ROUNDING_TOL},
    ),
}


# --------------------------------------------------------------------------------------------------
# Peers outside the catalog (Liger-Kernel) and tuning variants of the Triton backend


@dataclass(frozen=True)
class Contender:
    """What run_case checks and times under one backend name: a catalog backend, another library's kernel for
    the op, or the Triton backend under overridden tunables.

    `applies` says whether it has an equivalent of a case (its parameters); `prepare` turns the case's
    arguments into its own (outside the timing); `outputs` picks what to compare from its result and the
    case's arguments (None: the case's own choice).
    """

    name: str
    load: Callable[[], Callable[..., Any]]
    prepare: Callable[[Args], Args] | None = None
    outputs: Callable[[Any, Args], dict[str, torch.Tensor]] | None = None
    applies: Callable[[Params], bool] = lambda params: True

    @property
    def is_peer(self) -> bool:
        return self.name == "liger"


def _liger_rotary_args(a: Args) -> Args:
    """Liger's rope_forward takes q [B, Hq, S, D] and k as views of [B, S, H, D] memory (transformers' layout
    after q_proj / k_proj) and cos/sin [1, S, rot] already gathered for the positions (transformers'
    LlamaRotaryEmbedding does that once per forward, for all layers): built here, in the case's cache dtype, so
    that both kernels read the same values. Its kernel computes in cos's dtype: float32 with a float32 cache, the
    activations' dtype with a cache in it (as transformers hands them)."""
    q, k, hs = a["query"], a["key"], a["head_size"]
    t = q.shape[0]
    cache = a["cos_sin_cache"]
    half = cache.shape[-1] // 2
    rows = cache.index_select(0, a["positions"])
    cos = torch.cat((rows[:, :half], rows[:, :half]), dim=-1)[None]
    sin = torch.cat((rows[:, half:], rows[:, half:]), dim=-1)[None]
    return {
        "q": q.view(1, t, -1, hs).transpose(1, 2),
        "k": k.view(1, t, -1, hs).transpose(1, 2),
        "cos": cos,
        "sin": sin,
    }


def _dense(p: Params) -> bool:
    """Whether the case's x is a plain contiguous tensor (Liger's wrappers view it as rows without strides)."""
    return not p.get("pad")


def liger_contenders() -> tuple[dict[str, Contender], str]:
    """Liger-Kernel's forward kernels for the catalog's ops, called through its ops-level forward functions
    (no autograd.Function around them), or the reason it is unavailable."""
    try:
        from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward
        from liger_kernel.ops.geglu import geglu_forward
        from liger_kernel.ops.layer_norm import layer_norm_forward
        from liger_kernel.ops.rms_norm import rms_norm_forward
        from liger_kernel.ops.rope import rope_forward
        from liger_kernel.ops.swiglu import swiglu_fused_gate_up_forward
    except Exception as exc:
        return {}, f"liger_kernel unavailable: {type(exc).__name__}: {exc}"

    def peer(
        load: Callable[..., Any], prepare: Callable[[Args], Args], outputs: Any = None, applies: Any = _dense
    ) -> Contender:
        return Contender("liger", lambda: load, prepare, outputs, applies)

    def gelu_args(a: Args) -> Args:
        d = a["x"].shape[-1] // 2
        return {"a": a["x"][..., :d].contiguous(), "b": a["x"][..., d:].contiguous()}

    def fused_out(result: Any, args: Args) -> dict[str, torch.Tensor]:
        return {"x": result[0], "residual": result[1]}

    peers = {
        # casting_mode "llama": what apply_liger_kernel_to_llama uses (rstd in float32, weight product in x's dtype)
        "layernorm.rms_norm": peer(
            lambda X, W, eps: rms_norm_forward(X, W, eps, 0.0, "llama", None)[0],
            lambda a: {"X": a["x"], "W": a["weight"], "eps": a["eps"]},
        ),
        "layernorm.fused_add_rms_norm": peer(
            lambda X, R, W, eps: fused_add_rms_norm_forward(X, R, W, eps, 0.0, "llama")[:2],
            lambda a: {"X": a["x"], "R": a["residual"], "W": a["weight"], "eps": a["eps"]},
            fused_out,
        ),
        "layernorm.layer_norm": peer(
            lambda X, W, B, eps: layer_norm_forward(X, W, B, eps)[0],
            lambda a: {"X": a["x"], "W": a["weight"], "B": a["bias"], "eps": a["eps"]},
        ),
        # the fused [T, 2I] gate|up layout, as the catalog's op takes it
        "activation.silu_and_mul": peer(lambda y: swiglu_fused_gate_up_forward(y)[1], lambda a: {"y": a["x"]}),
        # separate gate and up tensors (its only form): copied out of x outside the timing
        "activation.gelu_and_mul": peer(
            lambda a, b: geglu_forward(a, b)[2],
            gelu_args,
            applies=lambda p: _dense(p) and p.get("approximate") == "tanh",
        ),
        # in place on q and k, as the catalog's op; only where q and k are separate contiguous tensors, as in
        # transformers (elsewhere its .contiguous() would copy them and leave the op's arguments unrotated)
        "attention.rotary_embedding": peer(
            lambda q, k, cos, sin: rope_forward(q, k, cos, sin),
            _liger_rotary_args,
            applies=lambda p: p.get("layout") == "2d" and p.get("neox", True),
        ),
    }
    return peers, ""


_BIG = 1 << 30
#: Warps forced for the norm kernels, whatever the width: RowTiling.warp_steps for 16, 8, 4, 2 warps.
_WARPS = {16: (0, 0, 0, 0), 8: (_BIG, 0, 0, 0), 4: (_BIG, _BIG, 0, 0), 2: (_BIG, _BIG, _BIG, 0)}

#: --sweep: tunables overrides timed beside the shipped configuration in the llama phases, per op:
#: (name, "prefill" / "decode" / "" for both, overrides). "again" is the shipped one timed once more (the spread).
_NORM_SWEEP: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("w2", "decode", {"warp_steps": _WARPS[2]}),
    ("w4", "", {"warp_steps": _WARPS[4]}),
    ("w8", "", {"warp_steps": _WARPS[8]}),
    ("w16", "", {"warp_steps": _WARPS[16]}),
    ("late_w", "decode", {"late_weights_programs": 0}),
    ("early_w", "prefill", {"late_weights_programs": _BIG}),
    ("rows2", "prefill", {"row_tile": 8192, "programs_per_sm": 0}),
)
_ACT_SWEEP: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("vpt4", "", {"values_per_thread": 4}),
    ("vpt16", "", {"values_per_thread": 16}),
    ("vpt4_w16", "", {"values_per_thread": 4, "max_warps": 16}),
    ("min512", "decode", {"min_tile": 512}),
    ("min2048", "decode", {"min_tile": 2048}),
    ("min2048_vpt4", "decode", {"min_tile": 2048, "values_per_thread": 4}),
    ("pps1", "decode", {"programs_per_sm": 1}),
    ("pps4", "decode", {"programs_per_sm": 4}),
    ("tile8192", "prefill", {"tile": 8192}),
    ("tile2048", "prefill", {"tile": 2048}),
    ("ef", "", {"load_evict": "evict_first"}),
    ("cs", "", {"store_cache": ".cs"}),
    ("ef_cs", "", {"load_evict": "evict_first", "store_cache": ".cs"}),
)
SWEEPS: dict[str, tuple[str, tuple[tuple[str, str, dict[str, Any]], ...]]] = {
    "layernorm.rms_norm": (
        "kcatalog.kernels.triton.layernorm",
        (
            *_NORM_SWEEP,
            ("cg", "", {"wide_load_min_width": 0}),
            ("chunked", "prefill", {"rms_chunked_widths": (4096, 4096)}),
            ("chunk2048_w8", "prefill", {"rms_chunked_widths": (4096, 4096), "rms_chunk": 2048, "rms_chunk_warps": 8}),
            ("chunk1024_w4", "prefill", {"rms_chunked_widths": (4096, 4096), "rms_chunk": 1024, "rms_chunk_warps": 4}),
            ("pps0", "", {"programs_per_sm": 0}),
            ("pps1", "decode", {"programs_per_sm": 1}),
            ("pps8", "decode", {"programs_per_sm": 8}),
            ("tile8192", "", {"row_tile": 8192}),
        ),
    ),
    "layernorm.fused_add_rms_norm": ("kcatalog.kernels.triton.layernorm", _NORM_SWEEP),
    "layernorm.layer_norm": (
        "kcatalog.kernels.triton.layernorm",
        (
            *_NORM_SWEEP,
            ("cg", "", {"wide_load_min_width": 0}),
            ("no_cg", "prefill", {"wide_load_cache": ""}),
            ("no_persist", "prefill", {"ln_persistent_per_sm": 0}),
            ("persist", "prefill", {"ln_persistent_min_width": 0}),
            ("pw2", "prefill", {"ln_persistent_warps": 2, "ln_persistent_min_width": 0}),
            ("pw8", "prefill", {"ln_persistent_warps": 8, "ln_persistent_min_width": 0}),
            ("pw16", "prefill", {"ln_persistent_warps": 16, "ln_persistent_min_width": 0}),
            ("pps2", "prefill", {"ln_persistent_per_sm": 2, "ln_persistent_min_width": 0}),
            ("pps4", "prefill", {"ln_persistent_per_sm": 4, "ln_persistent_min_width": 0}),
        ),
    ),
    "activation.silu_and_mul": ("kcatalog.kernels.triton.activation", _ACT_SWEEP),
    "activation.gelu_and_mul": ("kcatalog.kernels.triton.activation", _ACT_SWEEP),
    "attention.rotary_embedding": (
        "kcatalog.kernels.triton.attention",
        (
            ("vpt4", "", {"values_per_thread": 4}),
            ("vpt8", "", {"values_per_thread": 8}),
            ("vpt32", "", {"values_per_thread": 32}),
            ("min256", "decode", {"min_tile": 256}),
            ("min1024", "decode", {"min_tile": 1024}),
            ("min2048", "decode", {"min_tile": 2048}),
            ("min1024_vpt4", "decode", {"min_tile": 1024, "values_per_thread": 4}),
            ("pps1", "decode", {"programs_per_sm": 1}),
            ("pps4", "decode", {"programs_per_sm": 4}),
            ("nosplit", "decode", {"programs_per_sm": 0}),
            ("nosplit_vpt4", "decode", {"programs_per_sm": 0, "values_per_thread": 4}),
            ("max4096", "prefill", {"max_tile": 4096}),
            ("max2048", "prefill", {"max_tile": 2048}),
        ),
    ),
}


_NO_EF = (("no_ef", "decode", {"small_load_evict": ""}),)
#: --sweep ab: the shipped tunables that the first sweep (H200, 2026-12-01) changed, timed as they were
#: before, beside them in the same run. (That run also had the norms' weights tied to their statistics at
#: decode, against "untied": 0-8% slower, so it was taken out again.)
SWEEPS_AB: dict[str, tuple[str, tuple[tuple[str, str, dict[str, Any]], ...]]] = {
    "activation.silu_and_mul": ("kcatalog.kernels.triton.activation", _NO_EF),
    "activation.gelu_and_mul": ("kcatalog.kernels.triton.activation", _NO_EF),
    "attention.rotary_embedding": (
        "kcatalog.kernels.triton.attention",
        (("old", "decode", {"min_tile": 512, "decode_values_per_thread": 16}),),
    ),
}


def _tuned(kernel: Callable[..., Any], module: Any, overrides: dict[str, Any]) -> Callable[..., Any]:
    """`kernel` called with `module.TUNING` overridden (read at launch, so also inside a CUDA-graph capture)."""

    def call(**kwargs: Any) -> Any:
        with module.TUNING.override(**overrides):
            return kernel(**kwargs)

    return call


def _variant(op: OpEntry, module_name: str, name: str, overrides: dict[str, Any]) -> Contender:
    """`op`'s Triton backend under `module_name`'s TUNING with `overrides`, named "triton:<name>"."""
    import importlib

    return Contender(
        f"triton:{name}", lambda: _tuned(op.kernel("triton"), importlib.import_module(module_name), overrides)
    )


def sweep_contenders(op: OpEntry, phase: str, sweeps: dict[str, Any]) -> list[Contender]:
    """The variants in `sweeps` (SWEEPS or SWEEPS_AB) of `op`'s Triton backend that apply to `phase` (a llama
    phase), then the shipped configuration again."""
    if op.op_id not in sweeps or "triton" not in op.specs:
        return []
    module_name, variants = sweeps[op.op_id]
    kind = "decode" if phase.endswith("decode") else "prefill"
    chosen = [_variant(op, module_name, name, ov) for name, when, ov in variants if when in ("", kind)]
    return [*chosen, _variant(op, module_name, "again", {})] if chosen else []


@dataclass(frozen=True)
class Gap:
    """--sweep gaps: one Llama-shape case where the shipped Triton kernel was below Liger-Kernel, with the
    candidate tunables (name, overrides of `module`'s TUNING) to time beside it under CUDA-graph replay."""

    op: str
    phase: str  # "llama-decode" or "llama-prefill-graph" (graph replay only)
    params: Params  # one of BENCHES[op]'s llama shapes for the phase
    module: str
    variants: tuple[tuple[str, dict[str, Any]], ...]


_LN, _ROPE = "kcatalog.kernels.triton.layernorm", "kcatalog.kernels.triton.attention"
_W1 = (_BIG, _BIG, _BIG, _BIG)  # one warp, whatever the width
#: The shapes below 1.0x Liger in benchmarks/results/kernels_h200_liger.md (H200, 2026-12-01), and the 0.99x
#: ones within the spread. With --sweep gaps only these cases run; "again" (the shipped one) closes each.
#: Adopted from the first gaps run (kernels_h200_gaps.md): layer_norm's centred epilogue at decode sizes; the
#: weights-before-x order (0.99-1.00 everywhere) was taken out.
GAPS: tuple[Gap, ...] = (
    # rotary at 4,096 tokens (0.96x with a float32 cache): one program per token with all its q and k heads (32 q
    # x 64 x 2 elements, 8 warps = 16 values per thread); Liger's is one program per token of 4 warps (= vpt32).
    # With a float32 cache (SGLang's on CUDA), and in the model's dtype (vLLM's cache; transformers' cos/sin, as
    # Liger is given them). Left to itself at 8 warps, ptxas keeps 32 registers and issues the loads in four
    # dependent waves (position; q and cos/sin; the rest of cos/sin; k); the shipped register limit of 48 lets it
    # issue them in two (offline SASS: benchmarks/load_waves.py). Decode launches have no limit.
    *(
        Gap(
            "attention.rotary_embedding",
            "llama-prefill-graph",
            {
                "T": LLAMA_PREFILL,
                "Hq": LLAMA_Q_HEADS,
                "Hk": LLAMA_KV_HEADS,
                "hs": LLAMA_HEAD_DIM,
                "layout": "2d",
                "cache": cache,
            },  # fmt: skip
            _ROPE,
            (
                ("no_register_limit", {"registers_per_value": 0}),  # ptxas's own choice: 32, four waves
                ("regs40", {"registers_per_value": 2.5}),
                ("regs64", {"registers_per_value": 4}),
                ("unmasked", {"unmasked_tiles": True}),
                ("vpt64_w2", {"values_per_thread": 64}),
            ),
        )
        for cache in ("f32", "act")
    ),
    # layer_norm at 16 and 64 tokens (0.94x, 0.96x): one row of 4096 per program, 8 warps, as Liger's
    *(
        Gap(
            "layernorm.layer_norm",
            "llama-decode",
            {"H": LLAMA_HIDDEN, "T": t},
            _LN,
            (("uncentered", {"ln_centered_programs": 0}),),
        )
        for t in (1, 16, 64)
    ),
    # Qwen3's q_norm at 1 token, 32 rows of 128 (0.96x): ours 32 programs of 1 warp, Liger's 32 of 4 warps
    Gap(
        "layernorm.rms_norm",
        "llama-decode",
        {"H": LLAMA_HEAD_DIM, "T": LLAMA_Q_HEADS},
        _LN,
        (
            ("w2", {"warp_steps": _WARPS[2]}),
            ("w4", {"warp_steps": _WARPS[4]}),
            ("rows2_w1", {"programs_per_sm": 0, "row_tile": 2 * LLAMA_HEAD_DIM}),
            ("rows4_w2", {"programs_per_sm": 0, "row_tile": 4 * LLAMA_HEAD_DIM}),
            ("rows4_w1", {"programs_per_sm": 0, "row_tile": 4 * LLAMA_HEAD_DIM, "warp_steps": _W1}),
            ("rows8_w4", {"programs_per_sm": 0, "row_tile": 8 * LLAMA_HEAD_DIM}),
            ("rows32_w8", {"programs_per_sm": 0, "row_tile": 32 * LLAMA_HEAD_DIM}),
        ),
    ),
    # within the spread (0.99x)
    Gap(
        "layernorm.rms_norm",
        "llama-decode",
        {"H": LLAMA_HIDDEN, "T": 64},
        _LN,
        (("w4", {"warp_steps": _WARPS[4]}), ("w16", {"warp_steps": _WARPS[16]})),
    ),
    Gap(
        "layernorm.fused_add_rms_norm",
        "llama-prefill-graph",
        {"T": LLAMA_PREFILL, "H": LLAMA_HIDDEN},
        _LN,
        (
            ("early_w", {"late_weights_programs": _BIG}),
            ("w4", {"warp_steps": _WARPS[4]}),
            ("w16", {"warp_steps": _WARPS[16]}),
        ),
    ),
)


def gap_for(op_id: str, phase: str, params: Params) -> Gap | None:
    """The GAPS entry of this case, if any."""
    return next((g for g in GAPS if g.op == op_id and g.phase == phase and g.params == params), None)


def gap_contenders(op: OpEntry, gap: Gap) -> list[Contender]:
    """The gap's variants of `op`'s Triton backend, then the shipped configuration again."""
    if "triton" not in op.specs:
        return []
    return [_variant(op, gap.module, name, ov) for name, ov in (*gap.variants, ("again", {}))]


# --------------------------------------------------------------------------------------------------
# The catalog, through kcatalog's public API (load_catalog, Catalog.info/get, KernelSpec.load)


@dataclass(frozen=True)
class OpEntry:
    """One op as the loaded catalog declares it (only the fields this script uses)."""

    op_id: str
    reference: str
    dtypes: tuple[str, ...]
    tolerance: dict[str, float]
    mutates: tuple[str, ...]
    specs: dict[str, Any]  # backend -> kcatalog.KernelSpec; its load() imports the target on first call
    backend_dtypes: dict[str, tuple[str, ...]]

    def kernel(self, backend: str) -> Callable[..., Any]:
        """The backend's implementation (KernelSpec.load: imported once, allow-lists checked)."""
        return self.specs[backend].load()  # type: ignore[no-any-return]


def read_catalog(catalog_dir: Path) -> tuple[dict[str, OpEntry], list[str]]:
    """Every op of the catalog in `catalog_dir`, loaded and checked by kcatalog.load_catalog, plus problems."""
    import kcatalog

    try:
        catalog = kcatalog.load_catalog(catalog_dir)
    except kcatalog.CatalogError as exc:
        return {}, [f"load_catalog({catalog_dir}) failed: {exc}"]
    ops: dict[str, OpEntry] = {}
    for op_id in catalog.ops():
        info = catalog.info(op_id)
        specs = {spec.backend: spec for spec in catalog.specs(op_id)}
        ops[op_id] = OpEntry(
            op_id=op_id,
            reference=info.reference,
            dtypes=tuple(info.dtypes),
            tolerance={str(k): float(v) for k, v in info.tolerance.items()},
            mutates=tuple(info.mutates),
            specs=specs,
            backend_dtypes={b: tuple(spec.dtypes) for b, spec in specs.items() if spec.dtypes},
        )
    return ops, [f"catalog warning: {w}" for w in getattr(catalog, "warnings", ())]


def import_kcatalog() -> str | None:
    """Make this checkout's `kcatalog` importable (src/ first on sys.path); the error, if it will not import."""
    src = REPO / "src"
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    try:
        import kcatalog  # noqa: F401
    except Exception as exc:  # e.g. pydantic not carried to the GPU machine, or the package mid-change
        return f"`import kcatalog` failed: {type(exc).__name__}: {exc}"
    return None


# --------------------------------------------------------------------------------------------------
# Checking


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


def _default_outputs(mutates: tuple[str, ...]) -> Callable[[Any, Args], dict[str, torch.Tensor]]:
    def outputs(result: Any, args: Args) -> dict[str, torch.Tensor]:
        if mutates:
            return {name: args[name] for name in mutates}
        tensors = _tensors(result)
        return {"out": tensors[0]} if len(tensors) == 1 else {f"out{i}": t for i, t in enumerate(tensors)}

    return outputs


def _upcast(args: Args, dtype: torch.dtype) -> Args:
    """Copies of the tensor arguments, floating ones in `dtype` (the reference mutates its own copies)."""
    return {
        k: v.to(dtype=dtype if v.is_floating_point() else v.dtype, copy=True) if isinstance(v, torch.Tensor) else v
        for k, v in args.items()
    }


def _base(t: torch.Tensor) -> torch.Tensor:
    return t._base if t._base is not None else t


def _snapshot(args: Args) -> dict[int, tuple[str, torch.Tensor, torch.Tensor]]:
    """name, live buffer and a copy of it, per distinct buffer behind the tensor arguments."""
    snaps: dict[int, tuple[str, torch.Tensor, torch.Tensor]] = {}
    for name, value in args.items():
        if isinstance(value, torch.Tensor):
            base = _base(value)
            snaps.setdefault(base.untyped_storage().data_ptr(), (name, base, base.clone()))
    return snaps


def _check_untouched(
    snaps: dict[int, tuple[str, torch.Tensor, torch.Tensor]], args: Args, mutates: tuple[str, ...]
) -> None:
    """Every buffer is bit-identical to its snapshot, except where a mutated argument views it."""
    for key, (name, live, saved) in snaps.items():
        for m in mutates:
            view = args[m]
            if _base(view).untyped_storage().data_ptr() == key:
                saved.as_strided(view.shape, view.stride(), view.storage_offset() - live.storage_offset()).copy_(view)
        if not torch.equal(saved, live):
            changed = int((saved != live).sum())
            raise AssertionError(f"{name}: {changed} elements changed outside what the op may write")


def _poison_allocator(specs: list[tuple[torch.Size, torch.dtype]], device: torch.device) -> None:
    """Fill, then free, blocks of these sizes, so the caching allocator hands the next call NaN memory."""
    from kcatalog.testing import poison_

    blocks = [poison_(torch.empty(shape, dtype=dtype, device=device)) for shape, dtype in specs]
    del blocks


def _check_close(name: str, out: torch.Tensor, ref: torch.Tensor, tol: float) -> float:
    """kcatalog.testing.check_close; for big GPU outputs the same arithmetic, kept on the GPU."""
    from kcatalog.testing import check_close

    if out.device.type == "cpu" or out.numel() <= DEVICE_CHECK_NUMEL:
        return check_close(name, out, ref, tol)
    out64, ref64 = out.to(torch.float64), ref.to(torch.float64)
    if tuple(out64.shape) != tuple(ref64.shape):
        raise ValueError(f"shape mismatch: got {tuple(out64.shape)}, expected {tuple(ref64.shape)}")
    nan = int(torch.isnan(out64).sum())
    if nan:
        raise AssertionError(f"{name}: {nan} of {out.numel()} elements are NaN (unwritten or invalid)")
    finite = bool(torch.isfinite(out64).all())
    err = float(torch.linalg.vector_norm(out64 - ref64) / torch.linalg.vector_norm(ref64)) if finite else math.inf
    if not err <= tol:
        max_abs = float((out64 - ref64).abs().max())
        raise AssertionError(f"{name}: relative error {err:.3e} > tolerance {tol:.1e} (max abs error {max_abs:.3e})")
    return err


@dataclass(frozen=True, eq=False)
class Case:
    """One op at one shape and dtype: everything that checks and times of it share the same inputs."""

    op: OpEntry
    bench: OpBench
    params: Params
    dtype: torch.dtype

    @property
    def label(self) -> str:
        return self.bench.label(self.params)

    @property
    def seed(self) -> int:
        return zlib.crc32(f"{self.op.op_id}|{self.label}|{self.dtype}".encode())

    def inputs(self, device: torch.device, variant: int = 0) -> Args:
        """Fresh random arguments; the same ones for every call with the same `variant`."""
        return self.bench.build(self.params, self.dtype, Rng(self.seed + variant, device))

    def outputs(self, result: Any, args: Args) -> dict[str, torch.Tensor]:
        return (self.bench.outputs or _default_outputs(self.op.mutates))(result, args)


def reference_outputs(case: Case, device: torch.device) -> dict[str, torch.Tensor]:
    """The op's reference backend on upcast copies of the case's inputs: the outputs to compare with."""
    ref_dtype = case.bench.ref_dtype or (torch.float64 if case.dtype == torch.float32 else torch.float32)
    args = _upcast(case.inputs(device), ref_dtype)
    result = case.op.kernel(case.op.reference)(**args)
    return case.bench.expected(result, args) if case.bench.expected else case.outputs(result, args)


def check_backend(
    case: Case,
    fn: Callable[..., Any],
    expected: dict[str, torch.Tensor],
    device: torch.device,
    who: Contender | None = None,
) -> tuple[dict[str, float], Args]:
    """Call `fn` on the case's inputs (through `who.prepare`, for a peer) and compare; return the errors and
    the arguments it was called with (for timing).

    Raises AssertionError listing every output that failed.
    """
    args = case.inputs(device)
    snaps = _snapshot(args)
    call_args = who.prepare(args) if who and who.prepare else args
    result = fn(**call_args)
    if not case.op.mutates and device.type == "cuda":
        # The wrappers allocate their outputs: call again into freed NaN-filled blocks of the same sizes.
        specs = [(t.shape, t.dtype) for t in _tensors(result)]
        del result  # free the first outputs' blocks, so that the NaN blocks take their place
        _poison_allocator(specs, device)
        result = fn(**call_args)
    got = who.outputs(result, args) if who and who.outputs else case.outputs(result, args)
    tol = case.op.tolerance.get(_dtype_name(case.dtype))
    errors: dict[str, float] = {}
    failures: list[str] = []
    for name, want in expected.items():
        try:
            limit = case.bench.tol_override.get(name, tol)
            if limit is None:
                raise AssertionError(f"{name}: the manifest declares no tolerance for {_dtype_name(case.dtype)}")
            errors[name] = _check_close(name, got[name], want, limit)
        except (AssertionError, ValueError, KeyError) as exc:
            failures.append(str(exc))
    try:
        _check_untouched(snaps, args, case.op.mutates)
    except AssertionError as exc:
        failures.append(str(exc))
    if failures:
        raise AssertionError("; ".join(failures))
    return errors, call_args


# --------------------------------------------------------------------------------------------------
# Timing


def time_prefill(fn: Callable[..., Any], args: Args, warmup_ms: int, rep_ms: int) -> float:
    """Median ms of fn(**args) by triton.testing.do_bench (CUDA events, L2 flushed before each run)."""
    import triton.testing

    return float(triton.testing.do_bench(lambda: fn(**args), warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def graph_timer(fn: Callable[..., Any], arg_sets: list[Args], replays: int = 50) -> Callable[[], float]:
    """len(arg_sets) calls (one per input set) captured once in a CUDA graph; the timer returns the median ms per
    call over `replays` replays (it can be called again: rounds interleaved with other contenders')."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up off the default stream, as capture wants
        for args in arg_sets:
            fn(**args)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args in arg_sets:
            fn(**args)
    graph.replay()
    torch.cuda.synchronize()

    def timer() -> float:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
        for start, end in events:
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in events) / len(arg_sets)

    return timer


def time_graph(fn: Callable[..., Any], arg_sets: list[Args], replays: int = 50) -> float:
    """Median ms per call of len(arg_sets) calls captured in one CUDA graph (one round of graph_timer)."""
    return graph_timer(fn, arg_sets, replays)()


def measure_copy_bandwidth(nbytes: int, device: torch.device, warmup_ms: int, rep_ms: int) -> dict[str, float]:
    """GB/s of a device-to-device copy of `nbytes`, counting bytes read plus bytes written."""
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = time_prefill(lambda: dst.copy_(src), {}, warmup_ms, rep_ms)
    return {"bytes": 2 * nbytes, "ms": ms, "gbps": 2 * nbytes / ms / 1e6}


# --------------------------------------------------------------------------------------------------
# The run


@dataclass
class Record:
    """One (phase, op, backend, shape, dtype): its check and, for timed phases, its time."""

    phase: str
    op: str
    backend: str
    shape: str
    dtype: str
    params: Params
    bytes: int = 0
    ok: bool | None = None  # None: not checked (skipped for time, or after a lost CUDA context)
    errors: dict[str, float] = field(default_factory=dict)
    ms: float | None = None  # the median of ms_rounds
    ms_rounds: list[float] = field(default_factory=list)  # one per round, the case's contenders interleaved
    warm_s: float | None = None  # first call (check) wall time: torch.compile's compile shows here
    note: str = ""
    gbps: float | None = None
    frac_copy: float | None = None
    x_eager: float | None = None
    x_compile: float | None = None
    x_liger: float | None = None


@dataclass
class Run:
    """Options, the catalog, the records so far and the time budget of one invocation."""

    args: argparse.Namespace
    device: torch.device
    ops: dict[str, OpEntry]
    records: list[Record] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    copy: dict[str, float] = field(default_factory=dict)
    deadline: float = 0.0
    cuda_broken: str = ""
    peers: dict[str, Contender] = field(default_factory=dict)  # op id -> Liger-Kernel's kernel for it

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def skip_reason(self, backend: str, budget: bool) -> str:
        """Why a case must not start now ("" if it may); `budget`: whether the time budget applies."""
        if self.cuda_broken:
            return f"not run: CUDA context lost earlier ({self.cuda_broken})"
        if not budget:
            return ""
        if backend == "torch_compile" and self.remaining() < self.args.compile_reserve_s:
            return f"skipped: time budget ({self.remaining():.0f}s left, torch.compile needs a fresh compile)"
        if self.remaining() < self.args.reserve_s:
            return f"skipped: time budget ({self.remaining():.0f}s left)"
        return ""


def _compile_at_decode(params: Params) -> bool:
    """torch.compile recompiles per shape (seconds each): under graphs, time it at 1 and 64 tokens of
    the first hidden size only."""
    return params["T"] in (1, 64) and params.get("H", 4096) == 4096


def _backends(run: Run, op: OpEntry, dtype: torch.dtype) -> list[str]:
    """The op's backends, in BACKEND_ORDER, that declare `dtype` and pass --backends."""
    wanted = set(run.args.backends.split(",")) if run.args.backends else None
    names = sorted(op.specs, key=lambda b: BACKEND_ORDER.index(b) if b in BACKEND_ORDER else len(BACKEND_ORDER))
    return [
        b
        for b in names
        if _dtype_name(dtype) in op.backend_dtypes.get(b, op.dtypes) and (wanted is None or b in wanted)
    ]


def _cuda_lost(run: Run, exc: BaseException) -> None:
    """After a failure on the GPU: if the context is gone (illegal address...), stop all GPU work."""
    if run.device.type != "cuda":
        return
    try:
        torch.cuda.synchronize()
    except Exception as sync_exc:  # a sticky CUDA error: nothing later can run
        run.cuda_broken = f"{type(exc).__name__}: {exc}".splitlines()[0][:200] or repr(sync_exc)


def _short(exc: BaseException) -> str:
    """The exception on one line, cut at 400 characters (torch's messages run to pages)."""
    text = " ".join(f"{type(exc).__name__}: {str(exc).split(chr(10) * 2)[0]}".split())
    return text if len(text) <= 400 else text[:400] + "..."


#: How each phase is timed: do_bench (L2 flushed) or CUDA-graph replays; the check phase is not timed.
TIMING = {
    "prefill": "bench",
    "llama-prefill": "bench",
    "llama-prefill-graph": "graph",  # the same shapes without the host: CUDA-graph replays of rotating inputs
    "decode": "graph",
    "llama-decode": "graph",
}


def _catalog_contender(op: OpEntry, backend: str) -> Contender:
    return Contender(backend, lambda: op.kernel(backend))


def run_case(run: Run, phase: str, case: Case, backends: list[str], extra: Iterable[Contender] = ()) -> None:
    """Check, then (a timed phase) time, each of `backends` and then `extra` (peers, variants) on one case."""
    meta = {"phase": phase, "op": case.op.op_id, "shape": case.label, "dtype": _dtype_name(case.dtype)}
    what = " ".join(meta.values())
    nbytes = case.bench.min_bytes(case.params, case.dtype)
    contenders = [_catalog_contender(case.op, b) for b in backends] + list(extra)
    if not contenders:
        return
    try:
        expected = reference_outputs(case, run.device)
    except Exception as exc:
        note = f"reference failed: {_short(exc)}"
        run.records += [
            Record(**meta, backend=c.name, params=case.params, bytes=nbytes, ok=False, note=note) for c in contenders
        ]
        log(f"FAIL {what}: {note}")
        _cuda_lost(run, exc)
        return
    timers: list[tuple[Record, Callable[[], float]]] = []
    for who in contenders:
        backend = who.name
        if not who.applies(case.params):
            continue  # a peer without an equivalent of this case (e.g. Liger's GeGLU at the erf gelu)
        rec = Record(**meta, backend=backend, params=case.params, bytes=nbytes)
        run.records.append(rec)
        rec.note = run.skip_reason(backend, budget=phase != "check")  # correctness is never cut for time
        if rec.note:
            continue
        try:
            fn = who.load()
            start = time.perf_counter()
            rec.errors, args = check_backend(case, fn, expected, run.device, who)
            rec.warm_s, rec.ok = time.perf_counter() - start, True
        except AssertionError as exc:
            rec.ok, rec.note = False, f"check failed: {_short(exc)}"
            log(f"FAIL {what} {backend}: {rec.note}")
            if not who.is_peer:
                continue
            args = who.prepare(case.inputs(run.device)) if who.prepare else case.inputs(run.device)
            # a peer computing differently (its own rounding) is still timed; the difference is reported
        except Exception as exc:  # an import error, a crash: both fail the check
            rec.ok, rec.note = False, f"check failed: {_short(exc)}"
            log(f"FAIL {what} {backend}: {rec.note}")
            _cuda_lost(run, exc)
            continue
        try:
            timing = TIMING.get(phase)
            if timing == "bench":
                timers.append((rec, functools.partial(time_prefill, fn, args, run.args.warmup_ms, run.args.rep_ms)))
            elif timing == "graph":
                n_sets = run.args.prefill_graph_calls if phase.endswith("prefill-graph") else run.args.graph_calls
                sets = [case.inputs(run.device, variant=i) for i in range(n_sets)]
                timers.append((rec, graph_timer(fn, [who.prepare(a) for a in sets] if who.prepare else sets)))
        except Exception as exc:
            rec.note = f"timing failed: {_short(exc)}"
            log(f"note {what} {backend}: {rec.note}")
            _cuda_lost(run, exc)
        del args
    _time_rounds(run, what, timers)
    for rec, _ in timers:  # (the check phase times nothing: its checks are summed up per op, in phase_check)
        _log_record(rec, run)


def _time_rounds(run: Run, what: str, timers: list[tuple[Record, Callable[[], float]]]) -> None:
    """Time the case's contenders round by round (A B C A B C ...: a drift of the GPU's clocks or memory spreads
    over all of them instead of favouring one), each record's time the median of its rounds."""
    for _ in range(run.args.rounds):
        for rec, timer in timers:
            if rec.note:
                continue
            try:
                rec.ms_rounds.append(timer())
            except Exception as exc:
                rec.note = f"timing failed: {_short(exc)}"
                log(f"note {what} {rec.backend}: {rec.note}")
                _cuda_lost(run, exc)
    for rec, _ in timers:
        rec.ms = statistics.median(rec.ms_rounds) if rec.ms_rounds and not rec.note else None


def _errors_text(errors: dict[str, float]) -> str:
    """'1.2e-03', or per output when there are several ('x 1.2e-03 residual 4.0e-04')."""
    if len(errors) == 1:
        return f"{next(iter(errors.values())):.1e}"
    return " ".join(f"{name} {err:.1e}" for name, err in errors.items())


def _log_record(rec: Record, run: Run) -> None:
    timing = (
        f" {rec.ms * 1e3:9.1f} us {rec.bytes / rec.ms / 1e6 / run.copy['gbps']:5.2f} of copy"
        if rec.ms and run.copy
        else ""
    )
    warm = f" (first call {rec.warm_s:.1f}s)" if rec.warm_s and rec.warm_s > 1.0 else ""
    log(
        f"ok   {rec.phase:7s} {rec.op:34s} {rec.backend:13s} {rec.shape:26s} {rec.dtype:8s}{timing}{warm}"
        f" err {_errors_text(rec.errors)}"
    )


def _selected(run: Run, shapes: tuple[Params, ...], phase: str) -> tuple[Params, ...]:
    if not run.args.quick or phase.startswith("llama"):
        return shapes
    if phase == "prefill":
        return shapes[:1]
    if phase == "decode":
        return tuple(s for s in shapes if s["T"] in (1, 64))[:2]
    return shapes[:2]


def phase_check(run: Run, op_ids: list[str]) -> None:
    """Correctness at small awkward shapes, every declared dtype.

    torch.compile recompiles for every shape and dtype, so it is checked here at one shape in float32
    only; its float16/bfloat16 checks come with the prefill timings (which warm it up anyway).
    """
    for op_id in op_ids:
        op, bench = run.ops[op_id], BENCHES[op_id]
        shapes = _selected(run, bench.cpu if run.device.type == "cpu" else bench.check, "check")
        first = len(run.records)
        for dtype_name in op.dtypes:
            dtype = getattr(torch, dtype_name)
            for i, params in enumerate(shapes):
                backends = [
                    b for b in _backends(run, op, dtype) if b != "torch_compile" or (i == 0 and dtype == torch.float32)
                ]
                run_case(run, "check", Case(op, bench, params, dtype), backends)
        done = run.records[first:]
        passed = sum(1 for r in done if r.ok)
        backends = sorted({r.backend for r in done})
        log(
            f"{'ok  ' if passed == len(done) else 'FAIL'} check {op_id}: {passed}/{len(done)} passed "
            f"({len(shapes)} shapes x {', '.join(op.dtypes)} x {', '.join(backends)})"
        )


def phase_timed(run: Run, op_ids: list[str], phase: str, dtypes: Iterable[torch.dtype]) -> None:
    """Check then time every backend, the op's peer (Liger) and, in the llama phases with --sweep, the Triton
    backend's tuning variants, at the phase's shapes."""
    shapes_field = phase.removesuffix("-graph").replace("-", "_")  # prefill, decode, llama_prefill, llama_decode
    wanted = set(run.args.backends.split(",")) if run.args.backends else None
    gaps = run.args.sweep == "gaps" and phase.startswith("llama")
    for dtype in dtypes:
        for op_id in op_ids:
            op, bench = run.ops[op_id], BENCHES[op_id]
            if _dtype_name(dtype) not in op.dtypes:
                continue
            for params in _selected(run, getattr(bench, shapes_field), phase):
                gap = gap_for(op_id, phase, params) if gaps else None
                if gaps and gap is None:
                    continue  # --sweep gaps: in the llama phases, only the cases still below Liger
                backends = _backends(run, op, dtype)
                if phase == "decode" and not _compile_at_decode(params):
                    backends = [b for b in backends if b != "torch_compile"]
                extra = [run.peers[op_id]] if op_id in run.peers and (wanted is None or "liger" in wanted) else []
                if gap is not None:
                    extra += gap_contenders(op, gap)
                elif run.args.sweep and phase.startswith("llama"):
                    extra += sweep_contenders(op, phase, SWEEPS_AB if run.args.sweep == "ab" else SWEEPS)
                run_case(run, phase, Case(op, bench, params, dtype), backends, extra)
                if run.device.type == "cuda" and not run.cuda_broken:
                    torch.cuda.empty_cache()  # prefill shapes move GBs: keep the pool from growing per shape


# --------------------------------------------------------------------------------------------------
# Reporting


def derive(run: Run) -> None:
    """Bandwidth, fraction of copy bandwidth and speedups over eager and torch.compile per timed record."""
    index = {(r.phase, r.op, r.shape, r.dtype, r.backend): r for r in run.records if r.ms}
    for r in run.records:
        if not r.ms:
            continue
        r.gbps = r.bytes / r.ms / 1e6
        r.frac_copy = r.gbps / run.copy["gbps"] if run.copy else None
        for attr, peer in (("x_eager", "torch"), ("x_compile", "torch_compile"), ("x_liger", "liger")):
            other = index.get((r.phase, r.op, r.shape, r.dtype, peer))
            setattr(r, attr, other.ms / r.ms if other else None)


_DT_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _fmt(value: float | None, spec: str, width: int) -> str:
    return f"{value:{width}{spec}}" if value is not None else " " * (width - 1) + "-"


def full_table(run: Run) -> list[str]:
    """One line per record."""
    lines = [
        f"{'phase':7s} {'op':34s} {'backend':13s} {'shape':26s} {'dtype':8s} {'MB':>8s} {'check':>5s} "
        f"{'us':>9s} {'GB/s':>7s} {'frac':>5s} {'x_eag':>6s} {'x_comp':>6s} {'x_lig':>6s}  errors or note"
    ]
    for r in run.records:
        check = {None: "-", True: "ok", False: "FAIL"}[r.ok]
        lines.append(
            f"{r.phase:7s} {r.op:34s} {r.backend:13s} {r.shape:26s} {r.dtype:8s} {r.bytes / 1e6:8.1f} {check:>9s} "
            f"{_fmt(r.ms and r.ms * 1e3, '.1f', 9)} {_fmt(r.gbps, '.0f', 7)} {_fmt(r.frac_copy, '.2f', 5)} "
            f"{_fmt(r.x_eager, '.2f', 6)} {_fmt(r.x_compile, '.2f', 6)} {_fmt(r.x_liger, '.2f', 6)}  "
            f"{r.note or _errors_text(r.errors)}"
        )
    return lines


def short_table(run: Run, phase: str) -> list[str]:
    """One line per timed (op, shape, dtype) of `phase`: each backend's us, and triton's fraction of
    copy bandwidth and speedups over eager and torch.compile."""
    rows = _by_case(run, phase)
    if not rows:
        return []
    lines = [
        f"-- {phase} (us; frac: of copy bandwidth; x: triton's speedup) --",
        f"{'op':19s} {'shape':23s} {'dt':4s} {'MB':>6s} {'triton':>7s} {'frac':>4s} {'compile':>7s} {'frac':>4s} "
        f"{'liger':>7s} {'frac':>4s} {'aten':>7s} {'eager':>7s} {'x_eag':>5s} {'x_cmp':>5s} {'x_lig':>5s}",
    ]
    for key, by_backend in rows.items():
        op, shape, dtype = key
        t, c, lg = by_backend.get("triton"), by_backend.get("torch_compile"), by_backend.get("liger")
        us = {b: r.ms * 1e3 if r.ms else None for b, r in by_backend.items()}
        lines.append(
            f"{op.split('.')[-1]:19s} {shape:23s} {_DT_SHORT.get(dtype, dtype):4s} "
            f"{next(iter(by_backend.values())).bytes / 1e6:6.1f} {_fmt(us.get('triton'), '.1f', 7)} "
            f"{_fmt(t and t.frac_copy, '.2f', 4)} {_fmt(us.get('torch_compile'), '.1f', 7)} "
            f"{_fmt(c and c.frac_copy, '.2f', 4)} {_fmt(us.get('liger'), '.1f', 7)} "
            f"{_fmt(lg and lg.frac_copy, '.2f', 4)} "
            f"{_fmt(us.get('aten'), '.1f', 7)} {_fmt(us.get('torch'), '.1f', 7)} {_fmt(t and t.x_eager, '.2f', 5)} "
            f"{_fmt(t and t.x_compile, '.2f', 5)} {_fmt(t and t.x_liger, '.2f', 5)}"
        )
    return lines


def _by_case(run: Run, phase: str) -> dict[tuple[str, str, str], dict[str, Record]]:
    """The phase's records per (op, shape, dtype), in table order (op, bf16 first, size), by backend."""
    rows: dict[tuple[str, str, str], dict[str, Record]] = {}
    for r in run.records:
        if r.phase == phase:
            rows.setdefault((r.op, r.shape, r.dtype), {})[r.backend] = r
    ops = list(BENCHES)
    order = sorted(rows, key=lambda k: (ops.index(k[0]), k[2] != "bfloat16", next(iter(rows[k].values())).bytes))
    return {k: rows[k] for k in order}


def sweep_table(run: Run, phase: str) -> list[str]:
    """--sweep: per case, the shipped Triton configuration, Liger (and its time as a ratio to the shipped one:
    the ratio a variant must reach to match it), and every variant's time as a ratio to the shipped one (below
    1: faster), fastest first."""
    rows = _by_case(run, phase)
    lines: list[str] = []
    for (op, shape, _), by_backend in rows.items():
        base = by_backend.get("triton")
        variants = sorted(
            ((b.removeprefix("triton:"), r.ms) for b, r in by_backend.items() if b.startswith("triton:") and r.ms),
            key=lambda v: v[1],
        )
        if not variants or not base or not base.ms:
            continue
        lig = by_backend.get("liger")
        head = f"{op.split('.')[-1]:19s} {shape:23s} triton {base.ms * 1e3:7.2f} us, liger " + (
            f"{lig.ms * 1e3:7.2f} ({lig.ms / base.ms:.3f})" if lig and lig.ms else "      -        "
        )
        lines.append(head + " | " + " ".join(f"{name} {ms / base.ms:.3f}" for name, ms in variants))
    return [f"-- {phase} sweep (variant time / shipped time) --", *lines] if lines else []


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _listed(records: list[Record], show: Callable[[Record], str], limit: int = 8) -> str:
    text = "; ".join(f"{r.op.split('.')[-1]} {r.shape} {r.dtype}: {show(r)}" for r in records[:limit])
    return text + (f"; ... {len(records) - limit} more" if len(records) > limit else "")


def summary(run: Run) -> tuple[list[str], dict[str, Any]]:
    """The targets (KERNEL_SPEC.md), correctness, skips and notes: as lines, and as data for the JSON."""
    triton = [r for r in run.records if r.backend == "triton" and r.ms]
    prefill = [r for r in triton if r.phase == "prefill"]
    large = [r for r in prefill if r.bytes >= LARGE_BYTES and r.frac_copy is not None]
    vs_compile = [r for r in prefill if r.x_compile]
    decode = [r for r in triton if r.phase == "decode"]
    # kernel-level: CUDA-graph replays (do_bench's llama-prefill also times the host at these 20-90 us sizes)
    llama = [r for r in triton if r.phase in ("llama-decode", "llama-prefill-graph")]
    targets = [  # what, the records it covers, those that miss it, how to show a miss
        (
            f"large shapes (>= {LARGE_BYTES / 1e6:.0f} MB) >= {DEFAULT_TARGET_FRAC:.2f} of copy BW (rotary >= 0.80)",
            large,
            [r for r in large if r.frac_copy < TARGET_FRAC.get(r.op, DEFAULT_TARGET_FRAC)],
            lambda r: f"{r.frac_copy:.2f}",
        ),
        (
            "triton >= 1.0x torch_compile at every prefill shape",
            vs_compile,
            [r for r in vs_compile if r.x_compile < 1.0],
            lambda r: f"{r.x_compile:.2f}x",
        ),
        (
            f"decode <= {DECODE_TARGET_US:.0f} us (triton, CUDA graph)",
            decode,
            [r for r in decode if r.ms * 1e3 > DECODE_TARGET_US],
            lambda r: f"{r.ms * 1e3:.1f} us",
        ),
        (
            "Llama-3-8B shapes (CUDA graphs): triton >= 1.0x liger",
            [r for r in llama if r.x_liger],
            [r for r in llama if r.x_liger and r.x_liger < 1.0],
            lambda r: f"{r.x_liger:.2f}x",
        ),
        (
            "Llama-3-8B shapes (CUDA graphs): triton >= 1.0x torch_compile",
            [r for r in llama if r.x_compile],
            [r for r in llama if r.x_compile and r.x_compile < 1.0],
            lambda r: f"{r.x_compile:.2f}x",
        ),
    ]
    geomean = _geomean([r.x_compile for r in vs_compile])
    vs_liger = {  # phase -> geomean of triton's speedup over Liger there
        phase: _geomean([r.x_liger for r in triton if r.phase == phase and r.x_liger])
        for phase in TIMING
        if any(r.phase == phase and r.x_liger for r in triton)
    }
    checked = [r for r in run.records if r.ok is not None and r.backend != "liger"]
    failed = [r for r in checked if not r.ok]
    peer_failed = [r for r in run.records if r.backend == "liger" and r.ok is False]
    not_run: dict[str, int] = {}  # reason -> count: budget skips, timing failures
    for r in run.records:
        if r.note and (r.ok is None or (r.ok and r.phase != "check" and not r.ms)):
            reason = f"{r.backend}: {r.note.split(' (')[0][:160]}"
            not_run[reason] = not_run.get(reason, 0) + 1

    lines = ["== targets =="]
    if run.copy:
        lines.append(f"copy bandwidth: {run.copy['gbps']:.0f} GB/s ({run.copy['bytes'] / 1e9:.2f} GB moved, median)")
    if run.device.type == "cuda":
        for what, covered, misses, show in targets:
            verdict = "PASS" if covered and not misses else "MISS"
            detail = f"; misses: {_listed(misses, show)}" if misses else ""
            lines.append(f"[{verdict}] {what}: {len(covered) - len(misses)}/{len(covered)}{detail}")
        verdict = "PASS" if geomean is not None and geomean >= 1.1 else "MISS"
        lines.append(f"[{verdict}] triton geomean vs torch_compile >= 1.1x: " + (f"{geomean:.2f}x" if geomean else "-"))
        for phase, g in vs_liger.items():
            lines.append(f"triton vs liger, geomean over {phase}: {g:.2f}x")
    lines.append(
        f"[{'MISS' if failed else 'PASS'}] correctness: {len(checked) - len(failed)}/{len(checked)} checks passed"
    )
    lines += [f"  FAIL {r.phase} {r.op} {r.backend} {r.shape} {r.dtype}: {r.note}" for r in failed[:20]]
    lines += [f"  ... {len(failed) - 20} more failures in the JSON"] if len(failed) > 20 else []
    lines += [f"  peer (liger) differs: {r.phase} {r.op} {r.shape} {r.dtype}: {r.note}" for r in peer_failed]
    lines += [f"  not run or untimed x{n}: {reason}" for reason, n in not_run.items()]
    lines += [f"note: {n}" for n in run.notes]
    data = {
        "copy_gbps": run.copy.get("gbps"),
        "targets": {what: {"n": len(covered), "misses": len(misses)} for what, covered, misses, _ in targets},
        "triton_vs_compile_geomean": geomean,
        "triton_vs_liger_geomean": vs_liger,
        "checks": {"n": len(checked), "failed": len(failed)},
        "not_run": not_run,
    }
    return lines, data


def environment(device: torch.device) -> dict[str, Any]:
    """Versions and the device, for the results file."""
    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "host": platform.node(),
        "argv": sys.argv[1:],
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception as exc:
        env["triton"] = f"unavailable: {exc}"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, sm_count=props.multi_processor_count, capability=f"{props.major}.{props.minor}")
        # what the Triton wrappers size their launches and persistent grids from (kcatalog.kernels.triton._rows)
        for name in ("regs_per_multiprocessor", "shared_memory_per_multiprocessor", "max_threads_per_multi_processor"):
            env[name] = getattr(props, name, None)
    # The device machine's copy of the tree has no current .git: there the caller says which commit it is.
    env["commit"] = os.environ.get("KCATALOG_COMMIT")
    if not env["commit"]:
        try:
            env["commit"] = subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
        except Exception:  # no git, or no .git
            env["commit"] = None
    return env


def write_results(run: Run, final: bool, env: dict[str, Any] | None = None) -> int:
    """Write the JSON (and, when final, the text tables); return the exit status."""
    derive(run)
    out = Path(run.args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines, data = summary(run)
    payload = {
        "environment": env or environment(run.device),
        "complete": final,
        "copy": run.copy,
        "notes": run.notes,
        "summary": data,
        "records": [dataclasses.asdict(r) for r in run.records],
    }
    (out / "kernels_gpu.json").write_text(json.dumps(payload, indent=1, default=str))
    if final:
        tables: list[str] = []
        sweeps: list[str] = []
        for phase in ("llama-decode", "llama-prefill", "llama-prefill-graph"):
            table = sweep_table(run, phase)
            sweeps += [*table, ""] if table else []
        # decode first: if the device keeps only the tail, prefill survives
        for phase in ("decode", "prefill", "llama-decode", "llama-prefill", "llama-prefill-graph"):
            table = short_table(run, phase)
            tables += [*table, ""] if table else []
        tables += lines
        (out / "kernels_gpu.txt").write_text("\n".join([*full_table(run), "", *sweeps, *tables]) + "\n")
        print("\n".join([*sweeps, *tables]), flush=True)
        print(f"results: {out / 'kernels_gpu.json'}, {out / 'kernels_gpu.txt'}", flush=True)
    return 1 if data["checks"]["failed"] else 0


# --------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cpu: checks only, Triton interpreted"
    )
    parser.add_argument("--quick", action="store_true", help="a few shapes per op (smoke test)")
    parser.add_argument(
        "--phases",
        default="check,prefill,decode,llama",
        help="comma-separated; run in this order: check, llama (Llama-3-8B shapes), prefill (bf16; fp16 last), decode",
    )
    parser.add_argument(
        "--sweep",
        choices=("", "full", "ab", "gaps"),
        default="",
        help="llama phases: also time the Triton backend's tuning variants (full: SWEEPS; ab: SWEEPS_AB; "
        "gaps: only the GAPS cases, each with its variants, by CUDA-graph replay)",
    )
    parser.add_argument(
        "--prefill-graph-calls", type=int, default=4, help="input sets per CUDA graph in llama-prefill-graph"
    )
    parser.add_argument("--render", default="", help="re-render this results JSON into --out (no GPU, nothing run)")
    parser.add_argument("--ops", default="", help="comma-separated op ids or names (default: all)")
    parser.add_argument("--backends", default="", help="comma-separated backends (default: all declared)")
    parser.add_argument("--catalog", type=Path, default=REPO / "catalog", help="manifests folder (default: catalog/)")
    parser.add_argument("--out", default=os.environ.get("OUT", "out"), help="results folder (default: $OUT or ./out)")
    parser.add_argument("--budget-s", type=float, default=370.0, help="start no timed case after this many seconds")
    parser.add_argument("--compile-reserve-s", type=float, default=45.0, help="no new torch.compile with less left")
    parser.add_argument("--reserve-s", type=float, default=10.0, help="no new case with less left")
    parser.add_argument("--warmup-ms", type=int, default=10, help="do_bench warm-up time per case")
    parser.add_argument("--rep-ms", type=int, default=40, help="do_bench timed time per case")
    parser.add_argument("--graph-calls", type=int, default=20, help="calls (input sets) per CUDA graph in decode")
    parser.add_argument(
        "--rounds", type=int, default=1, help="timings per contender, interleaved with the case's others; the median"
    )
    parser.add_argument("--copy-gb", type=float, default=2.0, help="size of the copy that measures bandwidth")
    return parser.parse_args(argv)


def _op_ids(run: Run, wanted: str, problems: list[str]) -> list[str]:
    """The benched op ids to run, in BENCHES order; missing catalog entries become notes."""
    names = {w.strip() for w in wanted.split(",") if w.strip()}
    chosen = [op for op in BENCHES if not names or op in names or op.split(".")[-1] in names]
    unknown = names - {n for op in BENCHES for n in (op, op.split(".")[-1])}
    if unknown:
        problems.append(f"--ops: no bench case for {', '.join(sorted(unknown))}; known: {', '.join(BENCHES)}")
    for op in [op for op in chosen if op not in run.ops]:
        problems.append(f"{op}: not in catalog/*.yaml (yet): not run")
        run.records.append(Record("check", op, "-", "-", "-", {}, ok=False, note="not in the catalog"))
    problems += [f"{op}: in the catalog but has no bench case here" for op in run.ops if op not in BENCHES]
    return [op for op in chosen if op in run.ops]


def render(args: argparse.Namespace) -> int:
    """--render: the tables and targets of a results JSON again, by this script's reporting code (no GPU)."""
    saved = json.loads(Path(args.render).read_text())
    fields = {f.name for f in dataclasses.fields(Record)}
    records = [Record(**{k: v for k, v in r.items() if k in fields}) for r in saved["records"]]
    run = Run(args=args, device=torch.device("cuda"), ops={}, records=records, notes=saved["notes"], copy=saved["copy"])
    return write_results(run, final=True, env=saved["environment"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        return render(args)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device (use --device cpu for the smoke mode)", file=sys.stderr)
        return 2
    failure = import_kcatalog()
    if failure:
        print(f"error: {failure}", file=sys.stderr)
        return 2
    ops, problems = read_catalog(args.catalog)
    run = Run(args=args, device=device, ops=ops, deadline=_T0 + args.budget_s)
    op_ids = _op_ids(run, args.ops, problems)
    run.notes += problems
    for p in problems:
        log(f"note: {p}")
    log(f"torch {torch.__version__} on {device}; ops: {', '.join(op_ids) or 'none'}")
    if not args.backends or "torch_compile" in args.backends.split(","):
        from kcatalog.kernels.compiled._lazy import allow_recompiles

        allow_recompiles(4096)
    phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if device.type == "cuda" and (not args.backends or "liger" in args.backends.split(",")):
        run.peers, why = liger_contenders()
        if why:
            run.notes.append(why)
            log(f"note: {why}")
    try:
        if device.type == "cuda":
            run.copy = measure_copy_bandwidth(int(args.copy_gb * 1e9), device, args.warmup_ms, args.rep_ms)
            copy = run.copy
            log(f"copy bandwidth {copy['gbps']:.0f} GB/s ({copy['bytes'] / 1e9:.1f} GB in {copy['ms']:.3f} ms)")
        if "check" in phases:
            log("== correctness ==")
            phase_check(run, op_ids)
            write_results(run, final=False)
        if device.type == "cuda":
            dtypes = TIMED_DTYPES[:1] if args.quick else TIMED_DTYPES
            if "llama" in phases:
                log("== Llama-3-8B shapes, bf16: prefill (do_bench, then CUDA graph), decode (CUDA graph) ==")
                for phase in ("llama-prefill", "llama-prefill-graph", "llama-decode"):
                    phase_timed(run, op_ids, phase, TIMED_DTYPES[:1])
                    write_results(run, final=False)
            if "prefill" in phases:
                log("== prefill (do_bench, median, L2 flushed) ==")
                phase_timed(run, op_ids, "prefill", dtypes[:1])
                write_results(run, final=False)
            if "decode" in phases:
                log(f"== decode (CUDA graph of {args.graph_calls} calls on rotating inputs) ==")
                phase_timed(run, op_ids, "decode", dtypes[:1])
                write_results(run, final=False)
            if "prefill" in phases and len(dtypes) > 1:
                log("== prefill, second dtype ==")
                phase_timed(run, op_ids, "prefill", dtypes[1:])
    except Exception:  # a bug of this script: keep what was measured
        run.notes.append("benchmark script error: " + traceback.format_exc(limit=3).replace("\n", " | "))
        log(run.notes[-1])
        write_results(run, final=True)
        return 2
    log("== done ==")
    return write_results(run, final=True)


if __name__ == "__main__":
    raise SystemExit(main())
