"""Forwards for Hugging Face transformers layers, built on catalog ops; the shipped layers file maps them.

Each forward is called as ``forward(module, ops, *args)`` with `ops` mapping the op ids its mapping declares
to op handles (the registered torch ops while torch.compile traces them); a mapping's prepare is called as
``prepare(module, ops)``. Nothing here imports transformers: the forwards read only the attributes the mapped
classes define (``weight``, ``variance_epsilon`` or ``eps``, ``gate_proj``/``up_proj``/``down_proj``), and the
attention layers run their class's own forward, copied with its RoPE function swapped (``rebind``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from .rebind import global_of, with_global

Ops = Mapping[str, Callable[..., Any]]


def rms_norm_forward(module: Any, ops: Ops, hidden_states: torch.Tensor) -> torch.Tensor:
    """LlamaRMSNorm and its copies (Mistral, Qwen2, Qwen3 and its per-head q_norm/k_norm): layernorm.rms_norm.

    Llama rounds the normalised value to the input dtype before the weight multiply; the kernel rounds once,
    at the end (within the op's tolerance). A weight of another dtype than the input makes Llama's output
    that promoted dtype: such calls keep the class's own forward.
    """
    if module.weight.dtype != hidden_states.dtype:
        return type(module).forward(module, hidden_states)  # type: ignore[no-any-return]
    ahead = _normed_ahead(module, hidden_states)  # computed with the residual add (decoder_layer_forward)
    if ahead is not None:
        return ahead
    return ops["layernorm.rms_norm"](hidden_states, module.weight, module.variance_epsilon)  # type: ignore[no-any-return]


def gemma_rms_norm_forward(module: Any, ops: Ops, x: torch.Tensor) -> torch.Tensor:
    """GemmaRMSNorm (Gemma, Gemma 2, Gemma 3): ``x * rsqrt(mean(x^2) + eps) * (1 + weight)``, float32 math, cast
    once to x's dtype, as the class computes it: layernorm.gemma_rms_norm."""
    return ops["layernorm.gemma_rms_norm"](x, module.weight, module.eps)  # type: ignore[no-any-return]


GATE_UP = "kcatalog_gate_up"  # the non-persistent buffer fuse_gate_up registers: [gate | up] as one matrix


def silu_mlp_forward(module: Any, ops: Ops, x: torch.Tensor) -> torch.Tensor:
    """A gated SiLU MLP, ``down(silu(gate(x)) * up(x))``: one GEMM into [gate | up], then activation.silu_and_mul."""
    return module.down_proj(ops["activation.silu_and_mul"](F.linear(x, getattr(module, GATE_UP))))  # type: ignore[no-any-return]


def gelu_tanh_mlp_forward(module: Any, ops: Ops, x: torch.Tensor) -> torch.Tensor:
    """A gated GELU (tanh approximation) MLP (Gemma's GeGLU): one GEMM into [gate | up], then
    activation.gelu_and_mul with approximate='tanh'."""
    return module.down_proj(ops["activation.gelu_and_mul"](F.linear(x, getattr(module, GATE_UP)), "tanh"))  # type: ignore[no-any-return]


def fuse_gate_up(module: Any, ops: Ops) -> Callable[[], None]:
    """Lay gate_proj's and up_proj's weights out one after the other in one buffer, so that one GEMM computes
    both: the buffer is registered on the module, non-persistent (`kcatalog_gate_up`: not in state_dict), and
    the two Parameters become views of its halves. They stay the same objects with the same values (state_dict
    keys and parameter identity unchanged, load_state_dict writes through), and the old storages are freed once
    nothing else holds them, so the weights take no more memory than before (one layer's gate and up more,
    briefly, while copying).

    Moving the model afterwards (`.to()`) converts the buffer and the two weights apart: still the same values,
    but twice the memory, and the weights no longer write through. A load_state_dict hook lays them out again
    (writing the loaded weights into the buffer), so loading weights after a move cannot leave the GEMM on the
    old ones; a weight changed in place after a move can. Kernelize on the device and dtype the model runs in.

    Returns the undo (the hook and the buffer removed, each weight copied back into a storage of its own);
    raises ValueError, naming the reason, when the two weights cannot be one matrix.
    """
    gate, up = module.gate_proj.weight, module.up_proj.weight
    if gate.shape != up.shape or gate.dtype != up.dtype or gate.device != up.device:
        raise ValueError(
            f"gate_proj and up_proj weights differ ({tuple(gate.shape)} {gate.dtype} {gate.device} vs "
            f"{tuple(up.shape)} {up.dtype} {up.device}): they cannot be one GEMM"
        )
    return fuse_rows(module, ("gate_proj", "up_proj"), "weight", GATE_UP)


def fuse_rows(module: Any, names: tuple[str, ...], attr: str, buffer: str) -> Callable[[], None]:
    """Lay out the tensors `attr` ('weight' or 'bias') of the submodules `names` one after the other (along
    dim 0) in one non-persistent buffer `buffer` of `module`, each Parameter becoming a view of its rows (the
    same object, the same values: see fuse_gate_up), with a load_state_dict hook that lays them out again where
    a move or a load broke the views. The tensors must share dtype, device and trailing dims (the caller checks).
    Returns the undo: the hook and the buffer removed, each Parameter copied back into a storage of its own."""
    _lay_out(module, _tensors(module, names, attr), buffer)

    def relay(owner: Any, _keys: Any) -> None:
        tensors = _tensors(owner, names, attr)
        if not _laid_out(owner, tensors, buffer):
            _lay_out(owner, tensors, buffer)

    hook = module.register_load_state_dict_post_hook(relay)

    def undo() -> None:
        hook.remove()
        module._buffers.pop(buffer, None)
        with torch.no_grad():
            for tensor in _tensors(module, names, attr):
                tensor.data = tensor.data.clone()

    return undo


def _tensors(module: Any, names: tuple[str, ...], attr: str) -> list[torch.Tensor]:
    return [getattr(getattr(module, name), attr) for name in names]


def _lay_out(module: Any, tensors: list[torch.Tensor], buffer: str) -> None:
    """The tensors' current values as one new buffer, stacked along dim 0, and the tensors views of its rows."""
    first = tensors[0]
    with torch.no_grad():
        fused = torch.empty(
            (sum(t.shape[0] for t in tensors), *first.shape[1:]), dtype=first.dtype, device=first.device
        )
        start = 0
        for tensor in tensors:
            rows = fused[start : start + tensor.shape[0]]
            rows.copy_(tensor)
            tensor.data = rows
            start += tensor.shape[0]
    module.register_buffer(buffer, fused, persistent=False)


def _laid_out(module: Any, tensors: list[torch.Tensor], buffer: str) -> bool:
    """Whether the tensors are still the consecutive rows of the module's buffer."""
    fused = module._buffers.get(buffer)
    if fused is None:
        return False
    address = fused.data_ptr()
    for tensor in tensors:
        if tensor.dtype != fused.dtype or tensor.device != fused.device or tensor.data_ptr() != address:
            return False
        address += tensor.numel() * tensor.element_size()
    return True


ROTARY = "attention.rotary_embedding"
ROPE = "apply_rotary_pos_emb"  # the module-level function transformers' Llama-family attention forwards call
ATTENTION_FORWARD = "kcatalog_attention_forward"  # the instance attribute bind_rotary sets: the copied forward
_ROTARY_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # attention.rotary_embedding's
_ROTATED = ("q_proj", "k_proj", "q_norm", "k_norm")  # the submodules whose outputs the op rotates in place


def attention_forward(module: Any, ops: Ops, *args: Any, **kwargs: Any) -> Any:
    """Llama-family and Gemma attention: the class's own forward, whatever the installed transformers' version
    of it, with RoPE through attention.rotary_embedding (the copy bind_rotary made)."""
    return getattr(module, ATTENTION_FORWARD)(module, *args, **kwargs)


def bind_rotary(module: Any, ops: Ops) -> Callable[[], None]:
    """Store on the instance a copy of its class's forward whose global `apply_rotary_pos_emb` is
    rotary_pos_emb bound to the op handle (and to the original, for the calls it does not take). The class,
    its forward and the modeling module's globals stay as they are: other models keep transformers' RoPE.

    Returns the undo (the copy removed); raises ValueError, naming the reason, where the forward does not
    call a module-level `apply_rotary_pos_emb` or cannot be copied, or where q_proj, k_proj, q_norm or k_norm
    have forward hooks (they would see their outputs rotated in place; hooks added after kernelize would too).
    """
    hooked = [name for name in _ROTATED if len(getattr(getattr(module, name, None), "_forward_hooks", ()))]
    if hooked:  # they would see the projections' outputs rotated in place, where transformers returns new ones
        raise ValueError(f"{', '.join(hooked)} {'has' if len(hooked) == 1 else 'have'} forward hooks, which would "
                         f"see q and k rotated in place")  # fmt: skip
    return bind_rope(module, rotary_pos_emb, ops[ROTARY])


def bind_rope(module: Any, rope: Callable[..., Any], op: Callable[..., Any]) -> Callable[[], None]:
    """Store on the instance a copy of its class's forward whose global `apply_rotary_pos_emb` is
    ``functools.partial(rope, op, original)``, `original` being the function the forward's module holds; returns
    the undo. Raises ValueError, with the reason, where the forward does not call a module-level
    apply_rotary_pos_emb or cannot be copied."""
    forward = type(module).forward
    module.__dict__[ATTENTION_FORWARD] = with_global(
        forward, ROPE, functools.partial(rope, op, global_of(forward, ROPE))
    )

    def undo() -> None:
        module.__dict__.pop(ATTENTION_FORWARD, None)

    return undo


def rotary_pos_emb(
    rotary: Callable[..., None],
    original: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *rest: Any,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` through attention.rotary_embedding,
    in place on q and k, for the calls the op computes the same way; every other call goes to `original`.

    q [B, Hq, S, D] and k [B, Hk, S, D] arrive as ``.transpose(1, 2)`` views of the [B, S, H, D] projections
    (Qwen3: of its q_norm/k_norm outputs), contiguous or, where q/k/v are one GEMM (fused_qkv), column slices
    of it with strided token rows; [B * S, H * D] views of them are the op's query and key (token rows may be
    strided) and it rotates them where they lie; cos and sin are [B or 1, S, D], in q's dtype. Taken only without
    autograd (the op has none), with unsqueeze_dim 1, full rotary (D wide cos) and that layout.
    """
    if not _rotary_fits(q, k, cos, sin, rest, kwargs):
        return original(q, k, cos, sin, *rest, **kwargs)
    batch, heads, seq, dim = q.shape
    positions, cos_sin = _cache_rows(cos, sin, batch)
    query = q.transpose(1, 2).view(batch * seq, heads * dim)
    key = k.transpose(1, 2).view(batch * seq, k.shape[1] * dim)
    rotary(positions, query, key, dim, cos_sin, True)
    return q, k


_ROWS = "_kcatalog_cache_rows"  # the attribute of a cos tensor that keeps the rows built from it (eager)


def _cache_rows(cos: torch.Tensor, sin: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's positions and cache rows for transformers' cos and sin ([B or 1, S, D]): token t reads row t.

    Llama-family rotary embeddings build cos and sin as cat(freqs, freqs) (times one attention scaling): both
    halves hold the same angles, which is the NeoX rotation of the op, with cos and sin halves as its cache row.
    A model computes cos and sin once per forward and hands the same two tensors to every layer, so in eager the
    rows are built once, by the first layer, and kept on `cos` (they live as long as it does; an in-place change
    of cos or sin builds them again). Traced by torch.compile they are built in every layer, and Inductor merges
    the layers' identical ops. Under torch.inference_mode cos and sin are inference tensors, which keep no version
    counter: they are taken as unchanged within the forward that made them (transformers makes them anew in each).
    """
    eager = not torch.compiler.is_compiling()
    if eager:  # versions only here: torch.compile cannot trace is_inference()
        key = (sin, _version(cos), _version(sin), batch)
        kept = getattr(cos, _ROWS, None)
        if kept is not None and kept[0][0] is sin and kept[0][1:] == key[1:]:
            return kept[1]  # type: ignore[no-any-return]
    seq, dim = cos.shape[1], cos.shape[2]
    half = dim // 2
    cos_sin = torch.cat((cos[..., :half], sin[..., :half]), dim=-1).expand(batch, seq, dim).reshape(batch * seq, dim)
    rows = (torch.arange(batch * seq, device=cos.device), cos_sin)
    if eager:
        setattr(cos, _ROWS, (key, rows))
    return rows


def _version(tensor: torch.Tensor) -> int:
    """The tensor's in-place version, or -1 for an inference tensor (it tracks none)."""
    return -1 if tensor.is_inference() else tensor._version


def _rotary_fits(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rest: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> bool:
    """Whether attention.rotary_embedding computes this apply_rotary_pos_emb call: metadata only (shapes,
    strides, dtypes, grad mode), so torch.compile guards on it and never breaks the graph."""
    if not rotary_call_fits(q, k, cos, sin, rest, kwargs) or q.dtype not in _ROTARY_DTYPES:
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, cos, sin)):
        return False
    return _token_rows(q) and _token_rows(k)


def rotary_call_fits(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rest: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> bool:
    """Whether an apply_rotary_pos_emb call is the one the rotary ops compute: unsqueeze_dim 1, q [B, Hq, S, D] and
    k [B, Hk, S, D] with D even, cos and sin [B or 1, S, D] (full rotary), all of one dtype and device (transformers
    would promote q's dtype to cos's; the ops keep q's). Metadata only."""
    if len(rest) + len(kwargs) > 1 or set(kwargs) - {"unsqueeze_dim"}:
        return False
    if (rest[0] if rest else kwargs.get("unsqueeze_dim", 1)) != 1:
        return False
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or sin.shape != cos.shape:
        return False
    batch, _, seq, dim = q.shape
    if k.shape[0] != batch or k.shape[2:] != q.shape[2:] or cos.shape[1:] != (seq, dim) or dim % 2:
        return False
    if cos.shape[0] not in (1, batch):
        return False
    return k.dtype == cos.dtype == sin.dtype == q.dtype and cos.device == sin.device == k.device == q.device


def _token_rows(x: torch.Tensor) -> bool:
    """Whether x [B, H, S, D], a transpose of [B, S, H, D], has a [B * S, H * D] view with unit-stride rows: its
    heads packed, its token rows evenly strided (a column slice of a fused q/k/v projection is)."""
    batch, heads, seq, dim = x.shape
    rows = x.transpose(1, 2)
    if rows.stride(3) != 1 or (heads > 1 and rows.stride(2) != dim):
        return False
    return batch == 1 or seq == 1 or rows.stride(0) == seq * rows.stride(1)


# ---------------------------------------------------------------- the residual add fused into the next RMSNorm

ADD_RMS_NORM = "layernorm.add_rms_norm"
NEXT_NORM = "kcatalog_next_norm"  # on a decoder layer (link_decoder_layers): the norm its output goes to next
NORMED = "_kcatalog_normed"  # on a decoder layer's output: (that norm, the output's version, the norm's output)
_DECODER_CALLS = frozenset({"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"})


def model_forward(module: Any, ops: Ops, *args: Any, **kwargs: Any) -> Any:
    """The model's own forward, unchanged: its mapping is there for its prepare (link_decoder_layers)."""
    return type(module).forward(module, *args, **kwargs)


def link_decoder_layers(module: Any, ops: Ops) -> Callable[[], None]:
    """Tell each decoder layer of a Llama-family model which RMSNorm reads its output next: the next layer's
    input_layernorm, and for the last layer the model's final norm; decoder_layer_forward then computes the
    residual add and that norm in one kernel (the norm, called next, finds its output ready). The link is an
    instance attribute, not a submodule (state_dict and named_modules are unchanged). Returns the undo."""
    layers, final = getattr(module, "layers", None), getattr(module, "norm", None)
    if not isinstance(layers, torch.nn.ModuleList) or not isinstance(final, torch.nn.Module):
        raise ValueError("the model has no `layers` list and final `norm`")
    count = min(len(layers), getattr(getattr(module, "config", None), "num_hidden_layers", len(layers)))
    targets = [layer.input_layernorm for layer in layers[1:count]] + [final]
    for layer, target in zip(layers[:count], targets):
        if hasattr(target, "variance_epsilon") and isinstance(getattr(target, "weight", None), torch.Tensor):
            layer.__dict__[NEXT_NORM] = target  # (a norm of another kind: that layer's second add stays an add)

    def undo() -> None:
        for layer in layers:
            layer.__dict__.pop(NEXT_NORM, None)

    return undo


def check_decoder_layer(module: Any, ops: Ops) -> None:
    """decoder_layer_forward computes what the class's forward does only where that forward calls exactly the
    input norm, attention, post-attention norm and MLP (as Llama, Mistral, Qwen2 and Qwen3 write it): ValueError
    for any other, and where the post-attention norm has forward hooks (the fused forward does not call it)."""
    code = getattr(inspect.unwrap(type(module).forward), "__code__", None)
    names = set(code.co_names) if code is not None else set()
    if names != _DECODER_CALLS:
        raise ValueError(f"its forward's code names {', '.join(sorted(names)) or 'nothing'}, not just "
                         f"{', '.join(sorted(_DECODER_CALLS))} (the layers the fused forward calls)")  # fmt: skip
    if len(module.post_attention_layernorm._forward_hooks) or len(module.post_attention_layernorm._forward_pre_hooks):
        raise ValueError("post_attention_layernorm has hooks, which the fused forward would not call")


def decoder_layer_forward(module: Any, ops: Ops, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """A Llama-family decoder layer with both residual adds fused into the RMSNorm that follows them
    (layernorm.add_rms_norm): the attention's into the post-attention norm, and the MLP's into the norm that
    link_decoder_layers says reads this layer's output (whose kernelized forward, rms_norm_forward, then takes
    the norm's output kept on this one; in eager only: traced by torch.compile the second add stays an add).
    The output is the residual stream, as the class's forward returns it."""
    post = module.post_attention_layernorm
    if args or post.weight.dtype != hidden_states.dtype:
        return type(module).forward(module, hidden_states, *args, **kwargs)
    residual = hidden_states
    attention, _ = module.self_attn(hidden_states=module.input_layernorm(hidden_states), **kwargs)
    normed, residual = ops[ADD_RMS_NORM](attention, residual, post.weight, post.variance_epsilon)
    out = module.mlp(normed)
    norm = module.__dict__.get(NEXT_NORM)
    if norm is None or torch.compiler.is_compiling() or norm.weight.dtype != out.dtype:
        return residual + out  # (Dynamo traces no attribute set on a tensor)
    normed, summed = ops[ADD_RMS_NORM](out, residual, norm.weight, norm.variance_epsilon)
    setattr(summed, NORMED, (norm, _version(summed), normed))
    return summed


def _normed_ahead(module: Any, hidden_states: torch.Tensor) -> torch.Tensor | None:
    """The norm's output that the decoder layer which made `hidden_states` computed with it, if unchanged since."""
    if torch.compiler.is_compiling():  # decoder_layer_forward keeps none there
        return None
    kept = getattr(hidden_states, NORMED, None)
    if kept is None or kept[0] is not module or kept[1] != _version(hidden_states):
        return None
    return kept[2]  # type: ignore[no-any-return]
