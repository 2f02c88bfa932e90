"""Shared by the Triton modules: the row prologue as small @triton.jit helpers, and the launch configuration.

* Rows: :func:`as_rows` views a tensor as ``[rows, width]``; the jit helpers below are what every row-wise
  kernel is composed of (row offsets, masked loads and stores, the per-row reductions).
* Launch configuration: how many programs a launch aims for comes from the device's own SM count
  (:func:`num_sms`, read from torch's device properties and cached per device), and how many programs of
  a compiled kernel fit on one SM from its registers and shared memory against the SM's (:func:`sm_limits`).
  Each module keeps its tunables in one frozen dataclass (a :class:`Spread` subclass) behind a
  :class:`Tunables`, read once per launch; ``with module.TUNING.override(field=value): ...`` changes them for
  the calls inside the block (tests, benchmarks, offline tuning), in this thread or task only.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

import torch
import triton
import triton.language as tl

# ---------------------------------------------------------------------------------------------- rows


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """A 2-D ``[rows, width]`` view of `t` with a unit-stride last dim; copies only if no such view exists."""
    view = rows_view(t)
    return t.contiguous().view(-1, t.shape[-1]) if view is None else view


def as_vector(w: torch.Tensor, n: int, name: str) -> torch.Tensor:
    """Check a per-column parameter (weight/bias) has `n` elements; make it unit-stride."""
    if w.dim() == 1 and w.shape[0] == n and w.stride(0) == 1:  # the usual case: no new tensor
        return w
    if w.numel() != n:
        raise ValueError(f"{name} has {w.numel()} elements, expected {n} (the last dim of x)")
    w = w.reshape(n)
    return w if w.stride(0) == 1 else w.contiguous()


def rows_view(t: torch.Tensor) -> torch.Tensor | None:
    """as_rows(t) where it is a view of t's own memory (an in-place kernel writes through it), else None."""
    if t.stride(-1) != 1:
        return None
    if t.dim() == 2:
        return t
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return None


@triton.jit
def row_offsets(tile, n_rows, stride, BLOCK_M: tl.constexpr):
    """Element offsets ``[BLOCK_M, 1]`` of the rows of `tile` and which of them exist (``[BLOCK_M]``).

    Rows past the end are clamped to the last row, so loads need no row mask (tail programs re-read the last
    row); only stores are masked, with the validity returned here.
    """
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    return rows[:, None] * stride, row_ok


@triton.jit
def row_ptrs(ptr, tile, n_rows, stride, BLOCK_M: tl.constexpr):
    """:func:`row_offsets` as pointers ``[BLOCK_M, 1]`` into `ptr`, with the rows' validity."""
    offs, row_ok = row_offsets(tile, n_rows, stride, BLOCK_M)
    return ptr + offs, row_ok


@triton.jit
def chunk_cols(start, n_cols, BLOCK_N: tl.constexpr):
    """Columns ``start .. start + BLOCK_N`` and which of them exist (``< n_cols``)."""
    cols = start + tl.arange(0, BLOCK_N)
    return cols, cols < n_cols


@triton.jit
def load_row(ptrs, col_ok, EVEN: tl.constexpr, CACHE: tl.constexpr):
    """Load a [BLOCK_M, BLOCK_N] tile (or a [BLOCK_N] vector), masked on columns unless the width is exact."""
    if EVEN:
        return tl.load(ptrs, cache_modifier=CACHE)
    else:
        return tl.load(ptrs, mask=col_ok, other=0.0, cache_modifier=CACHE)


@triton.jit
def load_chunk(rows, cols, col_ok, OTHER: tl.constexpr, EVICT: tl.constexpr):
    """Columns `cols` of the row pointers `rows` ([BLOCK_M, 1]) as a float32 tile; missing columns read OTHER."""
    return tl.load(rows + cols[None, :], mask=col_ok[None, :], other=OTHER, eviction_policy=EVICT).to(tl.float32)


@triton.jit
def prefetch_tile(x_ptr, tile, n_rows, stride, cols, col_ok, BLOCK_M: tl.constexpr, CACHE: tl.constexpr):
    """Load the rows of tile `tile` that exist (a loop's next tile); no memory traffic past the last row."""
    offs, row_ok = row_offsets(tile, n_rows, stride, BLOCK_M)
    ok = row_ok[:, None] & col_ok[None, :]
    return tl.load(x_ptr + offs + cols[None, :], mask=ok, other=0.0, cache_modifier=CACHE)


