"""moe.fused_experts on a CUDA GPU (an H200): every backend checked and timed at Qwen3-30B-A3B's and Mixtral-8x7B's
expert shapes, against a dense bf16 GEMM of the same work, and whole MoE models plain against kernelized.

(a) Correctness: each backend eligible here (bf16) against the float32 reference at the real shapes, T = 1, 64,
    4096, with routing as a softmax router makes it (K distinct experts per token, weights renormalised).
(b) The op alone: T in {1, 16, 64, 4096}, backends interleaved round by round, medians of CUDA-event times
    (eager calls, launch overhead included); a dense bf16 GEMM [T*K, H] x [H, 3I] (the same 6*T*K*H*I FLOPs) in
    the same rounds; the Triton kernel's fraction of that dense throughput (target >= 0.6 at Mixtral T=4096).
(b') The op alone in CUDA graphs: each backend's calls captured N to a graph (after warm-up calls on a side
    stream) and the graph replayed round by round, medians of ms per call, beside the eager ones: what the op
    costs on the GPU once launch overhead is gone. A backend that cannot be captured (a host sync, a
    data-dependent shape) is recorded with the reason and skipped.
(c) Whole models with random weights, bf16, a few layers (--qwen-layers, --mixtral-layers; stated in the
    results): plain transformers with its default experts implementation (grouped_mm) and its other ones
    (eager; batched_mm where its per-pair weight copies fit), and kcatalog.kernelize(model); prefill of 4096
    tokens (batch 1) and one decode step at batch 1, 16, 64 after a 128-token prompt; logits of each against
    a float32 copy of the model. --compile adds torch.compile'd plain-default and kernelized decode.

Liger-Kernel's backend runs when liger_kernel is importable (its autotuning is switched off here,
LIGER_FUSED_MOE_AUTOTUNE=0, to keep the run short).

Run: PYTHONPATH=src python benchmarks/moe_gpu.py OUT_DIR   (writes OUT_DIR/moe_gpu.json and OUT_DIR/moe_gpu.md)
     --op-only: (a), (b) and (b') only, at T in {1, 16, 64, 4096}, both shapes (about 1-2 minutes on an H200);
     it also times the alignment alone (Triton against the torch ops it replaced) and the small-batch path
     triton[gemv] (moe_gemv.py, off by default: MoeTuning.gemv_tokens).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("LIGER_FUSED_MOE_AUTOTUNE", "0")  # before liger_kernel is imported

import torch

import kcatalog

OP = "moe.fused_experts"


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    experts: int
    top_k: int
    inter: int


SHAPES = (Shape("qwen3_30b_a3b", 2048, 128, 8, 768), Shape("mixtral_8x7b", 4096, 8, 2, 14336))
TOKENS = (1, 16, 64, 4096)
CHECK_TOKENS = (1, 64, 4096)
BATCHED_MM_BYTES = 8 << 30  # transformers' batched_mm copies each pair's expert weights: skipped above this


def routing(tokens: int, shape: Shape, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of a softmax router over random scores: K distinct experts per token, weights summing to one."""
    scores = torch.randn(tokens, shape.experts, generator=gen, device="cuda").softmax(-1)
    weights, ids = scores.topk(shape.top_k, dim=-1)
    return ids, (weights / weights.sum(-1, keepdim=True)).to(torch.bfloat16)


