"""On a GPU: a full training step of a transformers Llama-3.1-8B-shaped model (random weights, bf16) three ways, in
one process: plain transformers, kcatalog.kernelize(model, mode="training") (its RMSNorms, SwiGLU, RoPE, residual
add + RMSNorm and the LM head's fused linear cross-entropy through catalog ops with backward ops), and Liger-Kernel
(apply_liger_kernel_to_llama(rope, rms_norm, swiglu, fused_linear_cross_entropy) on its own model instance).

The model: LlamaForCausalLM, hidden 4096, intermediate 14336, 32 query / 8 KV heads (head dim 128), vocabulary
128256, untied LM head, SDPA attention, `--layers` decoder layers (default 8). All three variants are resident at
once (so that they can take turns): each holds its bf16 weights and AdamW's two bf16 moments, about 1.75 GB per
layer plus 8.4 GB for the embedding and the LM head, and the step running adds its gradients and activations
(about 0.8 GB per layer at 4096 tokens, and the logits for plain), and the first step's check holds plain's
gradients beside another's: 8 layers peak at about 75 GB, 16 (estimated) at about 120 GB of the H200's 141 GB.

The step: forward with labels (batch 1, sequence `--seq`, default 4096; labels = the input ids, shifted inside),
backward, AdamW step (fused), zero_grad. The variants take turns `--rounds` times (warmup steps in the first
round); each step is timed by CUDA events, and a variant's time is the median of all its timed steps. Memory: the
peak allocated during a variant's timed steps over what was allocated before them (its gradients, activations and
transients: weights and optimizer states, the same for all three, are reported apart), max_memory_allocated
reset per variant.

Checked first, on the same weights and tokens: each variant's first loss and every parameter's gradient against
plain transformers' (relative error, bf16); the kcatalog report (every norm, MLP, attention's RoPE, decoder layer
and the LM head replaced, and by which backends, forward and backward).

Then each op's forward + backward at the model's shapes (4096 tokens): RMSNorm [4096, 4096], SwiGLU (kcatalog's
silu_and_mul on [4096, 2 * 14336]; Liger's on the two halves), RoPE (q [1, 32, 4096, 128] and k [1, 8, 4096, 128]
as the projections' transposes, as transformers hands them), fused linear cross-entropy ([4096, 4096] against the
[128256, 4096] LM head): kcatalog's registered torch op (its autograd: the backward op), Liger's function, and
torch.compile of the plain torch code; triton.testing.do_bench medians, and each one's error against float32.

Run: python benchmarks/training_gpu.py OUT [--layers N]     (--smoke: a tiny model on the CPU, no timing targets)
Writes OUT/training_h200.json (as it goes) and OUT/training_h200.md (the tables), and prints the summary.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import kcatalog
from kcatalog.integrations.kernelize import default_catalog

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelize_gpu import Bench, LigerPatch, relative_error  # noqa: E402
from kernelize_gpu import build as build_eval  # noqa: E402

RMS_NORM, SILU_AND_MUL = "layernorm.rms_norm", "activation.silu_and_mul"
APPLY_ROTARY, FLCE = "attention.apply_rotary", "loss.fused_linear_cross_entropy"
OPS = (RMS_NORM, SILU_AND_MUL, APPLY_ROTARY, FLCE)
NAME = "training_h200"


class Results(Bench):
    """kernelize_gpu's Bench, written to OUT/training_h200.json."""

    def __init__(self, out: Path, budget_s: float) -> None:
        super().__init__(out, budget_s)
        self.data = {"env": {}, "checks": {}, "steps": {}, "ops": {}, "notes": []}

    def save(self) -> None:
        import json

        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"{NAME}.json").write_text(json.dumps(self.data, indent=1, default=str))


# ---------------------------------------------------------------- the model and its step


def llama_config(args: argparse.Namespace) -> Any:
    from transformers import LlamaConfig

    if args.smoke:
        sizes = dict(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
        )
    else:
        sizes = dict(
            vocab_size=128256,
            hidden_size=4096,
            intermediate_size=14336,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
        )
    return LlamaConfig(
        **sizes,
        num_hidden_layers=args.layers,
        max_position_embeddings=max(8192, args.seq),
        rope_theta=500000.0,
        hidden_act="silu",
        attn_implementation="sdpa",
        tie_word_embeddings=False,
    )


