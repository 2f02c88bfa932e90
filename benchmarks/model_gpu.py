"""On a GPU: a decoder built from catalog ops, compiled with the catalog's torch ops in the graph, against the same
model written in plain torch (the ops' torch references) and compiled by Inductor, which fuses them itself.
The catalog model runs two ways: "kcatalog" through op handles, whose torch ops torch.compile traces into the
Triton kernels (the backends are `traceable: true`: Inductor sees each kernel, as with torch.library.triton_op),
and "kcatalog opaque" through the same ops registered with traced=False (one opaque custom op each).

The model: embedding -> rms_norm -> [linear (qkv) -> rotary_embedding of q and k (in place on their views of the
qkv output, as vLLM calls it) -> causal attention over the step's own tokens (SDPA, no KV cache, the same in both
models) -> linear (o) -> fused_add_rms_norm -> linear (gate_up) -> silu_and_mul -> linear (down) ->
fused_add_rms_norm] x layers; bf16, hidden 4096, 32 heads (8 KV heads,
GQA), head dim 128, intermediate 14336, 8 layers. Both models share one set of random weights.

One run checks, then times, all in one process:
  1. torch.library.opcheck of every shipped op with its triton backend on the GPU (bf16, fp16);
  2. op handles and torch ops captured in a CUDA graph after warm-up, replayed against eager calls;
  3. the catalog model under torch._dynamo.explain (graph breaks), what each catalog model's graph holds after
     AOTAutograd (Triton kernels, or opaque kcatalog ops), and each compiled model against eager;
  4. decode steps (1 to 64 tokens) compiled with mode="reduce-overhead" (CUDA graphs), static shapes, and prefill
     (4096 tokens) with mode="max-autotune-no-cudagraphs"; eager figures beside them. Medians of
     triton.testing.do_bench (ms); compile times.
Run: python benchmarks/model_gpu.py --out DIR    (--quick: a small model on any device, a smoke test)
Writes DIR/model_gpu.json and DIR/model_gpu.txt (the table).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import kcatalog
from kcatalog.kernels.torch import activation as ref_activation
from kcatalog.kernels.torch import attention as ref_attention
from kcatalog.kernels.torch import layernorm as ref_layernorm
from kcatalog.select.selection import ineligibility
from kcatalog.tools.inputs import build_call, samples_of, size_sets


@dataclass(frozen=True)
class Config:
    vocab: int = 32000
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    intermediate: int = 14336
    layers: int = 8
    max_positions: int = 8192
    decode: tuple[int, ...] = (1, 16, 64)
    prefill: tuple[int, ...] = (4096,)


QUICK = Config(vocab=512, hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, layers=2, max_positions=256,
               decode=(1, 8), prefill=(128,))  # fmt: skip
OPS = ("layernorm.rms_norm", "layernorm.fused_add_rms_norm", "attention.rotary_embedding", "activation.silu_and_mul")


class Weights(torch.nn.Module):
    """Random bf16 weights, shared by both models (parameters, so CUDA graphs treat them as static)."""

    def __init__(self, cfg: Config, device: str, dtype: torch.dtype) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)

        def weight(*shape: int, scale: float | None = None) -> torch.nn.Parameter:
            std = scale if scale is not None else shape[-1] ** -0.5
            tensor = (torch.randn(*shape, generator=generator) * std).to(device=device, dtype=dtype)
            return torch.nn.Parameter(tensor, requires_grad=False)

        def norm() -> torch.nn.Parameter:
            tensor = (torch.rand(cfg.hidden, generator=generator) + 0.5).to(device=device, dtype=dtype)
            return torch.nn.Parameter(tensor, requires_grad=False)

        self.embed = weight(cfg.vocab, cfg.hidden, scale=1.0)
        self.input_norm = norm()
        self.layers = torch.nn.ModuleList()
        for _ in range(cfg.layers):
            layer = torch.nn.Module()
            layer.qkv = weight((cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim, cfg.hidden)
            layer.o = weight(cfg.hidden, cfg.heads * cfg.head_dim)
            layer.post_attention_norm = norm()
            layer.gate_up = weight(2 * cfg.intermediate, cfg.hidden)
            layer.down = weight(cfg.hidden, cfg.intermediate)
            layer.next_norm = norm()
            self.layers.append(layer)
        inverse = 1.0 / (10000 ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
        angles = torch.outer(torch.arange(cfg.max_positions, dtype=torch.float32), inverse)
        self.register_buffer("cos_sin", torch.cat((angles.cos(), angles.sin()), dim=-1).to(device))


class Decoder(torch.nn.Module):
    """The model, its four fused ops given as callables: catalog op handles, or the plain-torch references."""

    def __init__(self, cfg: Config, weights: Weights, ops: dict[str, Callable[..., Any]]) -> None:
        super().__init__()
        self.cfg, self.w = cfg, weights
        self.rms_norm = ops["layernorm.rms_norm"]
        self.fused_add_rms_norm = ops["layernorm.fused_add_rms_norm"]
        self.rotary_embedding = ops["attention.rotary_embedding"]
        self.silu_and_mul = ops["activation.silu_and_mul"]

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cfg, w, count = self.cfg, self.w, tokens.shape[0]
        widths = [cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim]
        residual = F.embedding(tokens, w.embed)
        x = self.rms_norm(residual, w.input_norm, 1e-6)
        for layer in w.layers:
            q, k, v = F.linear(x, layer.qkv).split(widths, -1)
            self.rotary_embedding(positions, q, k, cfg.head_dim, w.cos_sin, True)
            heads = [t.reshape(count, -1, cfg.head_dim).transpose(0, 1) for t in (q, k, v)]
            attention = F.scaled_dot_product_attention(*heads, is_causal=True, enable_gqa=True)
            x = F.linear(attention.transpose(0, 1).reshape(count, widths[0]), layer.o)
            self.fused_add_rms_norm(x, residual, layer.post_attention_norm, 1e-6)
            x = F.linear(self.silu_and_mul(F.linear(x, layer.gate_up)), layer.down)
            self.fused_add_rms_norm(x, residual, layer.next_norm, 1e-6)
        return x


PLAIN = {
    "layernorm.rms_norm": ref_layernorm.rms_norm,
    "layernorm.fused_add_rms_norm": ref_layernorm.fused_add_rms_norm,
    "attention.rotary_embedding": ref_attention.rotary_embedding,
    "activation.silu_and_mul": ref_activation.silu_and_mul,
}


def median_ms(fn: Callable[[], Any], device: str) -> float:
    if device == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[2]


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got64, want64 = got.double(), want.double()
    return float((got64 - want64).norm() / want64.norm())


def opcheck_triton(catalog: kcatalog.Catalog, device: str) -> list[dict[str, Any]]:
    """opcheck of every shipped op with its triton backend bound, where it can run here."""
    rows = []
    for op in catalog:
        info = catalog.info(op)
        samples = samples_of(info)
        if "triton" not in info.backends or samples is None:
            continue
        sizes = size_sets(samples)
        wide = next(env for env in sizes if all(type(v) is not int or v > 1 for v in env.values()))
        for index, (env, dtype) in enumerate(zip((sizes[0], wide, wide), ("bfloat16", "bfloat16", "float16"))):
            if ineligibility(info.backends["triton"], catalog.platform(), dtype) is not None:
                continue
            call = build_call(info, samples, env, dtype, device, seed=index)
            args, kwargs = call.invoke(lambda *a, **k: (a, k))
            row = {"op": op, "backend": "triton", "dtype": dtype, "sizes": env}
            try:
                with catalog.use({op: "triton"}):
                    torch.library.opcheck(catalog.torch_op(op), args, kwargs)
                row["result"] = "pass"
            except Exception as exc:  # noqa: BLE001 - every failure is a result to report
                row["result"] = f"FAIL {type(exc).__name__}: {str(exc)[:400]}"
            rows.append(row)
    return rows


def cuda_graph_capture(catalog: kcatalog.Catalog) -> list[dict[str, Any]]:
    """Handles and torch ops captured in a CUDA graph after warm-up, then replayed on new inputs."""
    rows = []
    for how in ("op handle", "torch op"):
        rms = catalog.op("layernorm.rms_norm") if how == "op handle" else catalog.torch_op("layernorm.rms_norm")
        fused = (
            catalog.op("layernorm.fused_add_rms_norm")
            if how == "op handle"
            else catalog.torch_op("layernorm.fused_add_rms_norm")
        )
        x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
        residual = torch.randn_like(x)
        weight = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: resolution, imports and Triton's compilation happen here
            for _ in range(3):
                rms(x, weight, 1e-6)
                fused(x.clone(), residual.clone(), weight, 1e-6)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        a, r = x.clone(), residual.clone()
        with torch.cuda.graph(graph):
            y = rms(x, weight, 1e-6)
            fused(a, r, weight, 1e-6)
        new_x, new_r = torch.randn_like(x), torch.randn_like(x)
        x.copy_(new_x)
        a.copy_(new_x)
        r.copy_(new_r)
        graph.replay()
        torch.cuda.synchronize()
        want_y = ref_layernorm.rms_norm(new_x, weight)
        want_a, want_r = new_x.clone(), new_r.clone()
        ref_layernorm.fused_add_rms_norm(want_a, want_r, weight)
        errors = [relative_error(y, want_y), relative_error(a, want_a), relative_error(r, want_r)]
        rows.append({"how": how, "replay_relative_errors": errors, "pass": max(errors) <= 1e-2})
    return rows


def inputs(cfg: Config, count: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(count)
    tokens = torch.randint(0, cfg.vocab, (count,), generator=generator).to(device)
    return tokens, torch.arange(count, device=device)


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = QUICK if args.quick else Config()
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    began = time.perf_counter()
    catalog = kcatalog.load_catalog(cache=False)
    catalog.register_torch_ops(traced=True)  # the Triton kernels in Inductor's graph
    opaque = catalog.register_torch_ops("kcatalog_opaque", OPS, traced=False)
    result: dict[str, Any] = {
        "benchmark": "model_gpu",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "config": asdict(cfg),
        "dtype": str(dtype).removeprefix("torch."),
        "commit": args.commit
        or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "bindings": {op: str(catalog.select(op, dtype=str(dtype).removeprefix("torch.")).chosen.backend) for op in OPS},
    }
    save = args.save
    if device == "cuda" and not args.profile and not args.no_checks:
        result["opcheck_triton"] = opcheck_triton(catalog, device)
        save(result)
        result["cuda_graph_capture"] = cuda_graph_capture(catalog)
        save(result)
    weights = Weights(cfg, device, dtype)
    models = {
        "kcatalog": Decoder(cfg, weights, {op: catalog.op(op) for op in OPS}),
        "kcatalog opaque": Decoder(cfg, weights, {op: opaque[op] for op in OPS}),
        "plain torch": Decoder(cfg, weights, PLAIN),
    }
    if args.profile:
        result["profile"] = profile_models(models, cfg, device)
        return result
    explained = torch._dynamo.explain(models["kcatalog"])(*inputs(cfg, 8, device))
    result["kcatalog_graph_breaks"] = explained.graph_break_count
    result["kcatalog_graphs"] = explained.graph_count
    result["graph_nodes"] = {name: graph_nodes(models[name], cfg, device) for name in ("kcatalog", "kcatalog opaque")}
    print(json.dumps(result["graph_nodes"]), flush=True)
    save(result)
    torch._dynamo.reset()
    rows: list[dict[str, Any]] = []
    result["rows"] = rows
    # The extremes first, then the rest while --budget-s lasts (what was measured is saved after every row).
    decode = sorted(cfg.decode, key=lambda count: count not in (min(cfg.decode), max(cfg.decode)))
    phases = [("decode", count, "reduce-overhead") for count in decode[:2]]
    phases += [("prefill", count, "max-autotune-no-cudagraphs") for count in cfg.prefill]
    phases += [("decode", count, "reduce-overhead") for count in decode[2:]]
    if device != "cuda":
        phases = [(phase, count, "default") for phase, count, _ in phases]
    with torch.no_grad():
        reference = {count: models["plain torch"](*inputs(cfg, count, device)) for _, count, _ in phases}
        for phase, count, mode in phases:
            if time.perf_counter() - began > args.budget_s:
                result.setdefault("skipped", []).append(f"{phase} {count}: over --budget-s")
                continue
            batch = inputs(cfg, count, device)
            for name, model in models.items():
                row: dict[str, Any] = {"phase": phase, "tokens": count, "model": name}
                row["eager_ms"] = median_ms(lambda model=model, batch=batch: model(*batch), device)
                row["eager_error"] = relative_error(model(*batch), reference[count])
                try:
                    compiled = torch.compile(model, mode=mode, fullgraph=True, dynamic=False)
                    start = time.perf_counter()
                    for _ in range(3):  # reduce-overhead records its CUDA graph on a later call
                        out = compiled(*batch)
                    if device == "cuda":
                        torch.cuda.synchronize()
                    row["compile_s"] = round(time.perf_counter() - start, 1)
                    row["compiled_error"] = relative_error(out.clone(), reference[count])
                    row["compiled_ms"] = median_ms(lambda fn=compiled, batch=batch: fn(*batch), device)
                    row["mode"] = mode
                except Exception as exc:  # noqa: BLE001 - a failure is a result to report
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
                    traceback.print_exc()
                rows.append(row)
                print(json.dumps(row), flush=True)
                save(result)
            torch._dynamo.reset()
    return result


def graph_nodes(model: Decoder, cfg: Config, device: str) -> dict[str, int]:
    """What the model's graph holds after AOTAutograd: Triton kernel launches, opaque kcatalog ops, other calls."""
    from torch._dynamo.backends.common import aot_autograd

    counts = {"triton kernels": 0, "opaque kcatalog ops": 0, "other calls": 0}

    def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        for node in gm.graph.nodes:
            if node.op == "call_function":
                # an in-place op is functionalized into auto_functionalized(op, ...)
                target = str(node.args[0] if "auto_functionalized" in str(node.target) else node.target)
                kind = "triton kernels" if "triton_kernel_wrapper" in target else "other calls"
                counts["opaque kcatalog ops" if target.startswith("kcatalog") else kind] += 1
        return gm.forward  # type: ignore[no-any-return]

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=aot_autograd(fw_compiler=compiler), fullgraph=True, dynamic=False)(
            *inputs(cfg, 8, device)
        )
    torch._dynamo.reset()
    return counts


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def kernel_kind(name: str) -> str:
    """GEMM, attention, or everything else (norms, rotary, activation, copies), by the CUDA kernel's name.

    Inductor decomposes SDPA with enable_gqa=True into fp32 batched matmuls and a softmax: in this bf16 model the
    only fp32 GEMMs are the attention's. Kernel names of the catalog's torch ops hold their op ids ('attention_...')."""
    lowered = name.lower()
    if "rotary" in lowered:
        return "other"
    if "f32f32" in lowered or "softmax" in lowered or any(word in lowered for word in ("flash", "fmha", "sdpa")):
        return "attention"
    if any(word in lowered for word in ("gemm", "nvjet", "xmma", "cutlass", "splitkreduce", "triton_mm", "_tem_")):
        return "gemm"
    return "other"


