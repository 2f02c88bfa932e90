"""On a GPU: a transformers Llama-3-8B-shaped model (random weights, bf16) three ways, side by side in one process:
plain transformers, kcatalog.kernelize(model), and Liger-Kernel's apply_liger_kernel_to_llama; each eager and under
torch.compile.

The model: LlamaForCausalLM with hidden 4096, intermediate 14336, 32 query / 8 KV heads (head dim 128), vocabulary
128256, `--layers` decoder layers (default 4: the phases' times are per layer plus the embedding and the LM head,
and 32 layers would not compile three times within the device time). SDPA attention, a StaticCache.

Phases: prefill of 4096 tokens (batch 1, logits of the last token only, as generate computes them), and one decode
step at batch 1, 16 and 64 at position 1024 of a 2048-token static cache. Eager: each call timed as it runs. Compiled:
prefill with torch.compile(mode="default"), decode with mode="reduce-overhead" (CUDA graphs), fullgraph=True where
it traces whole (else fullgraph=False, recorded). Medians of triton.testing.do_bench (ms); compile times.

Checked first: each variant's prefill logits against plain transformers (relative error, bf16), and the kcatalog
report (every RMSNorm, MLP and attention layer replaced). Profiled (eager, one prefill and one decode step at batch
16): GPU time of the kernels launched inside the replaced parts (the RMSNorms whole, the MLPs less their GEMMs, and
each apply_rotary_pos_emb call: transformers' own, Liger's, or kcatalog's attention.rotary_embedding with the cos/sin
rows it builds), and its share of the timed step. Liger patches RoPE as the modeling module's global (for every
model in the process); kcatalog's attention layers run a copy of their class's forward whose global is its own.

Liger patches transformers' modeling_llama for the whole process (its RoPE function, its norm and MLP classes):
the patch is applied while the Liger model is built and while it runs, and undone otherwise, so that plain and
kcatalog run transformers' own code. Eager steps are partly bound by the host, whose speed drifts over a run: the
three variants take turns, `--rounds` times (default 3), and each time is the median of its rounds.

Run: python benchmarks/kernelize_gpu.py --out DIR     (--quick: a tiny model on any device, a smoke test)
Writes DIR/kernelize_gpu.json (as it goes) and DIR/kernelize_gpu.txt (the table); the current H200 figures are
benchmarks/results/kernelize_h200.{json,txt}, discussed in kernelize_h200.md.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import platform
import re
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import kcatalog

GEMM = re.compile(r"gemm|sm90_|sm80_|cutlass|nvjet|xmma|cublas|matmul|splitk|addmm|_mm_|bmm", re.IGNORECASE)


class Bench:
    """Results collected as they come, written after each step so that a cut-off run still returns them."""

    def __init__(self, out: Path, budget_s: float) -> None:
        self.out = out
        self.start = time.monotonic()
        self.budget_s = budget_s
        self.data: dict[str, Any] = {"env": {}, "checks": {}, "times_ms": {}, "compile_s": {}, "profile": {},
                                     "notes": []}  # fmt: skip

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "kernelize_gpu.json").write_text(json.dumps(self.data, indent=1, default=str))

    def note(self, text: str) -> None:
        print("note:", text, flush=True)
        self.data["notes"].append(text)
        self.save()


def llama_config(args: argparse.Namespace) -> Any:
    from transformers import LlamaConfig

    if args.quick:
        sizes = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=64)  # fmt: skip
    else:
        sizes = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128)  # fmt: skip
    return LlamaConfig(
        **sizes,
        num_hidden_layers=args.layers,
        max_position_embeddings=8192,
        rope_theta=500000.0,
        hidden_act="silu",
        attn_implementation="sdpa",
        tie_word_embeddings=False,
    )


def build(config: Any, device: str, dtype: torch.dtype, state: dict[str, torch.Tensor] | None) -> Any:
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    with torch.no_grad():
        if state is None:
            for name, param in model.named_parameters():
                if "norm" in name:
                    param.normal_(1.0, 0.1)  # not all ones: a norm's weight must matter
        else:
            model.load_state_dict(state)
    return model


def timer(device: str) -> Callable[[Callable[[], Any]], float]:
    if device == "cuda":
        import triton.testing

        def cuda_ms(fn: Callable[[], Any]) -> float:
            return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))

        return cuda_ms

    def cpu_ms(fn: Callable[[], Any]) -> float:
        fn()
        samples = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return statistics.median(samples)

    return cpu_ms


class Phases:
    """The inputs and static caches of each phase, shared by every variant (caches are per variant)."""

    def __init__(self, config: Any, args: argparse.Namespace, device: str) -> None:
        self.config, self.device = config, device
        self.prefill_len = args.prefill
        self.decode_pos = args.decode_pos
        self.cache_len = max(args.prefill, args.decode_pos) + 64
        g = torch.Generator().manual_seed(1)
        self.prefill_ids = torch.randint(0, config.vocab_size, (1, args.prefill), generator=g).to(device)
        self.decode_ids = {b: torch.randint(0, config.vocab_size, (b, 1), generator=g).to(device) for b in args.batches}
        self.ref32: dict[str, torch.Tensor] = {}  # each phase's logits from the float32 model (float32_logits)
        self.ref32_static_prefill: torch.Tensor | None = None

    def float32_logits(self, model32: Any, batches: list[int]) -> None:
        """Each phase's logits from the same weights in float32: what every variant's error is measured against."""
        with torch.no_grad():
            # Prefill without a cache (SDPA's causal path; the static cache's masked one, in float32 on the H200,
            # gave every bf16 variant a relative error of 1.24 at 4,096 tokens, against 0.02 at decode): the same
            # logits in exact arithmetic, since the cache holds nothing past the prompt. Both are recorded.
            self.ref32["prefill"] = model32(input_ids=self.prefill_ids, logits_to_keep=1).logits.float()
            self.ref32_static_prefill = self.prefill_fn(model32, model32)().float()
            for batch in batches:
                self.ref32[f"decode b={batch}"] = self.decode_fn(model32, model32, batch)().float()

    def prefill_fn(self, forward: Callable[..., Any], eager: Any) -> Callable[[], Any]:
        return self._step(forward, eager, self.prefill_ids, 0)

    def decode_fn(self, forward: Callable[..., Any], eager: Any, batch: int) -> Callable[[], Any]:
        return self._step(forward, eager, self.decode_ids[batch], self.decode_pos)

    def _step(self, forward: Callable[..., Any], eager: Any, ids: torch.Tensor, start: int) -> Callable[[], Any]:
        """One forward over `ids` written at positions start.. of a static cache, repeatable: the cache's write
        position is set back before each call (recent transformers keep it in the cache, older take
        cache_position). The cache is filled once by the eager model, so that its tensors get their static
        addresses outside any compiled region (CUDA graphs need them)."""
        from transformers import StaticCache

        cache = StaticCache(config=self.config, max_cache_len=self.cache_len)
        position = torch.arange(start, start + ids.shape[1], device=self.device)

        def step(model: Any = forward) -> Any:
            rewind(cache, start)
            return model(input_ids=ids, past_key_values=cache, cache_position=position, use_cache=True,
                         logits_to_keep=1).logits  # fmt: skip

        step(eager)
        return step


def rewind(cache: Any, position: int) -> None:
    """Set a StaticCache's write position (transformers >= 5.2x track it per layer) back to `position`."""
    for layer in getattr(cache, "layers", ()):
        length = getattr(layer, "cumulative_length", None)
        if isinstance(length, torch.Tensor):
            length.fill_(position)
        elif isinstance(length, int):
            layer.cumulative_length = position


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def hook_ranges(model: Any) -> list[Any]:
    """record_function ranges around each RMSNorm and MLP module (by class name: transformers', kcatalog's
    kernelized instances and Liger's classes alike), for the profiler; returns the hook handles."""
    handles = []
    for module in model.modules():
        name = type(module).__name__
        kind = "kc_norm" if name.endswith("RMSNorm") else "kc_mlp" if name.endswith("MLP") else None
        if kind is None:
            continue

        def pre(mod: Any, args: Any, kind: str = kind) -> None:
            mod._kc_range = torch.profiler.record_function(kind)
            mod._kc_range.__enter__()

        def post(mod: Any, args: Any, out: Any) -> None:
            mod._kc_range.__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    return handles