def build(config: Any, device: str, dtype: torch.dtype, state: dict[str, torch.Tensor] | None) -> Any:
    """kernelize_gpu's model (the same seed, norm weights and state), in training mode."""
    return build_eval(config, device, dtype, state).train()


def optimizer(model: Any, device: str) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0, fused=device == "cuda")


def step(model: Any, opt: torch.optim.Optimizer, ids: torch.Tensor) -> torch.Tensor:
    """One full training step; returns the loss (not synchronised)."""
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def resting_bytes(model: Any, opt: torch.optim.Optimizer) -> int:
    tensors = list(model.parameters()) + [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    return sum(t.numel() * t.element_size() for t in tensors)


class Variant:
    """A model with its optimizer, and what it runs inside (Liger's module-level patch)."""

    def __init__(self, name: str, model: Any, device: str, scope: Callable[[], Any] = contextlib.nullcontext) -> None:
        self.name, self.model, self.scope = name, model, scope
        self.opt = optimizer(model, device)
        self.times_ms: list[float] = []


def build_variants(bench: Results, config: Any, device: str, dtype: torch.dtype) -> list[Variant]:
    plain = build(config, device, dtype, None)
    state = {key: value.clone() for key, value in plain.state_dict().items()}
    variants = [Variant("plain", plain, device)]
    kernelized = build(config, device, dtype, state)
    report = kcatalog.kernelize(kernelized, mode="training")
    bench.data["checks"]["kcatalog_report"] = str(report)
    bench.data["checks"]["kcatalog_replaced"] = len(report.replaced)
    bench.data["checks"]["kcatalog_left"] = [f"{left.module}: {left.reason}" for left in report.left]
    variants.append(Variant("kcatalog", kernelized, device))
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        from transformers.models.llama import modeling_llama

        liger = build(config, device, dtype, state)
        before = dict(vars(modeling_llama))
        apply_liger_kernel_to_llama(
            rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=True, model=liger
        )
        patch = LigerPatch(modeling_llama, before)  # its RoPE is the module's global: set only while Liger runs
        bench.data["checks"]["liger_patched_globals"] = sorted(patch.after)
        variants.append(Variant("liger", liger, device, patch.applied))
    except Exception as exc:
        bench.note(f"liger: {type(exc).__name__}: {exc}")
        traceback.print_exc()
    del state
    return variants


def check_first_step(bench: Results, variants: list[Variant], ids: torch.Tensor) -> list[Variant]:
    """Each variant's first loss and every parameter's gradient against plain's, on the same weights and tokens
    (before any optimizer step); returns the variants that ran (a failing one is noted and left out)."""
    ref: dict[str, torch.Tensor] = {}
    ran = []
    for variant in variants:
        try:
            with variant.scope():
                loss = variant.model(input_ids=ids, labels=ids).loss
                loss.backward()
        except Exception as exc:
            bench.note(f"{variant.name} first step: {type(exc).__name__}: {str(exc)[:300]}")
            traceback.print_exc()
            variant.opt.zero_grad(set_to_none=True)
            continue
        ran.append(variant)
        checks = bench.data["checks"]
        checks[f"{variant.name}_first_loss"] = float(loss.detach())
        grads = {n: p.grad for n, p in variant.model.named_parameters() if p.grad is not None}
        if variant.name == "plain":
            ref = grads  # kept until the others are compared (one more set of gradients in memory)
            continue
        errors = {n: relative_error(g.float(), ref[n].float()) for n, g in grads.items() if n in ref}
        worst = max(errors, key=errors.__getitem__) if errors else None
        checks[f"{variant.name}_grads"] = {
            "params": len(errors),
            "missing": sorted(set(ref) - set(errors)),
            "max_rel_err": errors.get(worst) if worst else None,
            "worst": worst,
            "median_rel_err": statistics.median(errors.values()) if errors else None,
        }
        checks[f"{variant.name}_loss_rel_err"] = abs(float(loss.detach()) - checks["plain_first_loss"]) / abs(
            checks["plain_first_loss"]
        )
        del grads
        variant.opt.zero_grad(set_to_none=True)
        bench.save()
    del ref
    variants[0].opt.zero_grad(set_to_none=True)
    return ran


def measure_steps(
    bench: Results, variants: list[Variant], ids: torch.Tensor, args: argparse.Namespace, device: str
) -> None:
    cuda = device == "cuda"
    for number in range(args.rounds):
        for variant in variants:
            try:
                with variant.scope():
                    for _ in range(args.warmup if number == 0 else 1):
                        step(variant.model, variant.opt, ids)
                    if cuda:
                        torch.cuda.synchronize()
                        before = torch.cuda.memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                    for _ in range(args.steps):
                        if cuda:
                            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            start.record()
                            step(variant.model, variant.opt, ids)
                            end.record()
                            end.synchronize()
                            variant.times_ms.append(start.elapsed_time(end))
                        else:
                            began = time.perf_counter()
                            step(variant.model, variant.opt, ids)
                            variant.times_ms.append((time.perf_counter() - began) * 1e3)
                entry = bench.data["steps"].setdefault(variant.name, {})
                entry["step_ms"] = statistics.median(variant.times_ms)
                entry["steps_timed"] = len(variant.times_ms)
                entry["tokens_per_s"] = ids.numel() / entry["step_ms"] * 1e3
                entry["resting_gib"] = resting_bytes(variant.model, variant.opt) / 2**30
                if cuda:
                    peak = (torch.cuda.max_memory_allocated() - before) / 2**30
                    entry["step_peak_gib"] = max(peak, entry.get("step_peak_gib", 0.0))
            except Exception as exc:  # one variant's failure must not lose the others' figures
                bench.note(f"{variant.name} step: {type(exc).__name__}: {str(exc)[:300]}")
                traceback.print_exc()
            bench.save()
            print(
                f"round {number} {variant.name:9s} {statistics.median(variant.times_ms or [0.0]):9.2f} ms",
                flush=True,
            )


# ---------------------------------------------------------------- each op's forward + backward


def rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm's forward."""
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(variance + eps)).to(x.dtype)