def weights(shape: Shape, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    gate_up = torch.randn(shape.experts, 2 * shape.inter, shape.hidden, generator=gen, device="cuda")
    down = torch.randn(shape.experts, shape.hidden, shape.inter, generator=gen, device="cuda")
    return (gate_up / shape.hidden**0.5).bfloat16(), (down / shape.inter**0.5).bfloat16()


def batched_mm_fits(tokens: int, shape: Shape) -> bool:
    return tokens * shape.top_k * 3 * shape.inter * shape.hidden * 2 <= BATCHED_MM_BYTES


def backends(catalog: Any) -> list[str]:
    """The op's backends that can run bf16 on this GPU (the reference aside)."""
    platform = catalog.platform("cuda")
    names = []
    for backend in catalog.info(OP).backends:
        if backend == "torch":
            continue
        try:
            catalog.select(OP, platform, "bfloat16", backend=backend).require()
        except Exception as exc:  # unavailable here (not installed, wrong device): say so, go on
            print(f"  {backend}: not run ({exc})".splitlines()[0], flush=True)
            continue
        names.append(backend)
    return names


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def check(catalog: Any, names: list[str], results: dict[str, Any]) -> None:
    reference = catalog.kernel(OP, "torch")
    tolerance = catalog.info(OP).tolerance["bfloat16"]
    rows = results.setdefault("check", [])
    for shape in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        gate_up, down = weights(shape, gen)
        for tokens in CHECK_TOKENS:
            x = torch.randn(tokens, shape.hidden, generator=gen, device="cuda").bfloat16()
            ids, w = routing(tokens, shape, gen)
            ref = reference(x.float(), ids, w.float(), gate_up.float(), down.float())
            gemv = ["triton[gemv]"] if "triton" in names and tokens <= 64 else []
            for backend in names + gemv:
                if backend == "transformers_batched_mm" and not batched_mm_fits(tokens, shape):
                    continue
                if backend == "triton[gemv]":
                    out = with_gemv(x, ids, w, gate_up, down)
                else:
                    out = catalog.kernel(OP, backend)(x, ids, w, gate_up, down)
                err = relative_error(out, ref)
                ok = bool(out.dtype == torch.bfloat16 and out.shape == x.shape and err <= tolerance)
                rows.append(dict(shape=shape.name, tokens=tokens, backend=backend, rel_err=err, ok=ok))
                print(f"  check {shape.name} T={tokens} {backend}: rel err {err:.2e} {'ok' if ok else 'FAIL'}",
                      flush=True)  # fmt: skip
            del ref
        del gate_up, down
        torch.cuda.empty_cache()


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, inner: int) -> dict[str, float]:
    """Median milliseconds per call of each fn, measured round by round in turn (CUDA events, `inner` calls)."""
    for fn in fns.values():  # compile, autotune, warm caches
        fn()
        fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / inner)
    return {name: statistics.median(values) for name, values in times.items()}


def graphed(fns: dict[str, Callable[[], Any]], calls: int, rounds: int) -> tuple[dict[str, float], dict[str, str]]:
    """Median milliseconds per call of each fn replayed from a CUDA graph of `calls` calls, and the reason for
    each fn that could not be captured. Each fn is captured and timed before the next is tried, so that a
    failed capture costs only its own row."""
    medians: dict[str, float] = {}
    skipped: dict[str, str] = {}
    for name, fn in fns.items():
        side = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        try:
            torch.cuda.synchronize()
            with torch.cuda.stream(side):  # our own stream context: restored even if the capture fails
                fn()  # compile, autotune, allocate outside the capture
                fn()
                torch.cuda.synchronize()
                graph.capture_begin()
                try:
                    for _ in range(calls):
                        fn()
                finally:
                    graph.capture_end()
            graph.replay()
            torch.cuda.synchronize()
        except Exception as exc:  # not capturable (a host sync, a data-dependent shape): say why, go on
            skipped[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
            continue
        times = []
        for _ in range(rounds):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / calls)
        medians[name] = statistics.median(times)
        del graph
    torch.cuda.empty_cache()
    return medians, skipped


def _alternatives() -> dict[str, Any]:
    from kcatalog.kernels.triton.moe import GemmConfig, MoeConfig

    return {
        "m64_w8": MoeConfig(64, GemmConfig(128, 64, 8, 8, 3), GemmConfig(128, 64, 8, 4, 4)),  # the first default
        "m64_n64_w4": MoeConfig(64, GemmConfig(64, 64, 8, 4, 4), GemmConfig(128, 64, 8, 4, 4)),
        "m64_s4": MoeConfig(64, GemmConfig(128, 64, 8, 8, 4), GemmConfig(256, 64, 8, 8, 3)),
    }