@triton.jit
def load_vec(ptrs, col_ok, EVEN: tl.constexpr):
    """Load a per-column parameter as float32, kept in L2 (every program reads it)."""
    if EVEN:
        return tl.load(ptrs, eviction_policy="evict_last").to(tl.float32)
    else:
        return tl.load(ptrs, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)


@triton.jit
def early_vec(ptrs, col_ok, EVEN: tl.constexpr, LATE: tl.constexpr):
    """load_vec now, or (LATE) nothing: the caller's row helper loads it after the row's reduction instead.

    Many programs (prefill): loading a weight late keeps it out of registers while the row is reduced. Few
    programs (decode): loading it up front takes its latency off the critical path.
    """
    if LATE:
        return 0.0
    else:
        return load_vec(ptrs, col_ok, EVEN)


@triton.jit
def late_vec(early, ptrs, col_ok, EVEN: tl.constexpr, LATE: tl.constexpr):
    """The parameter `early_vec` returned, or (LATE) loaded now."""
    if LATE:
        return load_vec(ptrs, col_ok, EVEN)
    else:
        return early


@triton.jit
def store_rows(ptrs, value, row_ok, col_ok, BLOCK_M: tl.constexpr, EVEN: tl.constexpr, CACHE: tl.constexpr):
    """Store a tile; no mask at all when it is one whole row of exact width (the row index is never clamped)."""
    if EVEN and BLOCK_M == 1:
        tl.store(ptrs, value, cache_modifier=CACHE)
    else:
        tl.store(ptrs, value, mask=row_ok[:, None] & col_ok[None, :], cache_modifier=CACHE)


@triton.jit
def store_chunk(rows, cols, value, row_ok, col_ok):
    """Store a tile at columns `cols` of the row pointers `rows` ([BLOCK_M, 1]), masked to what exists."""
    tl.store(rows + cols[None, :], value, mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def f32_again(x):
    """16-bit floats to float32 again, by a different instruction path than ``.to(tl.float32)``.

    The single-pass kernels convert the row once for its statistics and once more for the output, so that
    only the packed 16-bit row stays live across the reduction (two values per register) instead of its
    float32 copy: on an H200 this took layer_norm at 8192 wide from ~94 to 32 registers per thread (4
    programs per SM instead of 1) and from 0.67 to 0.89 of copy bandwidth. A plain second ``.to`` would be
    merged with the first. bf16 -> f32 is a 16-bit shift; fp16/fp32 keep the ordinary conversion.
    """
    if x.dtype == tl.bfloat16:
        return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        return x.to(tl.float32)


@triton.jit
def inv_rms(sum_sq, n_cols, eps):
    """``rsqrt(mean(x^2) + eps)`` per row from the rows' sums of squares."""
    return tl.rsqrt(sum_sq / n_cols + eps)


@triton.jit
def row_sum_sq(xr):
    """Sum of squares of each row of a tile, in float32."""
    x = xr.to(tl.float32)
    return tl.sum(x * x, axis=1)


@triton.jit
def mean_rstd(xr, col_ok, n_cols, eps, EVEN: tl.constexpr):
    """Mean, ``rsqrt(var + eps)`` and the centred tile ``x - mean`` of each row of a [BLOCK_M, BLOCK_N] tile:
    exact two-pass variance in registers, float32; padding columns (unless EVEN) are excluded (zero in the
    centred tile). A caller that does not use the centred tile leaves it to dead-code elimination."""
    x = xr.to(tl.float32)
    mean = tl.sum(x, axis=1) / n_cols
    xc = x - mean[:, None]
    if not EVEN:
        xc = tl.where(col_ok[None, :], xc, 0.0)
    return mean, tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps), xc


# ------------------------------------------------------------------ host-side arithmetic, the device


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for ``b > 0``, as ``triton.cdiv``, in plain integer arithmetic: triton's is a
    ConstexprFunction that costs ~2 us per host call, and launch code calls it on every launch."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= `n` (0 for 0), as ``triton.next_power_of_2``, in plain integer arithmetic."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