def swiglu_torch(y: torch.Tensor) -> torch.Tensor:
    gate, up = y.chunk(2, dim=-1)
    return F.silu(gate) * up


def flce_torch(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(F.linear(x, weight).float(), target)


class OpCase:
    """One op at the model's shapes: leaf inputs (those with gradients), how each implementation computes its
    outputs from them, and the output gradients the backward is fed. An implementation that takes its inputs in
    another layout (Liger's SwiGLU: gate and up apart, as its two GEMMs make them) has leaves of its own, with the
    same values, and says how their gradients read as the shared leaves' (`own`)."""

    def __init__(
        self,
        name: str,
        leaves: dict[str, torch.Tensor],
        grads: tuple[torch.Tensor, ...] | None,
        impls: dict[str, Callable[..., Any]],
        own: dict[str, tuple[dict[str, torch.Tensor], Callable[[], list[torch.Tensor]]]] | None = None,
    ) -> None:
        self.name, self.leaves, self.grads, self.impls, self.own = name, leaves, grads, impls, own or {}

    def leaves_of(self, impl: str) -> dict[str, torch.Tensor]:
        return self.own[impl][0] if impl in self.own else self.leaves

    def grads_of(self, impl: str) -> list[torch.Tensor]:
        return self.own[impl][1]() if impl in self.own else [leaf.grad for leaf in self.leaves.values()]

    def run(self, impl: str) -> tuple[torch.Tensor, ...]:
        out = self.impls[impl](**self.leaves_of(impl))
        outs = out if isinstance(out, tuple) else (out,)
        if self.grads is None:  # a loss
            outs[0].backward()
        else:
            torch.autograd.backward(outs, self.grads)
        return outs


def op_cases(config: Any, seq: int, device: str, dtype: torch.dtype, ops: dict[str, Any]) -> list[OpCase]:
    g = torch.Generator(device="cpu").manual_seed(3)

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * scale).to(device, dtype)

    hidden, inter, heads, kv, dim = (
        config.hidden_size,
        config.intermediate_size,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
    )
    eps = config.rms_norm_eps
    try:
        from liger_kernel.transformers.functional import (
            liger_fused_linear_cross_entropy,
            liger_rms_norm,
            liger_rope,
            liger_swiglu,
        )
    except Exception:
        liger_fused_linear_cross_entropy = liger_rms_norm = liger_rope = liger_swiglu = None
    cases = []
    impls: dict[str, Callable[..., Any]] = {
        "kcatalog": lambda x, w: ops[RMS_NORM](x, w, eps),
        "torch": lambda x, w: rms_norm_torch(x, w, eps),
    }
    if liger_rms_norm is not None:
        impls["liger"] = lambda x, w: liger_rms_norm(x, w, eps)
    cases.append(
        OpCase("rms_norm", {"x": rand(seq, hidden), "w": rand(hidden, scale=0.1) + 1}, (rand(seq, hidden),), impls)
    )
    impls = {"kcatalog": lambda y: ops[SILU_AND_MUL](y), "torch": swiglu_torch}
    y = rand(seq, 2 * inter)
    own = {}
    if liger_swiglu is not None:  # Liger's takes gate and up apart, as its MLP's two GEMMs make them
        impls["liger"] = liger_swiglu
        gate, up = (half.contiguous().requires_grad_(True) for half in y.chunk(2, dim=-1))
        own["liger"] = ({"a": gate, "b": up}, lambda: [torch.cat((gate.grad, up.grad), dim=-1)])
    cases.append(OpCase("swiglu", {"y": y}, (rand(seq, inter),), impls, own))
    positions = torch.arange(seq, dtype=torch.float32)
    freqs = positions[:, None] / (500000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))[None]
    angles = torch.cat((freqs, freqs), dim=-1)[None]
    cos, sin = angles.cos().to(device, dtype), angles.sin().to(device, dtype)

    def as_heads(fn: Callable[..., Any]) -> Callable[..., Any]:  # q and k as transposes of the projections
        return lambda q, k: fn(
            q.view(1, seq, heads, dim).transpose(1, 2), k.view(1, seq, kv, dim).transpose(1, 2), cos, sin
        )

    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    impls = {
        "kcatalog": as_heads(lambda q, k, c, s: ops[APPLY_ROTARY](q, k, c, s)),
        "torch": as_heads(apply_rotary_pos_emb),
    }
    if liger_rope is not None:
        impls["liger"] = as_heads(liger_rope)
    cases.append(
        OpCase(
            "rope",
            {"q": rand(seq, heads * dim), "k": rand(seq, kv * dim)},
            (rand(1, heads, seq, dim), rand(1, kv, seq, dim)),
            impls,
        )
    )
    target = torch.randint(0, config.vocab_size, (seq,), generator=g).to(device)
    impls = {"kcatalog": lambda x, w: ops[FLCE](x, w, target, -100)[0], "torch": lambda x, w: flce_torch(x, w, target)}
    if liger_fused_linear_cross_entropy is not None:
        impls["liger"] = lambda x, w: liger_fused_linear_cross_entropy(x, w, target)
    cases.append(
        OpCase(
            "fused_linear_cross_entropy",
            {"x": rand(seq, hidden), "w": rand(config.vocab_size, hidden, scale=0.02)},
            None,
            impls,
        )
    )
    for case, op in zip(cases, OPS):
        if op not in ops:  # not in this catalog (an older kcatalog): the others still run
            del case.impls["kcatalog"]
        for leaf in case.leaves.values():
            leaf.requires_grad_(True)
    return cases


