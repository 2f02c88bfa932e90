"""What autograd keeps for backward in a training forward of a transformers Llama model kernelized with
kcatalog.kernelize(model, mode="training"), by autograd node (the op that saved it) and in all, in MiB: the tensors
saved for backward, de-duplicated by storage (a view kept by two nodes counts once, at its
storage's size). No GPU: a CPU run at the Llama-3.1-8B shapes (hidden 4096, intermediate 14336, 32 / 8 heads of
128) with fewer tokens; every saved tensor of these ops grows with the token count, so the figures are scaled to
`--scale-to` tokens (default 4096, the H200 training benchmark's sequence), bf16.

A decoder layer's figure is the difference between two models, of `--layers` and of one layer more (the embedding,
the final norm and the loss cancel out). Current figures: results/saved_tensors_cpu.md.

Run: python benchmarks/saved_tensors.py [--seq 64] [--layers 2] [--small]   (--small: test_kernelize's tiny sizes)
Prints one line per autograd node kind: the MiB it keeps (storages first kept by it), a layer's and the whole
larger model's, and the totals.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

MiB = 2**20


@dataclass
class Saved:
    """The storages autograd keeps for backward: each one's bytes, the nodes that keep it, in graph order."""

    sizes: dict[int, int] = field(default_factory=dict)  # storage id -> bytes
    holders: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))  # storage id -> node names

    @property
    def total(self) -> int:
        return sum(self.sizes.values())

    def by_node(self) -> dict[str, int]:
        """Bytes per node name, each storage counted once, at the first node (from the loss back) that keeps it."""
        found: dict[str, int] = defaultdict(int)
        for key, nodes in self.holders.items():
            found[nodes[0]] += self.sizes[key]
        return dict(found)


def storage_key(t: torch.Tensor) -> int:
    """The tensor's storage (its StorageImpl's address): views of one tensor share it."""
    return int(t.untyped_storage()._cdata)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


def node_saved(node: Any) -> Iterator[torch.Tensor]:
    """The tensors one autograd node keeps: a custom Function's saved_tensors, a built-in node's `_saved_*`."""
    if hasattr(node, "saved_tensors"):
        yield from _tensors(node.saved_tensors)
        return
    for name in dir(node):
        if name.startswith("_saved_"):
            yield from _tensors(getattr(node, name))


def node_name(node: Any) -> str:
    return type(node).__name__ if type(node).__name__ != "BackwardCFunction" else node.name()


def nodes(root: torch.Tensor) -> Iterator[Any]:
    """The autograd nodes behind `root`, each once, from it back to the leaves (breadth first)."""
    seen: set[int] = set()
    pending = [root.grad_fn]
    while pending:
        node = pending.pop(0)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        pending.extend(next_node for next_node, _ in node.next_functions)


def saved_by_nodes(root: torch.Tensor, leave_out: Collection[int] = ()) -> Saved:
    """What the graph behind `root` keeps, read from its nodes (the loss back to the leaves), but for the storages
    of `leave_out` (the parameters: kept anyway)."""
    saved = Saved()
    for node in nodes(root):
        name = node_name(node)
        for t in node_saved(node):
            key = storage_key(t)
            if key in leave_out:
                continue
            saved.sizes[key] = t.untyped_storage().nbytes()
            if name not in saved.holders[key]:
                saved.holders[key].append(name)
    return saved


def saved_bytes(forward: Any, leave_out: Collection[int] = ()) -> tuple[Any, int]:
    """`forward()`'s result and the bytes autograd packed for backward meanwhile (saved_tensors_hooks), each storage
    once: what the nodes keep, counted where autograd saves it (a check on saved_by_nodes)."""
    sizes: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if storage_key(t) not in leave_out:
            sizes[storage_key(t)] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = forward()
    return result, sum(sizes.values())


def llama(seq: int, layers: int, small: bool) -> tuple[Any, torch.Tensor]:
    from transformers import LlamaConfig, LlamaForCausalLM

    if small:
        sizes = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16)  # fmt: skip
    else:
        sizes = dict(
            vocab_size=1024,
            hidden_size=4096,
            intermediate_size=14336,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
        )  # fmt: skip (the vocabulary: the loss's, apart)
    config = LlamaConfig(**sizes, num_hidden_layers=layers, max_position_embeddings=max(64, seq),
                         attn_implementation="sdpa", tie_word_embeddings=False)  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).train()
    ids = torch.randint(0, config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(1))
    return model, ids


def measure(seq: int, layers: int, small: bool) -> tuple[Saved, int]:
    import kcatalog

    model, ids = llama(seq, layers, small)
    kcatalog.kernelize(model, mode="training")
    parameters = {storage_key(p) for p in model.parameters()}
    out, packed = saved_bytes(lambda: model(input_ids=ids, labels=ids), parameters)
    return saved_by_nodes(out.loss, parameters), packed


def _name(node: str) -> str:
    """'GeneratedBackwardFor_kcatalog_layernorm_add_rms_norm_defaultBackward' -> 'kcatalog layernorm_add_rms_norm'."""
    inner = node.removeprefix("GeneratedBackwardFor_").removesuffix("_defaultBackward")
    return inner.replace("_", " ", 1) if inner != node else node


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq", type=int, default=64, help="tokens of the CPU run")
    parser.add_argument("--layers", type=int, default=2, help="the smaller model's; the other has one more")
    parser.add_argument("--scale-to", type=int, default=4096, help="tokens the figures are scaled to")
    parser.add_argument("--small", action="store_true", help="test_kernelize's tiny sizes, not Llama-8B's")
    args = parser.parse_args(argv)
    fewer, fewer_packed = measure(args.seq, args.layers, args.small)
    more, more_packed = measure(args.seq, args.layers + 1, args.small)
    # float32 on the CPU, bf16 on the GPU: half the bytes; and the token count scaled
    factor = args.scale_to / args.seq / 2 / MiB
    print(
        f"saved for backward at {args.scale_to} tokens, bf16, MiB (scaled from float32 CPU runs of {args.seq} tokens; "
        "each storage counted once, at the first node from the loss back that keeps it); a decoder layer: the "
        f"model of {args.layers + 1} layers less that of {args.layers}"
    )
    print(f"  {'autograd node':48s} {'a layer':>9s} {f'{args.layers + 1} layers':>10s}")
    ours, theirs = more.by_node(), fewer.by_node()
    for name in sorted(ours, key=lambda n: -(ours[n] - theirs.get(n, 0))):
        print(f"  {_name(name):48s} {(ours[name] - theirs.get(name, 0)) * factor:9.2f} {ours[name] * factor:10.2f}")
    total = (more.total - fewer.total) * factor
    print(
        f"  {'total':48s} {total:9.2f} {more.total * factor:10.2f}   (saved_tensors_hooks: {more_packed * factor:.2f})"
    )
    assert more.total == more_packed and fewer.total == fewer_packed, "the nodes hold other than autograd packed"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
