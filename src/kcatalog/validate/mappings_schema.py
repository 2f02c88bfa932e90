"""The layers file kind as pydantic models: which model layer classes get which forward, calling which catalog ops.

A catalog file whose top level has a `layers` key is a layers file (validator.py); its JSON Schema is
schemas/layers.v1.json.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from .schema import Name, OpId, Target, _Strict

LAYERS_KEY = "layers"

AttributePath = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
        description="a dotted attribute path on the layer instance, e.g. 'config.hidden_act' or 'gate_proj.bias'",
    ),
]
ConditionValue = Annotated[Union[StrictBool, StrictInt, StrictFloat, str, None], Field(union_mode="left_to_right")]


class LayerMappingDecl(_Strict):
    """One mapping: instances of these classes get this forward when every condition holds."""

    description: str | None = None
    classes: tuple[Target, ...] = Field(
        min_length=1,
        description="layer classes 'package.module:Class' (the exact class, not its subclasses); checked "
        "statically, never imported; a class whose package is not installed here is unavailable, not an error",
        examples=[["transformers.models.llama.modeling_llama:LlamaRMSNorm"]],
    )
    forward: Target = Field(
        description="the replacement forward, called as forward(module, ops, *args, **kwargs) where ops maps "
        "each op id of `ops` to its op handle (mode 'inference') or its registered torch op (mode 'training')",
        examples=["kcatalog.integrations.transformers:rms_norm_forward"],
    )
    prepare: Target | None = Field(
        None,
        description="called once per instance, as prepare(module, ops), before its forward is replaced (e.g. to "
        "lay out two weights as views of one buffer, or to store a copy of the class's forward calling the ops); "
        "returns an undo callable for unkernelize, or None, or a kcatalog.integrations.kernelize.Prepared (its undo, "
        "and replace_forward=False where it bound the ops through the library's own extension point, the layer "
        "keeping its class's forward); raises "
        "ValueError, with the reason, where the layer cannot take the forward",
        examples=["kcatalog.integrations.transformers:fuse_gate_up"],
    )
    ops: tuple[OpId, ...] = Field(min_length=1, description="the catalog ops the forward calls")
    modes: tuple[Literal["inference", "training"], ...] = Field(
        ("inference",),
        min_length=1,
        description="the kernelize modes the mapping is for (kernelize(model, mode=...)): 'inference' (the ops' "
        "handles, no autograd), 'training' (the ops' registered torch ops, whose backward runs each op's "
        "`backward:` op; every op must declare one)",
        examples=[["inference", "training"]],
    )
    when: dict[AttributePath, tuple[ConditionValue, ...]] = Field(
        default_factory=dict,
        description="conditions on the instance: attribute path -> the values allowed there (null: the attribute "
        "is None or absent); every one must hold, else the layer keeps its forward and the report says why",
        examples=[{"config.hidden_act": ["silu"], "gate_proj.bias": [None]}],
    )


class LayersFile(_Strict):
    """A layers file: layer mappings for `kcatalog.kernelize`."""

    kcatalog: Literal[1] = Field(description="format version")
    description: str | None = None
    layers: dict[Name, LayerMappingDecl] = Field(min_length=1, description="mapping name -> mapping")