class SmLimits(NamedTuple):
    """What one SM (a CU on ROCm) holds at once; see :func:`sm_limits`."""

    sms: int
    regs: int
    threads: int
    shared: int
    warp_size: int
    reg_unit: int  # registers are allocated per warp in multiples of this
    shared_reserved: int  # shared memory the runtime keeps per block


#: Assumed where torch's device properties lack a field (older torch): the smallest figures of any CUDA GPU
#: since Volta (Turing: 64 Ki registers, 1024 threads and 64 KiB of shared memory per SM), so that no more
#: programs are taken to be resident than actually fit.
_FALLBACK_REGS, _FALLBACK_THREADS, _FALLBACK_SHARED = 65536, 1024, 64 * 1024
#: Resident blocks per SM are also capped by the architecture (16 on Turing and Ampere consumer parts, 32 on
#: A100/H100); torch does not report it, so the lower figure is assumed.
_MAX_BLOCKS_PER_SM = 16


@functools.lru_cache(maxsize=64)
def _sm_limits(index: int) -> SmLimits:
    props = torch.cuda.get_device_properties(index)
    warp = int(getattr(props, "warp_size", 32) or 32)
    hip = torch.version.hip is not None
    return SmLimits(
        sms=int(props.multi_processor_count),
        regs=int(getattr(props, "regs_per_multiprocessor", 0) or _FALLBACK_REGS),
        threads=int(getattr(props, "max_threads_per_multi_processor", 0) or _FALLBACK_THREADS),
        shared=int(getattr(props, "shared_memory_per_multiprocessor", 0) or _FALLBACK_SHARED),
        warp_size=warp,
        # NVIDIA allocates registers to a warp 256 at a time and reserves 1 KiB of shared memory per block
        # (sm_80 on); CDNA allocates vector registers 8 per lane at a time and reserves no LDS.
        reg_unit=8 * warp if hip else 256,
        shared_reserved=0 if hip else 1024,
    )


