"""Op signatures as torch.library schemas ('(Tensor x, float eps=1e-06) -> Tensor'), derived without torch.

The types are those torch.library.infer_schema maps Python annotations to: Tensor, int (as SymInt), float, bool,
str, torch.dtype (ScalarType); `Optional[X]` / `X | None` of them; `list[X]` / `Sequence[X]` of Tensor, int, float
and bool. A return is one of them, a `tuple[...]` of them, or None (the schema's `()`). Arguments the op mutates
become `Tensor(a!)`, `Tensor(b!)`, ...
"""

from __future__ import annotations

import ast
import functools
import math
import string
from dataclasses import dataclass

from ..pyresolve import parse
from .signature import parse_signature

_SCALARS = {"Tensor": "Tensor", "int": "SymInt", "float": "float", "bool": "bool", "str": "str", "dtype": "ScalarType"}
_LISTABLE = ("Tensor", "SymInt", "float", "bool")
_RETURNABLE = ("Tensor", "SymInt", "float", "bool", "Tensor[]")
_OPTIONAL = ("Optional", "typing.Optional")
_LISTS = ("list", "List", "typing.List", "Sequence", "typing.Sequence", "collections.abc.Sequence")
_TUPLES = ("tuple", "Tuple", "typing.Tuple")
# Words torch's schema parser reads as types or literals, so never as parameter names.
_RESERVED = frozenset(
    {"Tensor", "SymInt", "ScalarType", "Scalar", "Any", "Device", "Layout", "MemoryFormat", "Generator", "Storage"}
    | {"Stream", "Dimname", "None", "True", "False", "int", "float", "bool", "str", "complex", "t"}
)
_STRING_SAFE = frozenset(string.ascii_letters + string.digits + " _-.,:;/+*=()[]{}<>!?@#$%^&|~")
SUPPORTED = (
    "Tensor, int, float, bool, str, torch.dtype, Optional[...] of them and list[...] of Tensor, int, float, bool"
)


@dataclass(frozen=True)
class TorchSchema:
    """An op's torch.library schema (without the op name) and whether the op returns nothing."""

    schema: str
    returns_nothing: bool


def torch_op_name(op_id: str) -> str:
    """The torch op name of a catalog op: 'layernorm.rms_norm' -> 'layernorm_rms_norm'."""
    return op_id.replace(".", "_")


@functools.lru_cache(maxsize=4096)  # catalogs repeat a handful of signatures across many ops
def torch_schema(signature: str, mutates: tuple[str, ...] = ()) -> TorchSchema:
    """The schema torch.library reads for an op signature; ValueError saying what it cannot express."""
    args = parse_signature(signature)  # ValueError when it is not valid Python
    function = parse(f"def _{signature}: pass").body[0]
    assert isinstance(function, ast.FunctionDef)  # parse_signature has checked it is one function
    if args.vararg or args.kwarg:
        star = f"*{args.vararg.arg}" if args.vararg else f"**{args.kwarg.arg}"  # type: ignore[union-attr]
        raise ValueError(f"parameter '{star}' is variadic; a torch op takes a fixed list of parameters")
    declared, keyword_only = _declared(args)
    names = [arg.arg for arg, _ in (*declared, *keyword_only)]
    for name in mutates:
        if name not in names:
            raise ValueError(f"mutates names '{name}', not a parameter")  # KC208 reports it; no schema then
    aliases = {name: _alias(index) for index, name in enumerate(mutates)}
    params = []
    for index, (arg, default) in enumerate([*declared, *keyword_only]):
        if index == len(declared):
            params.append("*")
        params.append(_parameter(arg, default, aliases.get(arg.arg)))
    if not any(param.startswith("Tensor") for param in params):
        raise ValueError("it takes no Tensor, so torch's dispatcher has no device to dispatch on")
    returns = _returns(function.returns)
    return TorchSchema(f"({', '.join(params)}) -> {returns}", returns == "()")


@dataclass(frozen=True)
class SchemaParameter:
    """One parameter as a torch schema types it."""

    name: str
    kind: str  # 'Tensor', 'SymInt', 'float', 'Tensor[]', ...; with '?' when optional ('Tensor?')
    default: str | None  # as the schema writes it ('1e-06'); None: no default
    keyword_only: bool


@dataclass(frozen=True)
class SchemaTypes:
    """An op signature's parameters and outputs as a torch schema types them (what a backward op's convention is
    checked against: link/backward.py)."""

    parameters: tuple[SchemaParameter, ...]
    returns: tuple[str, ...]  # one schema type per output: () for None, one for a single value, n for a tuple


@functools.lru_cache(maxsize=4096)
def schema_types(signature: str) -> SchemaTypes:
    """The signature's parameters and outputs in torch schema types; ValueError when torch.library cannot express
    it (as torch_schema says)."""
    torch_schema(signature)  # the same ValueError, for a signature no schema has
    function = parse(f"def _{signature}: pass").body[0]
    assert isinstance(function, ast.FunctionDef)
    declared, keyword_only = _declared(function.args)
    parameters = []
    for index, (arg, default) in enumerate([*declared, *keyword_only]):
        kind, optional = _parameter_type(arg.annotation, arg.arg)  # type: ignore[arg-type]  # typed: torch_schema
        kind += "?" if optional else ""
        text = None if default is None else _default(default, kind.rstrip("?"), optional, arg.arg)
        parameters.append(SchemaParameter(arg.arg, kind, text, index >= len(declared)))
    returns = _returns(function.returns)
    items = () if returns == "()" else tuple(returns.strip("()").split(", ")) if returns.startswith("(") else (returns,)
    return SchemaTypes(tuple(parameters), items)