def profile_models(models: dict[str, Decoder], cfg: Config, device: str) -> dict[str, Any]:
    """Where each compiled model's GPU time goes, kernel by kernel (default mode: no autotuning, no CUDA graphs)."""
    from torch.profiler import ProfilerActivity, profile

    report: dict[str, Any] = {}
    for phase, count in (("prefill", max(cfg.prefill)), ("decode", max(cfg.decode))):
        batch = inputs(cfg, count, device)
        for name, model in models.items():
            compiled = torch.compile(model, fullgraph=True, dynamic=False)
            activity = ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU
            with torch.no_grad():
                for _ in range(3):
                    compiled(*batch)
                synchronize(device)
                with profile(activities=[activity]) as prof:
                    for _ in range(5):
                        compiled(*batch)
                    synchronize(device)
            kernels = []
            for event in prof.key_averages():
                spent = getattr(event, "self_device_time_total", 0) if device == "cuda" else event.self_cpu_time_total
                if spent > 0:
                    kernels.append({"kernel": event.key[:90], "calls": event.count // 5, "ms": spent / 5 / 1e3})
            kernels.sort(key=lambda k: -k["ms"])
            by_kind: dict[str, float] = {}
            for kernel in kernels:
                kind = kernel_kind(kernel["kernel"])
                by_kind[kind] = by_kind.get(kind, 0.0) + kernel["ms"]
            report[f"{phase} {count} {name}"] = {"by_kind_ms": by_kind, "top": kernels[:14], "kernels": len(kernels)}
            print(json.dumps({f"{phase} {count} {name}": by_kind}), flush=True)
        torch._dynamo.reset()
    return report


def profile_table(report: dict[str, Any]) -> str:
    lines = []
    for key, entry in report.items():
        kinds = ", ".join(f"{kind} {ms:.3f} ms" for kind, ms in sorted(entry["by_kind_ms"].items()))
        lines.append(f"{key}: {entry['kernels']} distinct kernels; {kinds}")
        lines += [f"    {k['ms']:8.3f} ms {k['calls']:4d}x  {k['kernel']}" for k in entry["top"] if k["ms"] >= 0.005]
    return "\n".join(lines)


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['device']}, torch {result['torch']}, {result['dtype']}, commit {result['commit']}; "
        f"kcatalog model: {result['kcatalog_graphs']} graph, {result['kcatalog_graph_breaks']} graph breaks; "
        f"bindings: {result['bindings']}",
        f"{'phase':8s} {'tokens':>6s} {'model':15s} {'eager ms':>9s} {'compiled ms':>11s} {'compile s':>9s} "
        f"{'rel err':>8s}  mode",
    ]
    for row in result["rows"]:
        compiled = f"{row['compiled_ms']:11.3f}" if "compiled_ms" in row else f"{'failed':>11s}"
        lines.append(
            f"{row['phase']:8s} {row['tokens']:6d} {row['model']:15s} {row['eager_ms']:9.3f} {compiled} "
            f"{row.get('compile_s', 0):9.1f} {row.get('compiled_error', float('nan')):8.1e}  {row.get('mode', '')}"
        )
    by_key = {(r["phase"], r["tokens"], r["model"]): r for r in result["rows"] if "compiled_ms" in r}
    for (phase, tokens, model), row in sorted(by_key.items()):
        plain = by_key.get((phase, tokens, "plain torch"))
        if model != "plain torch" and plain:
            lines.append(f"{phase} {tokens}: {model} {plain['compiled_ms'] / row['compiled_ms']:.3f}x Inductor")
    for name, counts in result.get("graph_nodes", {}).items():
        lines.append(f"graph after AOTAutograd, {name}: {counts}")
    checks = result.get("opcheck_triton", [])
    if checks:
        failed = [c for c in checks if c["result"] != "pass"]
        lines.append(f"opcheck, triton backends: {len(checks) - len(failed)}/{len(checks)} passed")
        lines += [f"  {c['op']} {c['dtype']} {c['sizes']}: {c['result']}" for c in failed]
    for row in result.get("cuda_graph_capture", []):
        lines.append(
            f"CUDA graph capture, {row['how']}: {'pass' if row['pass'] else 'FAIL'} {row['replay_relative_errors']}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true", help="only: where each compiled model's GPU time goes")
    parser.add_argument("--no-checks", action="store_true", help="skip opcheck and the CUDA graph capture check")
    parser.add_argument("--budget-s", type=float, default=480.0, help="start no new phase after this many seconds")
    parser.add_argument("--commit", default="", help="the commit measured (default: git rev-parse HEAD)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    def save(result: dict[str, Any]) -> None:
        (args.out / "model_gpu.json").write_text(json.dumps(result, indent=2, default=str) + "\n")

    args.save = save
    result = run(args)
    if args.profile:
        (args.out / "model_gpu_profile.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        text = profile_table(result["profile"])
        (args.out / "model_gpu_profile.txt").write_text(text + "\n")
        print(text)
        return 0
    save(result)
    text = table(result)
    (args.out / "model_gpu.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