class GlobalPatch:
    """One global of a function's globals dict replaced until remove(), like a hook handle."""

    def __init__(self, scope: dict[str, Any], name: str, value: Any) -> None:
        self.scope, self.name, self.saved = scope, name, scope[name]
        scope[name] = value

    def remove(self) -> None:
        self.scope[self.name] = self.saved


def range_rope(model: Any) -> list[GlobalPatch]:
    """A record_function range around each apply_rotary_pos_emb call of the model's attention layers, wherever
    their forward looks it up: the modeling module's globals (transformers' function, or Liger's in its place) or
    the globals of kcatalog's copied forward (attention.rotary_embedding); returns the patches to remove."""
    scopes: dict[int, dict[str, Any]] = {}
    for module in model.modules():
        if type(module).__name__.endswith("Attention"):
            forward = vars(module).get("kcatalog_attention_forward", type(module).forward)
            scope = inspect.unwrap(forward).__globals__
            if "apply_rotary_pos_emb" in scope:
                scopes[id(scope)] = scope
    patches = []
    for scope in scopes.values():

        def ranged(*args: Any, rope: Any = scope["apply_rotary_pos_emb"], **kwargs: Any) -> Any:
            with torch.profiler.record_function("kc_rope"):
                return rope(*args, **kwargs)

        patches.append(GlobalPatch(scope, "apply_rotary_pos_emb", ranged))
    return patches