def _declared(
    args: ast.arguments,
) -> tuple[list[tuple[ast.arg, ast.expr | None]], list[tuple[ast.arg, ast.expr | None]]]:
    """(parameter, its default or None) for the positional parameters, and for the keyword-only ones."""
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    declared: list[tuple[ast.arg, ast.expr | None]] = [
        (arg, args.defaults[index - first_default] if index >= first_default else None)
        for index, arg in enumerate(positional)
    ]
    return declared, list(zip(args.kwonlyargs, args.kw_defaults))


def _alias(index: int) -> str:
    letters = string.ascii_lowercase
    return letters[index] if index < len(letters) else f"{letters[index % 26]}{index // 26}"


def _parameter(arg: ast.arg, default: ast.expr | None, alias: str | None) -> str:
    name = arg.arg
    if not name.isascii() or name in _RESERVED:
        raise ValueError(f"parameter name '{name}' is not one torch's schema parser reads")
    if arg.annotation is None:
        raise ValueError(f"parameter '{name}' has no type; torch.library takes {SUPPORTED}")
    kind, optional = _parameter_type(arg.annotation, name)
    if alias is not None:
        if kind != "Tensor":
            raise ValueError(f"mutates names '{name}', of type {_shown(arg.annotation)}: only tensors can be mutated")
        kind = f"Tensor({alias}!)"
    text = f"{kind}{'?' if optional else ''} {name}"
    if default is not None:
        text += f"={_default(default, kind.partition('(')[0], optional, name)}"
    return text


def _parameter_type(node: ast.expr, name: str) -> tuple[str, bool]:
    """(schema type, optional) of a parameter annotation."""
    inner = _optional_of(node)
    if inner is not None:
        kind, optional = _parameter_type(inner, name)
        if optional:
            raise ValueError(f"parameter '{name}' is optional twice: {_shown(node)}")
        return kind, True
    item = _list_of(node)
    if item is not None:
        kind, optional = _parameter_type(item, name)
        if optional or kind not in _LISTABLE:
            raise ValueError(f"parameter '{name}' is a list of {_shown(item)}; torch.library takes {SUPPORTED}")
        return f"{kind}[]", False
    kind = _SCALARS.get(_dotted(node).removeprefix("torch."), "")
    if not kind:
        raise ValueError(f"parameter '{name}' has type '{_shown(node)}'; torch.library takes {SUPPORTED}")
    return kind, False


def _returns(node: ast.expr | None) -> str:
    if node is None:
        raise ValueError("the signature declares no return type; write '-> None' for an op that returns nothing")
    if isinstance(node, ast.Constant) and node.value is None:
        return "()"
    if isinstance(node, ast.Subscript) and _dotted(node.value) in _TUPLES:
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return f"({', '.join(_return_type(item) for item in items)})"
    return _return_type(node)


def _return_type(node: ast.expr) -> str:
    try:
        kind, optional = _parameter_type(node, "return")
    except ValueError:
        kind, optional = "", False
    if optional or kind not in _RETURNABLE:
        raise ValueError(
            f"it returns '{_shown(node)}'; a torch op returns Tensor, int, float, bool, list[Tensor], "
            "a tuple of them, or None"
        )
    return kind


def _optional_of(node: ast.expr) -> ast.expr | None:
    """X for `Optional[X]`, `X | None`, `None | X` and `Union[X, None]`; None otherwise."""
    if isinstance(node, ast.Subscript) and _dotted(node.value) in _OPTIONAL:
        return node.slice
    if isinstance(node, ast.Subscript) and _dotted(node.value) in ("Union", "typing.Union"):
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else []
        rest = [item for item in items if not _is_none(item)]
        return rest[0] if len(items) == 2 and len(rest) == 1 else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        if _is_none(node.right):
            return node.left
        if _is_none(node.left):
            return node.right
    return None


def _list_of(node: ast.expr) -> ast.expr | None:
    if isinstance(node, ast.Subscript) and _dotted(node.value) in _LISTS:
        return node.slice
    return None


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _dotted(node: ast.expr) -> str:
    """'torch.Tensor' for the annotation `torch.Tensor`, 'Tensor' for `Tensor`; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _shown(node: ast.expr) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _default(node: ast.expr, kind: str, optional: bool, name: str) -> str:
    """A default value as torch's schema writes it; ValueError when it cannot be one."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ValueError(f"the default of '{name}' is not a literal value") from None
    if value is None:
        if not optional:
            raise ValueError(f"'{name}' defaults to None but is not Optional[...]")
        return "None"
    text = _literal(value, kind.removesuffix("[]")) if not kind.endswith("[]") else _list_literal(value, kind[:-2])
    if text is None:
        raise ValueError(f"the default of '{name}' ({_shown(node)}) is not a {kind} torch's schema can hold")
    return text


def _list_literal(value: object, kind: str) -> str | None:
    if not isinstance(value, (list, tuple)):
        return None
    items = [_literal(item, kind) for item in value]
    return None if None in items else f"[{', '.join(item for item in items if item is not None)}]"


def _literal(value: object, kind: str) -> str | None:
    if kind == "bool" and type(value) is bool:
        return str(value)
    if kind == "SymInt" and type(value) is int:
        return str(value)
    if kind == "float" and type(value) in (int, float) and math.isfinite(value):  # type: ignore[arg-type]
        return repr(float(value))  # type: ignore[arg-type]
    if kind == "str" and type(value) is str and set(value) <= _STRING_SAFE:
        return f'"{value}"'
    return None
