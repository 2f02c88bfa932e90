"""loss.fused_linear_cross_entropy on a CUDA GPU (an H200): correctness, then forward + backward time and peak memory
at Llama-3-8B's LM head (H 4096, V 128256, bf16) against Liger-Kernel's fused linear cross-entropy and plain torch.

(a) Correctness: the Triton forward and backward (bf16, fp16, fp32) against the float32 torch reference, at
    T = 1024 and a vocabulary that is not a multiple of the block width (V 128256 and 50257), a tenth of the rows
    ignored, the manifest's tolerances; Liger's loss and gradients against the same reference, for comparison.
(b) Time and memory, T in {4096, 8192}: one forward + backward (unit loss gradient), medians of CUDA-event times
    over interleaved rounds; peak memory above the inputs (x, weight, target) and the gradients' own size:
    - kcatalog: the registered torch op through autograd (what training runs), shipped tunables;
    - kcatalog block_factor=F: the kernel functions called directly (forward then backward) with vocabulary
      blocks of ~F times x's size (autograd's backward thread would not see a TUNING.override);
    - liger: LigerFusedLinearCrossEntropyFunction (when liger_kernel is importable);
    - torch: F.linear + transformers' float32 cross-entropy, logits materialised.

Run: PYTHONPATH=src python benchmarks/loss_gpu.py OUT_DIR   (writes OUT_DIR/loss_gpu.json and OUT_DIR/loss_gpu.md)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import kcatalog
from kcatalog.kernels.torch import loss as ref
from kcatalog.kernels.triton import loss as tri
from kcatalog.testing import relative_error

OP = "loss.fused_linear_cross_entropy"
H, V = 4096, 128256
TOKENS = (4096, 8192)
FACTORS = (1.0, 2.0, 4.0, 8.0)
ROUNDS = 7


def inputs(t: int, h: int, v: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(t, h, generator=g, device="cuda").to(dtype)
    w = (torch.randn(v, h, generator=g, device="cuda") / h**0.5).to(dtype)
    target = torch.randint(0, v, (t,), generator=g, device="cuda")
    target[torch.rand(t, generator=g, device="cuda") < 0.1] = -100
    return x, w, target


def liger_fn() -> Callable[..., Any] | None:
    try:
        from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
    except ImportError:
        return None
    return LigerFusedLinearCrossEntropyFunction.apply  # type: ignore[no-any-return]


def correctness(manifest_tol: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    rows = []
    liger = liger_fn()
    for v in (V, 50257):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            x, w, target = inputs(1024, H, v, dtype, 1)
            loss, lse = ref.fused_linear_cross_entropy(x, w, target)
            gx, gw = ref.fused_linear_cross_entropy_backward(torch.tensor(1.0, device="cuda"), x, w, target, -100, lse)
            name = str(dtype).removeprefix("torch.")
            out, out_lse = tri.fused_linear_cross_entropy(x, w, target)
            rx, rw = tri.fused_linear_cross_entropy_backward(
                torch.tensor(1.0, device="cuda"), x, w, target, -100, out_lse
            )
            errors = {
                "loss": relative_error(out, loss),
                "lse": relative_error(out_lse, lse),
                "grad_x": relative_error(rx, gx),
                "grad_w": relative_error(rw, gw),
            }
            tol_f, tol_b = manifest_tol["forward"][name], manifest_tol["backward"][name]
            ok = max(errors["loss"], errors["lse"]) <= tol_f and max(errors["grad_x"], errors["grad_w"]) <= tol_b
            row: dict[str, Any] = {"V": v, "dtype": name, "kcatalog": errors, "ok": ok}
            if liger is not None and dtype != torch.float32:
                xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
                lloss = liger(xl, wl, target)
                lloss = lloss[0] if isinstance(lloss, tuple) else lloss
                lloss.backward()
                row["liger"] = {
                    "loss": relative_error(lloss, loss),
                    "grad_x": relative_error(xl.grad, gx),
                    "grad_w": relative_error(wl.grad, gw),
                }
            rows.append(row)
            del x, w, target, gx, gw, rx, rw
            torch.cuda.empty_cache()
    return rows


def timed(step: Callable[[], None], before: Callable[[], None]) -> tuple[float, int]:
    """(ms of one call, peak bytes allocated above what was allocated before it, after `before` freed the last
    call's gradients)."""
    before()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end), torch.cuda.max_memory_allocated() - base