PREFILL_ALTERNATIVES = _alternatives()


def with_prefill(config: Any, *args: torch.Tensor) -> torch.Tensor:
    """The Triton kernel with another prefill-class configuration."""
    from kcatalog.kernels.triton.moe import TUNING, fused_experts

    with TUNING.override(prefill=config):
        return fused_experts(*args)


def torch_align(topk_ids: torch.Tensor, experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The alignment as the backend's first form did it, in torch ops (about 25 launches), to time against."""
    flat = topk_ids.reshape(-1).long()
    pairs = flat.numel()
    counts = torch.zeros(experts, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)
    sorted_experts, order = torch.sort(flat, stable=True)
    rank = torch.arange(pairs, device=flat.device) - (torch.cumsum(counts, 0) - counts)[sorted_experts]
    slot = (ends - padded)[sorted_experts] + rank
    blocks = -(-pairs // block_m) + min(experts, pairs)
    sorted_pairs = torch.full((blocks * block_m,), pairs, dtype=torch.int32, device=flat.device)
    sorted_pairs.scatter_(0, slot, order.to(torch.int32))
    starts = torch.arange(blocks, device=flat.device) * block_m
    return sorted_pairs, torch.searchsorted(ends, starts, right=True).to(torch.int32)


def time_align(shape: Shape, tokens: int, ids: torch.Tensor, results: dict[str, Any]) -> None:
    """The alignment alone, Triton kernel(s) against the torch ops, eager and replayed; the two must agree."""
    from kcatalog.kernels.triton.moe import TUNING
    from kcatalog.kernels.triton.moe_align import align

    block_m = TUNING.get().config(ids.numel(), shape.experts).block_m
    new, old = align(ids, shape.experts, block_m), torch_align(ids, shape.experts, block_m)
    same = torch.equal(new.sorted_pairs, old[0]) and torch.equal(new.block_expert, old[1])
    fns: dict[str, Callable[[], Any]] = {
        "align[triton]": lambda: align(ids, shape.experts, block_m),
        "align[torch]": lambda: torch_align(ids, shape.experts, block_m),
    }
    eager = interleaved(fns, rounds=9, inner=20)
    replayed, skipped = graphed(fns, calls=20, rounds=7)
    row = dict(shape=shape.name, tokens=tokens, block_m=block_m, same=same, eager_ms=eager, graph_ms=replayed)
    results.setdefault("align", []).append(row)
    line = ", ".join(f"{n} {replayed.get(n, float('nan')):.4f}/{ms:.4f}" for n, ms in eager.items())
    print(f"  align {shape.name} T={tokens} (ms, graph/eager): {line}; {'same' if same else 'DIFFERENT'}", flush=True)
    for name, reason in skipped.items():
        print(f"    {name}: not captured ({reason})", flush=True)


def with_gemv(*args: torch.Tensor) -> torch.Tensor:
    """The Triton kernel through its matrix-vector path (moe_gemv.py) at any batch."""
    from kcatalog.kernels.triton.moe import TUNING, fused_experts

    with TUNING.override(gemv_tokens=1 << 30):
        return fused_experts(*args)


def time_op(catalog: Any, names: list[str], results: dict[str, Any], graphs: bool = False) -> None:
    for shape in SHAPES:
        time_shape(catalog, names, shape, results.setdefault("op", []), results if graphs else None)
        torch.cuda.empty_cache()


def time_shape(
    catalog: Any, names: list[str], shape: Shape, rows: list[dict[str, Any]], results: dict[str, Any] | None = None
) -> None:
    """Eager times of every backend at each T; with `results`, also CUDA-graph replays (results['op_graph'])."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    gate_up, down = weights(shape, gen)
    for tokens in TOKENS:
        x = torch.randn(tokens, shape.hidden, generator=gen, device="cuda").bfloat16()
        ids, w = routing(tokens, shape, gen)
        pairs = tokens * shape.top_k
        a = torch.randn(pairs, shape.hidden, device="cuda").bfloat16()
        b = torch.randn(shape.hidden, 3 * shape.inter, device="cuda").bfloat16()
        fns: dict[str, Callable[[], Any]] = {"dense_gemm": lambda a=a, b=b: torch.mm(a, b)}
        for backend in names:
            if backend == "transformers_batched_mm" and not batched_mm_fits(tokens, shape):
                continue
            kernel = catalog.kernel(OP, backend)
            fns[backend] = lambda k=kernel, x=x, ids=ids, w=w: k(x, ids, w, gate_up, down)  # noqa: B023
        if "triton" in names and tokens <= 64:  # the small-batch path (moe_gemv.py), off by default
            fns["triton[gemv]"] = lambda x=x, ids=ids, w=w: with_gemv(x, ids, w, gate_up, down)  # noqa: B023
        if "triton" in names and tokens == 4096:  # a tiny autotune: the prefill class's alternatives, side by side
            for label, config in PREFILL_ALTERNATIVES.items():
                fns[f"triton[{label}]"] = lambda c=config, x=x, ids=ids, w=w: with_prefill(c, x, ids, w, gate_up, down)  # noqa: B023
        inner = 20 if tokens <= 64 else 3
        medians = interleaved(fns, rounds=9 if tokens <= 64 else 5, inner=inner)
        flops = 6 * pairs * shape.hidden * shape.inter
        dense = medians["dense_gemm"]
        for name, ms in medians.items():
            rows.append(dict(shape=shape.name, tokens=tokens, backend=name, ms=ms, tflops=flops / ms / 1e9,
                             fraction_of_dense=dense / ms))  # fmt: skip
        line = ", ".join(f"{n} {ms:.3f}" for n, ms in sorted(medians.items(), key=lambda kv: kv[1]))
        print(f"  op {shape.name} T={tokens} (ms): {line}", flush=True)
        if "triton" in medians:
            print(f"    triton: {dense / medians['triton']:.2f} of dense bf16 GEMM throughput", flush=True)
        if results is not None and "triton" in names:
            time_align(shape, tokens, ids, results)
        if results is not None:
            # Triton and the dense GEMM first: a failed capture of another backend cannot spoil their rows.
            order = sorted(fns, key=lambda n: (n not in ("triton", "dense_gemm"), n))
            plain = {n: fns[n] for n in order if n == "triton[gemv]" or ("[" not in n and n != "transformers_eager")}
            replayed, skipped = graphed(plain, calls=20 if tokens <= 64 else 3, rounds=7 if tokens <= 64 else 3)
            if "transformers_eager" in fns:
                skipped["transformers_eager"] = "not tried: its loop over experts reads the routing on the host"
            for name, ms in replayed.items():
                results.setdefault("op_graph", []).append(
                    dict(shape=shape.name, tokens=tokens, backend=name, graph_ms=ms, eager_ms=medians[name])
                )
            for name, reason in skipped.items():
                results.setdefault("op_graph_skipped", []).append(
                    dict(shape=shape.name, tokens=tokens, backend=name, reason=reason)
                )
            line = ", ".join(
                f"{n} {ms:.3f}/{medians[n]:.3f}" for n, ms in sorted(replayed.items(), key=lambda kv: kv[1])
            )
            print(f"  graph {shape.name} T={tokens} (ms, graph/eager): {line}", flush=True)
            for name, reason in skipped.items():
                print(f"    {name}: not captured ({reason})", flush=True)


# -- whole models -----------------------------------------------------------------------------------------


def model_config(transformers: Any, shape: Shape, layers: int) -> Any:
    common = dict(hidden_size=shape.hidden, num_hidden_layers=layers, num_experts_per_tok=shape.top_k,
                  num_attention_heads=32, max_position_embeddings=8192)  # fmt: skip
    if shape.name.startswith("qwen"):
        return transformers.Qwen3MoeConfig(**common, num_experts=shape.experts, moe_intermediate_size=shape.inter,
                                           num_key_value_heads=4, head_dim=128, vocab_size=151936,
                                           intermediate_size=6144, norm_topk_prob=True)  # fmt: skip
    return transformers.MixtralConfig(**common, num_local_experts=shape.experts, intermediate_size=shape.inter,
                                      num_key_value_heads=8, head_dim=128, vocab_size=32000)  # fmt: skip


def build(transformers: Any, shape: Shape, layers: int) -> tuple[Any, Any]:
    """(bf16 model, float32 copy) with the same random weights, on the GPU."""
    config = model_config(transformers, shape, layers)
    cls = transformers.Qwen3MoeForCausalLM if shape.name.startswith("qwen") else transformers.MixtralForCausalLM
    torch.manual_seed(0)
    with torch.device("cuda"):
        fp32 = cls(config).eval()
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    return bf16, fp32


def whole_models(args: argparse.Namespace, results: dict[str, Any]) -> None:
    import transformers

    layers_of = {"qwen3_30b_a3b": args.qwen_layers, "mixtral_8x7b": args.mixtral_layers}
    for shape in SHAPES:
        whole_model(transformers, args, shape, layers_of[shape.name], results)
        torch.cuda.empty_cache()


def whole_model(
    transformers: Any, args: argparse.Namespace, shape: Shape, layers: int, results: dict[str, Any]
) -> None:
    rows = results.setdefault("model", [])
    accuracy = results.setdefault("model_logits", [])
    model, fp32 = build(transformers, shape, layers)
    gen = torch.Generator(device="cuda").manual_seed(2)
    vocab = model.config.vocab_size
    probe = torch.randint(0, vocab, (1, 512), generator=gen, device="cuda")
    with torch.no_grad():
        fp32.set_experts_implementation("grouped_mm")
        ref = fp32(probe, logits_to_keep=128).logits.float()
    del fp32
    torch.cuda.empty_cache()

    impls = ["grouped_mm", "eager", "batched_mm", "kcatalog"]

    def use(impl: str) -> None:
        kcatalog.unkernelize(model)
        if impl == "kcatalog":
            model.set_experts_implementation("grouped_mm")  # the default: what unkernelize puts back
            report = kcatalog.kernelize(model)
            results.setdefault("kernelize", {})[shape.name] = str(report).splitlines()[:4]
        else:
            model.set_experts_implementation(impl)

    for impl in impls:
        use(impl)
        if impl == "batched_mm" and not batched_mm_fits(probe.numel(), shape):
            continue
        with torch.no_grad():
            out = model(probe, logits_to_keep=128).logits.float()
        accuracy.append(dict(shape=shape.name, impl=impl, rel_err_vs_fp32=relative_error(out, ref)))
        print(f"  logits {shape.name} {impl}: rel err vs float32 {accuracy[-1]['rel_err_vs_fp32']:.3e}", flush=True)

    prompt = torch.randint(0, vocab, (1, 4096), generator=gen, device="cuda")
    phases: list[tuple[str, int]] = [("prefill_4096", 1)] + [(f"decode_b{b}", b) for b in (1, 16, 64)]
    for phase, batch in phases:
        # setup() is untimed (a fresh copy of the prompt's KV cache for a decode step), step(state) timed.
        if phase.startswith("prefill"):
            setup: Callable[[], Any] = lambda: None  # noqa: E731
            step: Callable[[Any], Any] = lambda _: model(prompt, logits_to_keep=1, use_cache=False)  # noqa: E731
        else:
            prefix = torch.randint(0, vocab, (batch, 128), generator=gen, device="cuda")
            with torch.no_grad():
                use("grouped_mm")
                cache = model(prefix, use_cache=True).past_key_values
            nxt = torch.randint(0, vocab, (batch, 1), generator=gen, device="cuda")
            setup = lambda cache=cache: copy.deepcopy(cache)  # noqa: E731
            step = lambda state, nxt=nxt: model(nxt, past_key_values=state, use_cache=True)  # noqa: E731
        tokens = batch if phase.startswith("decode") else 4096
        # Implementations alternate per round: each round sets one up, times it, moves to the next.
        samples: dict[str, list[float]] = {impl: [] for impl in impls}
        runnable = [i for i in impls if i != "batched_mm" or batched_mm_fits(tokens, shape)]
        rounds = 5 if phase.startswith("prefill") else 7
        for r in range(rounds + 1):
            for impl in runnable:
                use(impl)
                with torch.no_grad():
                    step(setup())  # warm (first round: compiles Triton kernels)
                    state = setup()
                    torch.cuda.synchronize()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    step(state)
                    end.record()
                    end.synchronize()
                if r:
                    samples[impl].append(start.elapsed_time(end))
        medians = {impl: statistics.median(v) for impl, v in samples.items() if v}
        plain = {k: v for k, v in medians.items() if k != "kcatalog"}
        best = min(plain, key=plain.__getitem__)
        row = dict(shape=shape.name, layers=layers, phase=phase, ms=medians, best_plain=best,
                   speedup_vs_default=medians["grouped_mm"] / medians["kcatalog"],
                   speedup_vs_best=plain[best] / medians["kcatalog"], mode="eager")  # fmt: skip
        rows.append(row)
        print(f"  model {shape.name} x{layers} {phase}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in medians.items())
              + f"; kernelized {row['speedup_vs_default']:.2f}x default, {row['speedup_vs_best']:.2f}x best ({best})",
              flush=True)  # fmt: skip
        if args.compile and phase.startswith("decode"):
            compiled_decode(model, lambda: step(setup()), use, shape, layers, phase, rows)  # noqa: B023
    kcatalog.unkernelize(model)


def compiled_decode(model: Any, step: Callable[[], Any], use: Callable[[str], None], shape: Shape, layers: int,
                    phase: str, rows: list[dict[str, Any]]) -> None:  # fmt: skip
    """torch.compile'd forward of plain default and kernelized (one decode step): medians of 7."""
    medians = {}
    forward = model.forward
    for impl in ("grouped_mm", "kcatalog"):
        use(impl)
        torch._dynamo.reset()
        model.forward = torch.compile(forward)
        times = []
        with torch.no_grad():
            for i in range(9):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                if i >= 2:
                    times.append((time.perf_counter() - t0) * 1e3)
        medians[impl] = statistics.median(times)
        model.forward = forward
    rows.append(dict(shape=shape.name, layers=layers, phase=phase, ms=medians, mode="compiled",
                     speedup_vs_default=medians["grouped_mm"] / medians["kcatalog"]))  # fmt: skip
    print(f"  compiled {shape.name} {phase}: {medians}", flush=True)


def summary(results: dict[str, Any]) -> str:
    lines = ["# moe.fused_experts on " + results["device"], "", f"versions: {results['versions']}", ""]
    lines += ["## correctness (bf16 vs float32 reference)", ""]
    bad = [r for r in results.get("check", []) if not r["ok"]]
    lines.append(f"{len(results.get('check', []))} checks, {len(bad)} failed" + "".join(f"\n- FAIL {r}" for r in bad))
    lines += ["", "## the op alone (median ms; fraction of a dense bf16 GEMM of the same FLOPs)", ""]
    lines.append("| shape | T | backend | ms | TFLOP/s | of dense |")
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for r in results.get("op", []):
        lines.append(f"| {r['shape']} | {r['tokens']} | {r['backend']} | {r['ms']:.3f} | {r['tflops']:.0f} | "
                     f"{r['fraction_of_dense']:.2f} |")  # fmt: skip
    if results.get("op_graph"):
        lines += ["", "## the op alone, CUDA-graph replay against eager (median ms per call)", ""]
        lines.append("| shape | T | backend | graph ms | eager ms |")
        lines.append("| --- | --- | --- | --- | --- |")
        for r in results["op_graph"]:
            lines.append(
                f"| {r['shape']} | {r['tokens']} | {r['backend']} | {r['graph_ms']:.3f} | {r['eager_ms']:.3f} |"
            )
        for r in results.get("op_graph_skipped", []):
            lines.append(f"- not captured: {r['shape']} T={r['tokens']} {r['backend']}: {r['reason']}")
    for r in results.get("align", []):
        times = ", ".join(f"{n} {r['graph_ms'].get(n, float('nan')):.4f}/{ms:.4f}" for n, ms in r["eager_ms"].items())
        lines.append(f"- align {r['shape']} T={r['tokens']} (ms, graph/eager): {times}; same: {r['same']}")
    lines += ["", "## whole models (median ms per forward)", ""]
    for r in results.get("model", []):
        times = ", ".join(f"{k} {v:.2f}" for k, v in r["ms"].items())
        best = f", {r['speedup_vs_best']:.2f}x best plain ({r['best_plain']})" if "best_plain" in r else ""
        lines.append(f"- {r['shape']} x{r['layers']} layers {r['phase']} ({r['mode']}): {times}; "
                     f"kernelized {r['speedup_vs_default']:.2f}x default{best}")  # fmt: skip
    lines += ["", "## logits vs a float32 copy of the model (last 128 of 512 positions)", ""]
    for r in results.get("model_logits", []):
        lines.append(f"- {r['shape']} {r['impl']}: {r['rel_err_vs_fp32']:.3e}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory for moe_gpu.json and moe_gpu.md")
    parser.add_argument("--qwen-layers", type=int, default=12)
    parser.add_argument("--mixtral-layers", type=int, default=6)
    parser.add_argument("--skip-models", action="store_true")
    parser.add_argument("--op-only", action="store_true", help="only the op alone, eager and in CUDA graphs")
    parser.add_argument("--compile", action="store_true", help="also torch.compile'd decode (adds minutes)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    import transformers
    import triton

    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "versions": dict(torch=torch.__version__, triton=triton.__version__, transformers=transformers.__version__),
        "shapes": [asdict(s) for s in SHAPES],
        "layers": {"qwen3_30b_a3b": args.qwen_layers, "mixtral_8x7b": args.mixtral_layers},
    }
    began = time.perf_counter()
    catalog = kcatalog.load_catalog()
    names = backends(catalog)
    results["backends"] = names
    print(f"backends: {', '.join(names)}", flush=True)
    stages: list[tuple[str, Callable[[], None]]] = [
        ("check", lambda: check(catalog, names, results)),
        ("op", lambda: time_op(catalog, names, results)),
    ]
    if args.op_only:
        stages[1] = ("op", lambda: time_op(catalog, names, results, graphs=True))
    elif not args.skip_models:
        stages.append(("models", lambda: whole_models(args, results)))
    for stage, run in stages:
        t0 = time.perf_counter()
        try:
            run()
        except Exception as exc:  # keep what the other stages measured
            results.setdefault("errors", {})[stage] = f"{type(exc).__name__}: {exc}"
            print(f"error in {stage}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        results.setdefault("seconds", {})[stage] = round(time.perf_counter() - t0, 1)
        (args.out / "moe_gpu.json").write_text(json.dumps(results, indent=1))
        (args.out / "moe_gpu.md").write_text(summary(results))
    print(f"done in {time.perf_counter() - began:.0f} s; wrote {args.out}/moe_gpu.json and moe_gpu.md", flush=True)
    bad_align = any(not r["same"] for r in results.get("align", []))
    return 1 if results.get("errors") or bad_align or any(not r["ok"] for r in results.get("check", [])) else 0


if __name__ == "__main__":
    raise SystemExit(main())