def kernel_ms(run: Callable[[], Any], leaves: list[torch.Tensor], repeats: int = 5) -> float:
    """GPU time of the kernels one call launches (torch.profiler, the median of `repeats` calls): the time left once
    the host's share, which do_bench's wall time between events includes for calls this short, is taken out."""
    per_call = []
    for _ in range(repeats):
        for leaf in leaves:
            leaf.grad = None
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        per_call.append(
            sum(e.device_time_total for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3
        )
    return statistics.median(per_call)


def measure_ops(bench: Results, cases: list[OpCase], device: str, args: argparse.Namespace) -> None:
    """Each implementation's outputs and gradients against float32 eager torch, then its forward + backward time."""
    cuda = device == "cuda"
    for case in cases:
        entry = bench.data["ops"].setdefault(case.name, {"ms": {}, "rel_err": {}})
        reference = {name: leaf.detach().float().requires_grad_(True) for name, leaf in case.leaves.items()}
        ref_case = OpCase(
            case.name, reference, None if case.grads is None else tuple(t.float() for t in case.grads), case.impls
        )
        ref_outs = [o.detach() for o in ref_case.run("torch")]
        ref_grads = [leaf.grad for leaf in reference.values()]
        if cuda and not args.no_compile:
            case.impls["torch_compile"] = torch.compile(case.impls["torch"])
        # Liger's last: its RMSNorm and RoPE backwards write into the output gradients they are given
        for impl_name in sorted(case.impls, key=lambda name: name == "liger"):
            if bench.left() < 30:
                bench.note(f"ops: out of time before {case.name} {impl_name}")
                return
            try:
                leaves = list(case.leaves_of(impl_name).values())
                for leaf in leaves:
                    leaf.grad = None
                outs = case.run(impl_name)
                errors = [relative_error(o.detach().float(), r) for o, r in zip(outs, ref_outs)]
                errors += [relative_error(g.float(), r) for g, r in zip(case.grads_of(impl_name), ref_grads)]
                entry["rel_err"][impl_name] = max(errors)
                if cuda:
                    import triton.testing

                    entry["ms"][impl_name] = float(
                        triton.testing.do_bench(
                            lambda case=case, impl=impl_name: case.run(impl),
                            warmup=25,
                            rep=100,
                            grad_to_none=leaves,
                            return_mode="median",
                        )
                    )
                    entry.setdefault("kernel_ms", {})[impl_name] = kernel_ms(
                        lambda case=case, impl=impl_name: case.run(impl), leaves
                    )
                else:
                    began = time.perf_counter()
                    case.run(impl_name)
                    entry["ms"][impl_name] = (time.perf_counter() - began) * 1e3
            except Exception as exc:
                bench.note(f"op {case.name} {impl_name}: {type(exc).__name__}: {str(exc)[:300]}")
                traceback.print_exc()
            bench.save()
            print(f"op {case.name:28s} {impl_name:14s} {entry['ms'].get(impl_name, float('nan')):9.3f} ms", flush=True)


# ---------------------------------------------------------------- the run and its tables


def environment(bench: Results, args: argparse.Namespace, device: str) -> None:
    import transformers

    env = bench.data["env"]
    env.update(
        torch=torch.__version__,
        transformers=transformers.__version__,
        python=platform.python_version(),
        device=torch.cuda.get_device_name() if device == "cuda" else "cpu",
        layers=args.layers,
        seq=args.seq,
        commit=os.environ.get("KCATALOG_COMMIT", ""),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        rounds=args.rounds,
        warmup=args.warmup,
        steps=args.steps,
    )
    for package in ("triton", "liger_kernel"):
        try:
            from importlib.metadata import version

            env[package] = version(package)
        except Exception as exc:
            env[package] = f"not installed: {exc}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    bench = Results(Path(args.out), args.budget_s)
    environment(bench, args, device)
    config = llama_config(args)
    ids = torch.randint(0, config.vocab_size, (1, args.seq), generator=torch.Generator().manual_seed(1)).to(device)
    variants = build_variants(bench, config, device, dtype)
    catalog = default_catalog()
    platform_here = catalog.platform(device)
    chosen = {}
    present = [op for op in OPS if op in catalog]
    if len(present) < len(OPS):
        bench.note(f"ops not in the catalog: {', '.join(op for op in OPS if op not in present)}")
    for op in present:
        info = catalog.info(op)
        backward = info.backward.op if info.backward is not None else None
        pick = lambda name: catalog.select(name, platform_here, str(dtype).split(".")[-1]).chosen  # noqa: E731
        chosen[op] = {
            "forward": getattr(pick(op), "backend", None),
            "backward": backward,
            "backward_backend": getattr(pick(backward), "backend", None) if backward else None,
        }
    bench.data["checks"]["backends"] = chosen
    if device == "cuda":
        bench.data["env"]["resting_gib_all_variants"] = torch.cuda.memory_allocated() / 2**30
    variants = check_first_step(bench, variants, ids)
    measure_steps(bench, variants, ids, args, device)
    ops = catalog.register_torch_ops("kcatalog_training_bench", ops=present)  # its own: whatever holds "kcatalog"
    del variants
    if device == "cuda":
        torch.cuda.empty_cache()
    measure_ops(bench, op_cases(config, args.seq, device, dtype, dict(ops)), device, args)
    bench.data["wall_s"] = round(time.monotonic() - bench.start, 1)
    bench.save()
    return bench.data


def table(data: dict[str, Any]) -> str:
    env, steps, ops, checks = data["env"], data["steps"], data["ops"], data["checks"]
    lines = [
        f"# Training step: Llama-3.1-8B shapes, {env.get('layers')} layers, seq {env.get('seq')}, batch 1",
        "",
        f"{env.get('device')}; torch {env.get('torch')}, triton {env.get('triton')}, transformers "
        f"{env.get('transformers')}, liger_kernel {env.get('liger_kernel')}; {env.get('date')}",
        "",
        "| variant | step ms | tokens/s | step peak GiB | resting GiB | plain / it | liger / it |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    plain, liger = steps.get("plain", {}).get("step_ms"), steps.get("liger", {}).get("step_ms")
    for name, entry in steps.items():
        ms = entry.get("step_ms")
        ratio = lambda ref, ms=ms: f"{ref / ms:.3f}" if ref and ms else "-"  # noqa: E731
        lines.append(
            f"| {name} | {ms:.2f} | {entry.get('tokens_per_s', 0):.0f} | {entry.get('step_peak_gib', 0.0):.2f} "
            f"| {entry.get('resting_gib', 0):.2f} | {ratio(plain)} | {ratio(liger)} |"
        )
    lines += [
        "",
        "Op forward + backward at the model's shapes (ms, median; max relative error of outputs and "
        "gradients against float32 torch in brackets):",
        "",
        "| op | kcatalog | liger | torch_compile | torch | liger / kcatalog | compile / kcatalog |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, entry in ops.items():
        ms, err = entry["ms"], entry["rel_err"]
        cell = lambda impl, ms=ms, err=err: f"{ms[impl]:.3f} ({err.get(impl, float('nan')):.1e})" if impl in ms else "-"  # noqa: E731
        ratio = lambda impl, ms=ms: f"{ms[impl] / ms['kcatalog']:.3f}" if impl in ms and ms.get("kcatalog") else "-"  # noqa: E731
        lines.append(
            f"| {name} | {cell('kcatalog')} | {cell('liger')} | {cell('torch_compile')} | {cell('torch')} "
            f"| {ratio('liger')} | {ratio('torch_compile')} |"
        )
    lines += [
        "",
        "The same calls' GPU kernel time alone (ms, torch.profiler, median of 5): do_bench's time above includes the "
        "host's where a call launches faster than the host issues it.",
        "",
        "| op | kcatalog | liger | torch_compile | torch | liger / kcatalog | compile / kcatalog |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, entry in ops.items():
        ks = entry.get("kernel_ms", {})
        cell = lambda impl, ks=ks: f"{ks[impl]:.3f}" if impl in ks else "-"  # noqa: E731
        ratio = lambda impl, ks=ks: f"{ks[impl] / ks['kcatalog']:.3f}" if impl in ks and ks.get("kcatalog") else "-"  # noqa: E731
        lines.append(
            f"| {name} | {cell('kcatalog')} | {cell('liger')} | {cell('torch_compile')} | {cell('torch')} "
            f"| {ratio('liger')} | {ratio('torch_compile')} |"
        )
    lines += ["", "Checks:", ""]
    lines += [f"- {key}: {value}" for key, value in checks.items() if key != "kcatalog_report"]
    lines += ["", "kcatalog report:", "", "```", str(checks.get("kcatalog_report", "")), "```"]
    lines += [f"- note: {note}" for note in data.get("notes", [])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="results folder")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3, help="the variants take turns this many times")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant per round")
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile column in the op table")
    parser.add_argument("--smoke", action="store_true", help="a tiny model on the CPU: a smoke test, no timings")
    parser.add_argument("--budget-s", type=float, default=420.0, help="skip the remaining op timings past this")
    args = parser.parse_args(argv)
    if args.smoke:
        args.layers, args.seq, args.rounds, args.warmup, args.steps = min(args.layers, 2), min(args.seq, 32), 1, 1, 1
    data = run(args)
    text = table(data)
    (Path(args.out) / f"{NAME}.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