def profile_step(model: Any, step: Callable[[], Any]) -> dict[str, Any]:
    """GPU time of the kernels launched inside the replaced parts during one step (norms whole, MLPs less GEMMs,
    RoPE whole)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    handles: list[Any] = [*hook_ranges(model), *range_rope(model)]
    try:
        step()
        sync()
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
        with profile(activities=activities) as prof:
            step()
            sync()
    finally:
        for handle in handles:
            handle.remove()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        events = json.loads(Path(path).read_text())["traceEvents"]
    ranges = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
              if e.get("cat") == "user_annotation" and e.get("name") in ("kc_norm", "kc_mlp", "kc_rope")]  # fmt: skip
    # Triton kernels launch through the driver API (cuda_driver), ATen's through the runtime (cuda_runtime).
    launches = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}  # fmt: skip
    total = 0.0
    by: dict[str, float] = {"norm": 0.0, "mlp_non_gemm": 0.0, "rope": 0.0}
    names: dict[str, float] = {}
    # On the CPU (the smoke test) the aten ops stand in for kernels: each is its own launch.
    kernel_cat = "kernel" if cuda else "cpu_op"
    for e in events:
        if e.get("cat") != kernel_cat:
            continue
        dur = float(e["dur"])
        total += dur
        ts = launches.get(e.get("args", {}).get("correlation")) if cuda else e["ts"]
        inside = [kind for lo, hi, kind in ranges if ts is not None and lo <= ts <= hi]
        if "kc_norm" in inside:
            by["norm"] += dur
            names[e["name"][:60]] = names.get(e["name"][:60], 0.0) + dur
        elif "kc_rope" in inside:
            by["rope"] += dur
            names[e["name"][:60]] = names.get(e["name"][:60], 0.0) + dur
        elif "kc_mlp" in inside and not GEMM.search(e["name"]):
            by["mlp_non_gemm"] += dur
            names[e["name"][:60]] = names.get(e["name"][:60], 0.0) + dur
    return {"kernel_us_total": total, "replaced_us": sum(by.values()), "by_part_us": by,
            "replaced_kernels_us": dict(sorted(names.items(), key=lambda kv: -kv[1])[:8])}  # fmt: skip


def measure(bench: Bench, label: str, model: Any, phases: Phases, args: argparse.Namespace, ms: Callable[..., float],
            compiled: bool, first: bool = True) -> None:  # fmt: skip
    """Time every phase of one variant (eager or compiled), profiling the eager ones in their first round. Each
    eager round adds one time per phase (`rounds_ms`); the variant's time is their median."""
    key = f"{label}{' compiled' if compiled else ''}"
    times = bench.data["times_ms"].setdefault(key, {})
    rounds = bench.data.setdefault("rounds_ms", {}).setdefault(key, {})
    device = phases.device
    if compiled:
        if bench.left() < args.compile_reserve_s:
            bench.note(f"{key}: skipped, {bench.left():.0f} s of the budget left")
            return
        torch._dynamo.reset()
    with torch.no_grad():
        for phase in ["prefill", *[f"decode b={b}" for b in args.batches]]:
            try:
                forward = model
                if compiled and phase == "decode b=1":
                    torch._dynamo.reset()  # prefill's graphs apart: decode compiles static, then dynamic in batch
                if compiled:
                    mode = "default" if phase == "prefill" else ("reduce-overhead" if device == "cuda" else "default")
                    forward = compile_whole(bench, key, phase, model, mode)
                if phase == "prefill":
                    step = phases.prefill_fn(forward, model)
                else:
                    step = phases.decode_fn(forward, model, int(phase[9:]))
                if compiled:
                    start = time.monotonic()
                    try:
                        step()
                    except Exception as exc:  # a graph break under fullgraph=True: record it, compile in pieces
                        if not bench.data["fullgraph"].get(key):
                            raise
                        bench.note(f"{key} {phase}: fullgraph=True failed ({type(exc).__name__}: "
                                   f"{str(exc)[:300]}); compiled with fullgraph=False")  # fmt: skip
                        bench.data["fullgraph"][key] = False
                        torch._dynamo.reset()
                        forward = compile_whole(bench, key, phase, model, mode)
                        step = phases.prefill_fn(forward, model) if phase == "prefill" else phases.decode_fn(
                            forward, model, int(phase[9:]))  # fmt: skip
                    for _ in range(3):
                        step()
                    if device == "cuda":
                        torch.cuda.synchronize()
                    bench.data["compile_s"].setdefault(key, {})[phase] = round(time.monotonic() - start, 1)
                rounds.setdefault(phase, []).append(ms(step))
                times[phase] = statistics.median(rounds[phase])
                if first and phase in phases.ref32:  # logits against the float32 model's, at every phase
                    errors = bench.data.setdefault("rel_err_f32", {}).setdefault(key, {})
                    errors[phase] = relative_error(step().float(), phases.ref32[phase])
                if not compiled and first and phase in ("prefill", "decode b=16"):
                    prof = profile_step(model, step)
                    prof["share_of_step"] = prof["replaced_us"] / (times[phase] * 1e3)
                    bench.data["profile"].setdefault(key, {})[phase] = prof
            except Exception as exc:  # one variant's failure must not lose the others' figures
                bench.note(f"{key} {phase}: {type(exc).__name__}: {str(exc)[:300]}")
                traceback.print_exc()
            bench.save()
            print(f"{key:22s} {phase:12s} {times.get(phase, float('nan')):9.3f} ms", flush=True)