def cases(t: int, ops: Any) -> tuple[dict[str, Callable[[], None]], Callable[[], None]]:
    """The steps at T = t by name, and what frees their gradients (x.grad and weight.grad)."""
    x, w, target = inputs(t, H, V, torch.bfloat16, 2)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    one = torch.tensor(1.0, device="cuda")

    def clear() -> None:
        xg.grad = None
        wg.grad = None

    def registered() -> None:
        ops[OP](xg, wg, target)[0].backward()

    def direct(factor: float) -> Callable[[], None]:
        def step() -> None:
            with tri.TUNING.override(block_factor=factor):
                _, lse = tri.fused_linear_cross_entropy(x, w, target)
                grads = tri.fused_linear_cross_entropy_backward(one, x, w, target, -100, lse)
            del grads

        return step

    def plain() -> None:
        F.cross_entropy(F.linear(xg, wg).float(), target, ignore_index=-100).backward()

    found: dict[str, Callable[[], None]] = {"kcatalog": registered}
    found.update({f"kcatalog block_factor={f:g}": direct(f) for f in FACTORS})
    liger = liger_fn()
    if liger is not None:

        def liger_step() -> None:
            out = liger(xg, wg, target)
            (out[0] if isinstance(out, tuple) else out).backward()

        found["liger"] = liger_step
    found["torch"] = plain
    return found, clear


def timing(ops: Any) -> list[dict[str, Any]]:
    rows = []
    for t in TOKENS:
        steps, clear = cases(t, ops)
        for step in steps.values():  # warm-up: compile the kernels, settle the allocator
            for _ in range(2):
                clear()
                step()
        times: dict[str, list[float]] = {name: [] for name in steps}
        peaks: dict[str, int] = dict.fromkeys(steps, 0)
        for _ in range(ROUNDS):
            for name, step in steps.items():
                ms, peak = timed(step, clear)
                times[name].append(ms)
                peaks[name] = max(peaks[name], peak)
        flops = 3 * 2 * t * H * V  # the three GEMMs any implementation needs
        for name in steps:
            ms = statistics.median(times[name])
            rows.append(
                {
                    "T": t,
                    "case": name,
                    "median_ms": ms,
                    "tflops_3gemm": flops / ms / 1e9,
                    "peak_mib": peaks[name] / 2**20,
                }
            )
        clear()
        del steps
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    options = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    options.out.mkdir(parents=True, exist_ok=True)
    catalog = kcatalog.load_catalog(require=[OP])
    info, backward = catalog.info(OP), catalog.info(f"{OP}_backward")
    tol = {"forward": dict(info.tolerance), "backward": dict(backward.tolerance)}
    ops = catalog.register_torch_ops()
    result = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "liger": liger_fn() is not None,
        "correctness": correctness(tol),
        "timing": timing(ops),
    }
    (options.out / "loss_gpu.json").write_text(json.dumps(result, indent=2, default=str))
    lines = [f"# loss.fused_linear_cross_entropy on {result['gpu']}", ""]
    lines += [f"torch {result['torch']}, triton {result['triton']}, liger {'yes' if result['liger'] else 'no'}", ""]
    lines += ["## correctness (relative error vs the float32 reference, T=1024)", ""]
    for row in result["correctness"]:
        lines.append(
            f"- V={row['V']} {row['dtype']}: kcatalog {row['kcatalog']} ok={row['ok']} liger {row.get('liger')}"
        )
    lines += [
        "",
        "## forward + backward, bf16, H=4096, V=128256",
        "",
        "| T | case | ms | TFLOP/s (3 GEMMs) | peak MiB |",
    ]
    lines.append("|---|---|---|---|---|")
    for row in result["timing"]:
        figures = f"{row['median_ms']:.2f} | {row['tflops_3gemm']:.0f} | {row['peak_mib']:.0f}"
        lines.append(f"| {row['T']} | {row['case']} | {figures} |")
    (options.out / "loss_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(row["ok"] for row in result["correctness"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
