"""What the rotary kernel compiles to for an H200 (sm_90), without a GPU: registers, SASS instructions, and in how
many dependent waves its global loads are issued.

A load is in wave n + 1 when it is issued after an instruction that reads (or overwrites) a register that a wave-n
load wrote: the warp waits there for that load's data, so the next load starts a memory latency later. A rotary
program reads its token's position, then q, k and that position's cos/sin row: two waves at best (the position,
then everything else). Each wave costs a DRAM latency per program, and at 4,096 tokens the latencies of the
programs an SM holds are what limits the kernel (benchmarks/results/kernels_h200_gaps.md).

Usage: ``python benchmarks/load_waves.py [--out DIR]`` with the installed Triton (its wheel ships ptxas and
cuobjdump); Liger-Kernel's kernel is compiled beside ours when liger_kernel is importable.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

#: The Llama-3-8B prefill case of kernels_gpu.py: 4,096 tokens, 32 q and 8 k heads of 128, bf16, on 132 SMs.
TOKENS, Q_HEADS, K_HEADS, HALF, SMS = 4096, 32, 8, 64, 132


@dataclass(frozen=True)
class Compiled:
    kernel: str
    num_warps: int
    max_registers: int  # the launch's limit (0: none)
    registers: int
    instructions: int
    load_waves: int
    loads_per_wave: list[int]


_LINE = re.compile(r"\s*/\*[0-9a-f]{4}\*/\s+(.*?)\s*;")
_REG = re.compile(r"\bR(\d+)\b(\.64)?")


def _registers(text: str) -> set[int]:
    found: set[int] = set()
    for m in _REG.finditer(text):
        found |= {int(m.group(1)), int(m.group(1)) + 1} if m.group(2) else {int(m.group(1))}
    return found


def load_waves(sass: str) -> list[int]:
    """Loads per dependent wave (see the module docstring), from cuobjdump -sass text."""
    wave, pending, counts = 0, {}, [0]
    for m in _LINE.finditer(sass):
        ins = re.sub(r"^@!?P\d\s+", "", m.group(1))
        op, _, operands = ins.partition(" ")
        first, _, rest = operands.partition(",")
        store = op.startswith("STG")
        written = set() if store else _registers(first)
        read = _registers(operands) if store else _registers(rest)
        touched = (written | read) & pending.keys()
        if touched:
            wave = max(wave, max(pending[r] for r in touched) + 1)
            pending = {r: w for r, w in pending.items() if w >= wave}
        if op.startswith("LDG"):
            width = {"LDG.E.128": 4, "LDG.E.64": 2}.get(op, 1)
            pending.update({r: wave for r in range(min(written), min(written) + width)})
            counts += [0] * (wave + 1 - len(counts))
            counts[wave] += 1
    return counts


def compile_sm90(
    fn: Any, signature: dict[str, str], constants: dict[str, Any], options: dict[str, int], odd: tuple[str, ...] = ()
) -> Any:
    """`fn` compiled for sm_90 as a launch would: every pointer and integer but those in `odd` divisible by 16."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    aligned = [i for i, (name, kind) in enumerate(signature.items()) if kind != "constexpr" and name not in odd]
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    return triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget("cuda", 90, 32), options=options)


def describe(name: str, compiled: Any, num_warps: int, max_registers: int, workdir: Path) -> Compiled:
    import triton

    cubin = workdir / f"{len(list(workdir.iterdir()))}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    sass = subprocess.run([str(tools / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True).stdout
    usage = subprocess.run([str(tools / "cuobjdump"), "-res-usage", str(cubin)], capture_output=True, text=True)
    registers = int(re.search(r"REG:(\d+)", usage.stdout).group(1))  # type: ignore[union-attr]
    waves = load_waves(sass)
    return Compiled(name, num_warps, max_registers, registers, len(_LINE.findall(sass)), len(waves), waves)


def ours(cache: str, max_registers: int | None, workdir: Path) -> Compiled:
    from kcatalog.kernels.triton import attention

    config = attention.TUNING.default.config(TOKENS, Q_HEADS, K_HEADS, HALF, SMS)
    regs = config.max_registers if max_registers is None else max_registers
    ints = ["n_q_heads", "n_k_heads", "stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_cache"]
    signature = {
        "pos_ptr": "*i64",
        "q_ptr": "*bf16",
        "k_ptr": "*bf16",
        "cache_ptr": cache,
        **dict.fromkeys(ints, "i32"),
    }
    constants = {"IS_NEOX": True, "HALF": HALF, "BLOCK_D": HALF, "BLOCK_HQ": config.block_hq}
    constants |= {"BLOCK_HK": config.block_hk, "WHOLE_Q": False, "WHOLE_K": False}
    signature |= dict.fromkeys(constants, "constexpr")
    options = {"num_warps": config.num_warps, **({"maxnreg": regs} if regs else {})}
    compiled = compile_sm90(attention._rotary_kernel, signature, constants, options, odd=("n_k_heads",))
    name = f"kcatalog {cache[1:]} cache" + (f", limit {regs}" if regs else ", no limit")
    return describe(name, compiled, config.num_warps, regs, workdir)


def liger(workdir: Path) -> Compiled | None:
    try:
        from liger_kernel.ops.rope import _triton_rope
    except ImportError:
        return None
    ints = ["q_row_stride", "k_row_stride", "cos_row_stride", "sin_row_stride", "sl"]
    signature = {"q_ptr": "*bf16", "k_ptr": "*bf16", "cos": "*bf16", "sin": "*bf16", **dict.fromkeys(ints, "i32")}
    order = ["q_ptr", "q_row_stride", "k_ptr", "k_row_stride", "cos", "cos_row_stride", "sin", "sin_row_stride", "sl"]
    signature = {name: signature[name] for name in order}
    constants = {"bs": 1, "cos_bs": 1, "n_qh": Q_HEADS, "n_kh": K_HEADS, "hd": 2 * HALF, "pad_n_qh": Q_HEADS}
    constants |= {"pad_n_kh": K_HEADS, "pad_hd": 2 * HALF, "pad_rd": 2 * HALF, "rd": 2 * HALF}
    constants |= {"BLOCK_SIZE": Q_HEADS, "BACKWARD_PASS": False}
    signature |= dict.fromkeys(constants, "constexpr")
    return describe("Liger-Kernel bf16 cos/sin", compile_sm90(_triton_rope, signature, constants, {}), 4, 0, workdir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="write load_waves.json here")
    args = parser.parse_args(argv)
    import tempfile

    import triton

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = [ours(cache, regs, work) for cache in ("*fp32", "*bf16") for regs in (0, None)]
        rows += [r for r in (liger(work),) if r]
    shape = f"{TOKENS} tokens, {Q_HEADS} q / {K_HEADS} k heads of {2 * HALF}"
    print(f"rotary at {shape}, bf16, sm_90, triton {triton.__version__}")
    print(f"{'kernel':34s} {'warps':>5s} {'regs':>4s} {'instr':>5s} {'waves':>5s}  loads per wave")
    for r in rows:
        counts = f"{r.num_warps:5d} {r.registers:4d} {r.instructions:5d} {r.load_waves:5d}"
        print(f"{r.kernel:34s} {counts}  {r.loads_per_wave}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        data = {"triton": triton.__version__, "rows": [asdict(r) for r in rows]}
        (args.out / "load_waves.json").write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
