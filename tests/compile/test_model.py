"""A small decoder built from catalog ops compiles whole on the CPU: embedding -> rms_norm -> linear -> rotary
embedding of q and k -> attention -> linear -> fused_add_rms_norm -> linear -> silu_and_mul -> linear ->
fused_add_rms_norm, two layers. Dynamo sees no graph break, Inductor compiles it once for every token count
(dynamic shapes), and it matches eager within the ops' declared tolerances."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounterWithBackend

import kcatalog

VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE, LAYERS, MAX_POSITIONS = 96, 64, 4, 2, 16, 96, 2, 64
TOKEN_COUNTS = (3, 5, 8, 13, 21)


class SmallDecoder(torch.nn.Module):
    """Llama-shaped layers whose norms, rotary embedding and activation are catalog op handles."""

    def __init__(self, catalog: kcatalog.Catalog) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)

        def weight(*shape: int, scale: float = 0.1) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(*shape, generator=generator) * scale, requires_grad=False)

        def norm() -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.rand(HIDDEN, generator=generator) + 0.5, requires_grad=False)

        self.embed = weight(VOCAB, HIDDEN, scale=1.0)
        self.input_norm = norm()
        self.layers = torch.nn.ModuleList()
        for _ in range(LAYERS):
            layer = torch.nn.Module()
            layer.qkv = weight((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN)
            layer.o = weight(HIDDEN, HEADS * HEAD_DIM)
            layer.post_attention_norm = norm()
            layer.gate_up = weight(2 * INTERMEDIATE, HIDDEN)
            layer.down = weight(HIDDEN, INTERMEDIATE)
            layer.next_norm = norm()
            self.layers.append(layer)
        inverse = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
        angles = torch.outer(torch.arange(MAX_POSITIONS, dtype=torch.float32), inverse)
        self.register_buffer("cos_sin", torch.cat((angles.cos(), angles.sin()), dim=-1))
        self.rms_norm = catalog.op("layernorm.rms_norm")
        self.fused_add_rms_norm = catalog.op("layernorm.fused_add_rms_norm")
        self.rotary_embedding = catalog.op("attention.rotary_embedding")
        self.silu_and_mul = catalog.op("activation.silu_and_mul")

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        tokens_count = tokens.shape[0]
        residual = F.embedding(tokens, self.embed)
        x = self.rms_norm(residual, self.input_norm)
        for layer in self.layers:
            q, k, v = F.linear(x, layer.qkv).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], -1)
            q, k = q.contiguous(), k.contiguous()
            self.rotary_embedding(positions, q, k, HEAD_DIM, self.cos_sin, True)  # in place
            heads = [t.reshape(tokens_count, -1, HEAD_DIM).transpose(0, 1) for t in (q, k, v)]
            attention = F.scaled_dot_product_attention(*heads, is_causal=True, enable_gqa=True)
            x = F.linear(attention.transpose(0, 1).reshape(tokens_count, HEADS * HEAD_DIM), layer.o)
            self.fused_add_rms_norm(x, residual, layer.post_attention_norm)  # residual += x; x = norm(residual)
            x = F.linear(self.silu_and_mul(F.linear(x, layer.gate_up)), layer.down)
            self.fused_add_rms_norm(x, residual, layer.next_norm)
        return x


def _inputs(tokens_count: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(tokens_count)
    return torch.randint(0, VOCAB, (tokens_count,), generator=generator), torch.arange(tokens_count)


@pytest.fixture(scope="module")
def model(shipped: kcatalog.Catalog) -> SmallDecoder:
    return SmallDecoder(shipped)


@dataclass
class Compiled:
    """The model's outputs compiled by Inductor (fullgraph, dynamic token count) at every token count, and how many
    times Dynamo handed it a graph: after the first call, and after them all."""

    outputs: list[torch.Tensor]
    graphs_after_first: int
    graphs_after_all: int


@pytest.fixture(scope="module")
def compiled(model: SmallDecoder) -> Iterator[Compiled]:
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    forward = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    with torch.no_grad():
        outputs = [forward(*_inputs(TOKEN_COUNTS[0]))]
        after_first = counter.frame_count
        outputs += [forward(*_inputs(count)) for count in TOKEN_COUNTS[1:]]
    yield Compiled(outputs, after_first, counter.frame_count)
    torch._dynamo.reset()


def test_dynamo_sees_no_graph_break(model: SmallDecoder) -> None:
    explained = torch._dynamo.explain(model)(*_inputs(7))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    code = explained.graphs[0].code
    for op in ("layernorm_rms_norm", "attention_rotary_embedding", "activation_silu_and_mul"):
        assert f"torch.ops.kcatalog.{op}.default(" in code
    assert code.count("torch.ops.kcatalog.layernorm_fused_add_rms_norm.default(") == 2 * LAYERS


def test_it_compiles_once_for_every_token_count(compiled: Compiled) -> None:
    assert [tuple(out.shape) for out in compiled.outputs] == [(count, HIDDEN) for count in TOKEN_COUNTS]
    # The first compilation may restart once: torch specialises a Python float that reaches an opaque op (the
    # handles' eps defaults, symbolic under dynamic=True); four more token counts then recompile nothing.
    assert compiled.graphs_after_first in (1, 2)
    assert compiled.graphs_after_all == compiled.graphs_after_first


def test_it_matches_eager_within_the_declared_tolerances(
    shipped: kcatalog.Catalog, model: SmallDecoder, compiled: Compiled
) -> None:
    used = (
        "layernorm.rms_norm",
        "layernorm.fused_add_rms_norm",
        "attention.rotary_embedding",
        "activation.silu_and_mul",
    )
    tolerance = max(shipped.info(op).tolerance["float32"] for op in used)
    for count, out in zip(TOKEN_COUNTS, compiled.outputs):
        with torch.no_grad():
            eager = model(*_inputs(count)).double()
        assert torch.isfinite(out).all()
        assert ((out.double() - eager).norm() / eager.norm()).item() <= tolerance, count