class LigerPatch:
    """What apply_liger_kernel_to_llama changed in transformers' modeling_llama (its RoPE function, its norm and
    MLP classes: for every model of the process), undone after building the Liger model and applied again only
    while the Liger model runs, so that plain transformers and kcatalog run transformers' own code."""

    def __init__(self, module: Any, before: dict[str, Any]) -> None:
        self.module = module
        self.before = {name: before.get(name) for name, value in vars(module).items() if before.get(name) is not value}
        self.after = {name: getattr(module, name) for name in self.before}
        self.set(self.before)

    def set(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            setattr(self.module, name, value)

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        self.set(self.after)
        try:
            yield
        finally:
            self.set(self.before)


def build_liger(bench: Bench, config: Any, device: str, dtype: torch.dtype, state: dict[str, torch.Tensor],
                phases: Phases, ref: torch.Tensor) -> tuple[Any, LigerPatch | None]:  # fmt: skip
    """The Liger model (Liger's patch applied while it is built, then undone), checked against plain's logits."""
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        from transformers.models.llama import modeling_llama

        before = dict(vars(modeling_llama))
        # the inference kernels: RoPE, RMSNorm, SwiGLU (the cross-entropy ones need labels, i.e. training)
        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=False)  # fmt: skip
        try:
            liger = build(config, device, dtype, state)
        finally:
            patch = LigerPatch(modeling_llama, before)
        bench.data["checks"]["liger_patched"] = sorted(patch.after)
        with torch.no_grad(), patch.applied():
            bench.data["checks"]["liger_prefill_rel_err"] = relative_error(
                phases.prefill_fn(liger, liger)().float(), ref
            )
        bench.data["checks"]["liger_classes"] = sorted({type(m).__name__ for m in liger.modules()})
        return liger, patch
    except Exception as exc:
        bench.note(f"liger: {type(exc).__name__}: {exc}")
        traceback.print_exc()
        return None, None