def sm_limits(device: torch.device) -> SmLimits:
    """The SM count and per-SM limits of a CUDA (or ROCm) device, from torch's device properties; cached."""
    return _sm_limits(device.index if device.index is not None else torch.cuda.current_device())


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors (CUs on ROCm) of `device`; 1 off the GPU, where the Triton interpreter runs
    one program at a time (so spreading a launch over more programs only costs time)."""
    return sm_limits(device).sms if device.type == "cuda" else 1


def resident_per_sm(n_regs: int, shared: int, num_warps: int, limits: SmLimits) -> int:
    """Blocks of a compiled kernel (`n_regs` per thread, `shared` bytes) that fit on one SM at once (>= 1)."""
    warp_regs = -(-max(n_regs, 1) * limits.warp_size // limits.reg_unit) * limits.reg_unit
    by_regs = limits.regs // warp_regs // num_warps
    by_threads = limits.threads // (limits.warp_size * num_warps)
    by_shared = limits.shared // (shared + limits.shared_reserved) if shared + limits.shared_reserved else by_threads
    return max(1, min(by_regs, by_threads, by_shared, _MAX_BLOCKS_PER_SM))


def compiled_resources(compiled: object) -> tuple[int, int] | None:
    """(registers per thread, shared bytes) of a launched CompiledKernel; None where Triton does not say."""
    try:
        return int(compiled.n_regs), int(compiled.metadata.shared)  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return None


def persistent_programs(n_tiles: int, num_sms: int, per_sm: int, min_tiles_per_sm: int) -> int:
    """Programs for a persistent launch over `n_tiles` tiles, or 0 to launch one program per tile.

    At most ``num_sms * per_sm`` programs, chosen so that every program gets the same number of tiles
    (within one): ``cdiv(n_tiles, cdiv(n_tiles, max_programs))``.
    """
    if per_sm <= 0 or n_tiles < num_sms * max(min_tiles_per_sm, 1):
        return 0
    per_program = cdiv(n_tiles, num_sms * per_sm)
    return cdiv(n_tiles, per_program)


# ---------------------------------------------------------------------------------------- tunables


@dataclass(frozen=True)
class Spread:
    """How widely a launch spreads small problems: at least `programs_per_sm` programs on each SM.

    ``programs_per_sm = 0`` never shrinks a tile to make more programs; `sms` stands in for the device's
    own SM count (None: use the device's), to model another GPU.
    """

    programs_per_sm: int = 2
    sms: int | None = None

    def device_sms(self, device: torch.device) -> int:
        """`sms`, or the SM count of `device`."""
        return self.sms if self.sms is not None else num_sms(device)


S = TypeVar("S", bound=Spread)


class Tunables(Generic[S]):
    """One module's tunables: a frozen dataclass read once per launch, replaced inside ``with override(...)``."""

    def __init__(self, name: str, default: S) -> None:
        self.default = default
        self._current: ContextVar[S] = ContextVar(name, default=default)

    def get(self) -> S:
        """The tunables in effect here."""
        return self._current.get()

    @contextmanager
    def override(self, **changes: Any) -> Iterator[S]:
        """Within the block (this thread or task only), the current tunables with `changes` applied."""
        token = self._current.set(dataclasses.replace(self._current.get(), **changes))
        try:
            yield self._current.get()
        finally:
            self._current.reset(token)


class RowConfig(NamedTuple):
    """A row-wise launch: rows and columns per program, warps, and whether whole rows fit (else: a loop)."""

    block_m: int
    block_n: int
    num_warps: int
    single_pass: bool


def num_warps(values: int, steps: tuple[int, int, int, int]) -> int:
    """16, 8, 4, 2 or 1 warps for a tile of `values`: the first of `steps` that `values` reaches."""
    for warps, step in zip((16, 8, 4, 2), steps):
        if values >= step:
            return warps
    return 1


@dataclass(frozen=True)
class RowTiling(Spread):
    """Tiles of a row-wise kernel over ``[rows, width]``: whole rows in registers up to `max_fused_width`, several
    short rows per program (`row_tile` elements, at most `max_rows_per_program` rows), a chunked loop beyond.

    `warp_steps` are the tile sizes (values) from which 16, 8, 4 and 2 warps are used (1 below); they count
    the row's real width, or its padded power-of-two block with `warps_of_block`.
    """

    max_fused_width: int = 16384
    loop_block: int = 4096
    loop_stages: int = 3
    row_tile: int = 4096
    max_rows_per_program: int = 64
    warp_steps: tuple[int, int, int, int] = (8192, 2048, 512, 256)
    warps_of_block: bool = True
    # Choices made so far; not a tunable (each replaced instance starts empty). Bounded below.
    _configs: dict[tuple[int, int, int], RowConfig] = field(default_factory=dict, init=False, repr=False, compare=False)

    def config(self, n_cols: int, n_rows: int, sms: int) -> RowConfig:
        """The tile for a ``[n_rows, n_cols]`` launch on a GPU of `sms` SMs (memoised: called on every launch).

        * ``n_cols <= max_fused_width``: one pass, ``BLOCK_N = next_power_of_2(n_cols)``; rows per program
          ``BLOCK_M = row_tile // BLOCK_N`` (1 .. ``max_rows_per_program``), halved while that would launch
          fewer than ``programs_per_sm * sms`` programs, so that decode-sized batches spread over the SMs.
        * wider rows: ``BLOCK_M = 1``, ``BLOCK_N = loop_block``, looping over the row.
        """
        min_programs = self.programs_per_sm * sms
        # beyond this many rows the row count no longer changes the choice: one entry serves them all
        key = (n_cols, min(n_rows, self.max_rows_per_program * min_programs), min_programs)
        if any(type(size) is not int for size in key):  # symbolic sizes, while torch.compile traces: no hash
            return self._choose(*key)
        found = self._configs.get(key)
        if found is None:
            if len(self._configs) >= 4096:
                self._configs.clear()
            found = self._configs[key] = self._choose(*key)
        return found

    def _choose(self, n_cols: int, n_rows: int, min_programs: int) -> RowConfig:
        block_n = next_power_of_2(max(n_cols, 1))
        if block_n > self.max_fused_width:
            block_n = min(self.loop_block, block_n)
            return RowConfig(1, block_n, num_warps(block_n, self.warp_steps), False)
        block_m = max(1, min(self.row_tile // block_n, self.max_rows_per_program))
        while block_m > 1 and cdiv(n_rows, block_m) < min_programs:
            block_m //= 2
        values = block_m * (block_n if self.warps_of_block else n_cols)
        return RowConfig(block_m, block_n, num_warps(values, self.warp_steps), True)
