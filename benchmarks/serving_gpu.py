"""On a GPU: a kernelized Llama-3-8B-shaped transformers model (random weights, bf16, --layers) in the modes serving
code runs it, each checked against the plain model in the same process, each check recorded (never asserted):

  1. forward under torch.no_grad and torch.inference_mode: logits against the plain model's (relative error);
  2. generate with a static cache, transformers' own decode compile off (disable_compile=True) and on (its
     default on CUDA): tokens against the plain model's, wall time of a second run, and every warning and log
     record that mentions a recompile (torch._logging recompiles on, warnings and the torch loggers captured);
  3. one decode step of the forward captured in a CUDA graph (static cache, inference_mode), replayed against
     the same step in eager.

Run: python benchmarks/serving_gpu.py --out DIR   (--tiny --device cpu: a small model, a smoke test; no CUDA graph)
Writes DIR/serving_gpu.json and DIR/serving_gpu.txt.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from kernelize_gpu import rewind  # benchmarks/ is the script's directory: on sys.path

import kcatalog

LLAMA_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, max_position_embeddings=8192, rms_norm_eps=1e-5)  # fmt: skip
TINY = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
            head_dim=64, max_position_embeddings=512, rms_norm_eps=1e-5)  # fmt: skip


def build(sizes: dict[str, int], layers: int, device: str, dtype: torch.dtype) -> Any:
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**sizes, num_hidden_layers=layers)
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(torch.randn_like(param) * 0.3)
    return model


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


class Recompiles(logging.Handler):
    """Every log record and warning of the block that mentions a recompile."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "recompil" in message.lower():
            self.lines.append(f"{record.name}: {message.splitlines()[0][:300]}")


@contextmanager
def watched_recompiles() -> Iterator[Recompiles]:
    handler = Recompiles()
    loggers = [logging.getLogger(name) for name in ("torch", "torch._dynamo", "torch._inductor", "transformers")]
    for logger in loggers:
        logger.addHandler(handler)
    torch._logging.set_logs(recompiles=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield handler
        finally:
            torch._logging.set_logs()
            for logger in loggers:
                logger.removeHandler(handler)
            handler.lines += [f"warning: {w.message}"[:300] for w in caught if "recompil" in str(w.message).lower()]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed_generate(model: Any, ids: torch.Tensor, device: str, new_tokens: int, **options: Any) -> tuple[Any, float]:
    """Greedy tokens of a second generate call (the first warms up and compiles), and its wall time in ms."""
    kwargs = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False, **options)
    with torch.inference_mode():
        model.generate(ids, **kwargs)
        sync(device)
        start = time.perf_counter()
        out = model.generate(ids, **kwargs)
        sync(device)
    return out, (time.perf_counter() - start) * 1e3


def graph_step(model: Any, ids: torch.Tensor, device: str) -> dict[str, Any]:
    """One decode step after a prefill into a static cache, eager and replayed from a CUDA graph."""
    from transformers import StaticCache

    length = ids.shape[1]
    cache = StaticCache(config=model.config, max_cache_len=length + 8)
    with torch.inference_mode():
        model(ids, past_key_values=cache, cache_position=torch.arange(length, device=device))
        token, position = ids[:, -1:].clone(), torch.tensor([length], device=device)

        def step() -> torch.Tensor:
            rewind(cache, length)  # the cache's own write position, a tensor op: replayed with the graph
            kwargs = dict(past_key_values=cache, cache_position=position, position_ids=position[None])
            return model(token, **kwargs).logits  # type: ignore[no-any-return]

        eager = step().clone()  # the step writes position `length` of the cache: each run writes the same values
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = step()
        graph.replay()
        sync(device)
        start = time.perf_counter()
        for _ in range(20):
            graph.replay()
        sync(device)
        replay_ms = (time.perf_counter() - start) * 1e3 / 20
    return {"replay_vs_eager": relative_error(captured, eager), "replay_ms": replay_ms}


def run_check(results: dict[str, Any], name: str, fn: Callable[[], dict[str, Any]]) -> None:
    start = time.perf_counter()
    try:
        results[name] = {"ok": True, **fn()}
    except Exception as exc:  # a failing check is a result, the others still run
        results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
    results[name]["seconds"] = round(time.perf_counter() - start, 1)
    print(name, json.dumps({k: v for k, v in results[name].items() if k != "trace"}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "out"))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a small model (a smoke test, any device)")
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = args.device
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    plain = build(TINY if args.tiny else LLAMA_8B, args.layers, device, dtype)
    kernelized = copy.deepcopy(plain)
    report = kcatalog.kernelize(kernelized)
    ids = torch.randint(0, plain.config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(1)).to(device)
    results: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else device,
        "layers": args.layers,
        "dtype": str(dtype),
        "replaced": len(report.replaced),
        "left": [f"{item.module}: {item.reason}" for item in report.left],
    }
    try:
        import transformers

        results["transformers"] = transformers.__version__
    except ImportError:
        pass

    def forward_modes() -> dict[str, Any]:
        found: dict[str, Any] = {}
        for mode in ("no_grad", "inference_mode"):
            with getattr(torch, mode)():
                found[mode] = relative_error(kernelized(ids).logits, plain(ids).logits)
        return found

    def generate(compiled: bool) -> Callable[[], dict[str, Any]]:
        def check() -> dict[str, Any]:
            torch._dynamo.reset()
            options: dict[str, Any] = {"cache_implementation": "static", "disable_compile": not compiled}
            with watched_recompiles() as recompiles:
                want, plain_ms = timed_generate(plain, ids, device, args.new_tokens, **options)
                plain_recompiles = list(recompiles.lines)
                got, kernelized_ms = timed_generate(kernelized, ids, device, args.new_tokens, **options)
            new = slice(ids.shape[1], None)
            same = (got[:, new] == want[:, new]).float().mean().item() if got.shape == want.shape else 0.0
            return {"tokens_equal_fraction": same, "plain_ms": plain_ms, "kernelized_ms": kernelized_ms,
                    "plain_recompiles": plain_recompiles,
                    "kernelized_recompiles": recompiles.lines[len(plain_recompiles):]}  # fmt: skip

        return check

    run_check(results, "forward", forward_modes)
    run_check(results, "generate_static_eager", generate(compiled=False))
    run_check(results, "generate_static_transformers_compile", generate(compiled=True))
    if device.startswith("cuda"):
        torch._dynamo.reset()
        run_check(results, "cuda_graph_plain", lambda: graph_step(plain, ids, device))
        run_check(results, "cuda_graph_kernelized", lambda: graph_step(kernelized, ids, device))
    (out / "serving_gpu.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    lines = [f"{key}: {json.dumps({k: v for k, v in value.items() if k != 'trace'})}" if isinstance(value, dict)
             else f"{key}: {value}" for key, value in results.items()]  # fmt: skip
    (out / "serving_gpu.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