def compile_whole(bench: Bench, key: str, phase: str, model: Any, mode: str) -> Any:
    """torch.compile of the model, fullgraph=True when it traces whole (tried with explain on the first phase)."""
    fullgraph = bench.data.setdefault("fullgraph", {}).get(key)
    if fullgraph is None:
        fullgraph = True
        bench.data["fullgraph"][key] = True
    try:
        return torch.compile(model, mode=mode, fullgraph=fullgraph)
    except Exception as exc:  # pragma: no cover - compile is lazy; errors come at the first call
        bench.note(f"{key} {phase}: torch.compile raised {exc}")
        return model


def graph_breaks(model: Any, phases: Phases) -> Any:
    """torch._dynamo.explain of one prefill call: graphs and graph breaks."""
    from transformers import StaticCache

    torch._dynamo.reset()
    cache = StaticCache(config=phases.config, max_cache_len=phases.cache_len)
    ids = phases.prefill_ids[:, :16]
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(input_ids=ids, past_key_values=cache,
                                                 cache_position=torch.arange(16, device=phases.device),
                                                 use_cache=True, logits_to_keep=1)  # fmt: skip
    torch._dynamo.reset()
    return {"graphs": explained.graph_count, "graph_breaks": explained.graph_break_count,
            "reasons": [str(r.reason)[:200] for r in explained.break_reasons][:5]}  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    import transformers

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    bench = Bench(Path(args.out), args.budget_s)
    env = bench.data["env"]
    env.update(torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version(),
               device=torch.cuda.get_device_name() if device == "cuda" else "cpu", layers=args.layers,
               commit=os.environ.get("KCATALOG_COMMIT", ""), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               prefill=args.prefill, batches=args.batches, decode_pos=args.decode_pos)  # fmt: skip
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        from importlib.metadata import version

        import liger_kernel  # noqa: F401

        env["liger_kernel"] = version("liger_kernel")
    except Exception as exc:
        env["liger_kernel"] = f"not importable: {exc}"
    config = llama_config(args)
    phases = Phases(config, args, device)
    ms = timer(device)
    model = build(config, device, dtype, None)
    state = {key: value.clone() for key, value in model.state_dict().items()}
    model32 = build(config, device, torch.float32, {key: value.float() for key, value in state.items()})
    phases.float32_logits(model32, args.batches)
    bench.data["checks"]["float32_prefill_static_vs_no_cache"] = relative_error(
        phases.ref32_static_prefill, phases.ref32["prefill"]
    )
    with torch.no_grad():
        bench.data["checks"]["plain_prefill_vs_float32_static"] = relative_error(
            phases.prefill_fn(model, model)().float(), phases.ref32_static_prefill
        )
    del model32
    if device == "cuda":
        torch.cuda.empty_cache()
    with torch.no_grad():
        ref = phases.prefill_fn(model, model)().float()
    bench.save()

    liger, patch = build_liger(bench, config, device, dtype, state, phases, ref)
    report = kcatalog.kernelize(model)
    bench.data["checks"]["kcatalog_report"] = str(report)
    bench.data["checks"]["kcatalog_replaced"] = len(report.replaced)
    bench.data["checks"]["kcatalog_left"] = [str(left) for left in report.left]
    with torch.no_grad():
        bench.data["checks"]["kcatalog_prefill_rel_err"] = relative_error(
            phases.prefill_fn(model, model)().float(), ref
        )
    try:
        bench.data["checks"]["kcatalog_explain"] = graph_breaks(model, phases)
    except Exception as exc:
        bench.note(f"explain of the kernelized model: {type(exc).__name__}: {exc}")
    # Eager steps are partly bound by the host, whose speed drifts over a run: the three variants take turns,
    # --rounds times, each time with the process as it is then.
    for number in range(args.rounds):
        kcatalog.unkernelize(model)
        measure(bench, "plain", model, phases, args, ms, compiled=False, first=number == 0)
        kcatalog.kernelize(model)
        measure(bench, "kcatalog", model, phases, args, ms, compiled=False, first=number == 0)
        if liger is not None and patch is not None:
            with patch.applied():
                measure(bench, "liger", liger, phases, args, ms, compiled=False, first=number == 0)
    if not args.no_compile:
        kcatalog.unkernelize(model)
        measure(bench, "plain", model, phases, args, ms, compiled=True)
        kcatalog.kernelize(model)
        measure(bench, "kcatalog", model, phases, args, ms, compiled=True)
        if liger is not None and patch is not None:
            with patch.applied():
                measure(bench, "liger", liger, phases, args, ms, compiled=True)
    kcatalog.unkernelize(model)
    bench.data["wall_s"] = round(time.monotonic() - bench.start, 1)
    bench.save()
    return bench.data


def table(data: dict[str, Any]) -> str:
    """The times side by side, with kcatalog's ratios over plain and Liger (>1: kcatalog faster)."""
    times = data["times_ms"]
    phases = sorted({phase for t in times.values() for phase in t}, key=lambda p: (p != "prefill", len(p), p))
    lines = [f"{data['env'].get('device')}, {data['env'].get('layers')} layers, torch {data['env'].get('torch')}, "
             f"transformers {data['env'].get('transformers')}, liger {data['env'].get('liger_kernel')}",
             f"{'phase':12s} {'mode':9s} {'plain':>9s} {'kcatalog':>9s} {'liger':>9s} "
             f"{'kc/plain':>9s} {'kc/liger':>9s}"]  # fmt: skip
    for compiled in ("", " compiled"):
        for phase in phases:
            p, k, g = (times.get(f"{v}{compiled}", {}).get(phase) for v in ("plain", "kcatalog", "liger"))
            ratio = lambda a, b: f"{a / b:9.3f}" if a and b else f"{'-':>9s}"  # noqa: E731
            cell = lambda v: f"{v:9.3f}" if v else f"{'-':>9s}"  # noqa: E731
            lines.append(f"{phase:12s} {('compiled' if compiled else 'eager'):9s} {cell(p)} {cell(k)} {cell(g)} "
                         f"{ratio(p, k)} {ratio(g, k)}")  # fmt: skip
    for key, by_phase in data.get("profile", {}).items():
        for phase, prof in by_phase.items():
            lines.append(f"profile {key:9s} {phase:12s}: replaced ops {prof['replaced_us']:8.1f} us "
                         f"(rope {prof['by_part_us'].get('rope', 0.0):.1f}) of "
                         f"{prof['kernel_us_total']:8.1f} us kernel time, "
                         f"{prof['share_of_step']:.1%} of the step")  # fmt: skip
    for key, by_phase in data.get("rel_err_f32", {}).items():
        errors = ", ".join(f"{phase} {error:.4f}" for phase, error in by_phase.items())
        lines.append(f"logits vs float32 {key:18s}: {errors}")
    for key, value in data.get("checks", {}).items():
        if key != "kcatalog_report":
            lines.append(f"check {key}: {value}")
    lines += [f"note: {note}" for note in data.get("notes", [])]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "out"), help="results folder (default: $OUT or ./out)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prefill", type=int, default=4096)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--decode-pos", type=int, default=1024)
    parser.add_argument("--quick", action="store_true", help="a tiny model (any device): a smoke test")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--rounds", type=int, default=3, help="eager rounds: the variants take turns")
    parser.add_argument("--budget-s", type=float, default=400.0, help="skip compiled variants past this")
    parser.add_argument("--compile-reserve-s", type=float, default=60.0)
    args = parser.parse_args()
    if args.quick:
        args.prefill, args.decode_pos = min(args.prefill, 64), min(args.decode_pos, 32)
    data = run(args)
    text = table(data)
    (Path(args.out) / "kernelize_gpu.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
