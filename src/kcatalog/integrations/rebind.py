"""A copy of a function that runs the same code with one global name bound to another value.

For layers whose forward calls a module-level function (transformers' attention calls `apply_rotary_pos_emb`):
the copy runs the library's own forward body, whatever its version, with that one name swapped, and neither the
function, its class nor its module's globals change, so every other model in the process keeps the original.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any


def global_of(fn: Callable[..., Any], name: str) -> Any:
    """The value `name` has in the globals of `fn`'s innermost function (through functools.wraps wrappers);
    raises ValueError, with the reason, where a copy with it rebound could not be made (see with_global)."""
    inner = _chain(fn, name)[-1]
    return inner.__globals__[name]


def with_global(fn: Callable[..., Any], name: str, value: Any) -> types.FunctionType:
    """A copy of `fn` whose innermost function sees `value` for the global `name`.

    `fn` may be wrapped by decorators made with functools.wraps: each wrapper is copied too, with the closure
    cell that holds its `__wrapped__` holding the copy of the function below. The copy's globals are a snapshot
    of the module's dict with `name` replaced and `__name__` left out: module globals assigned after the copy is
    made are not seen.
    Raises ValueError, with the reason, where `fn` is not a plain function, `name` is not a global its
    innermost code reads, or a wrapper's closure does not hold the function it wraps.
    """
    chain = _chain(fn, name)
    inner = chain[-1]
    # Without '__name__' the globals are no module's: torch.compile (dynamo) then guards on this dict itself,
    # where with it it would look the globals up as that module's (sys.modules) and guard the original there.
    globals_ = {key: item for key, item in inner.__globals__.items() if key != "__name__"}
    globals_[name] = value
    copy = _copy(inner, globals_, inner.__closure__)
    for wrapper, wrapped in zip(reversed(chain[:-1]), reversed(chain[1:]), strict=True):
        cells = tuple(types.CellType(copy) if _holds(cell, wrapped) else cell for cell in wrapper.__closure__ or ())
        outer = _copy(wrapper, wrapper.__globals__, cells)
        outer.__wrapped__ = copy  # type: ignore[attr-defined]
        copy = outer
    return copy


def _chain(fn: Callable[..., Any], name: str) -> list[types.FunctionType]:
    """`fn` and each function it wraps (`__wrapped__`), outermost first; checked as with_global says."""
    chain: list[types.FunctionType] = []
    current: Any = fn
    while True:
        if not isinstance(current, types.FunctionType):
            raise ValueError(f"{_name(current)} is not a plain Python function: its globals cannot be rebound")
        chain.append(current)
        wrapped = getattr(current, "__wrapped__", None)
        if wrapped is None:
            break
        if not any(_holds(cell, wrapped) for cell in current.__closure__ or ()):
            raise ValueError(
                f"the wrapper {_name(current)} does not hold the function it wraps ({_name(wrapped)}) in its "
                "closure: it cannot be made to call a copy"
            )
        current = wrapped
    inner = chain[-1]
    if name not in inner.__code__.co_names or name not in inner.__globals__:
        raise ValueError(f"{_name(inner)} does not call the module-level {name} (its code names no such global)")
    if "__name__" in inner.__code__.co_names:
        raise ValueError(f"{_name(inner)} reads its module's __name__, which its copy's globals leave out")
    return chain


def _holds(cell: types.CellType, value: object) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False


def _copy(
    fn: types.FunctionType, globals_: dict[str, Any], closure: tuple[types.CellType, ...] | None
) -> types.FunctionType:
    copy = types.FunctionType(fn.__code__, globals_, fn.__name__, fn.__defaults__, closure)
    copy.__kwdefaults__ = fn.__kwdefaults__
    functools.update_wrapper(copy, fn)  # name, qualname, doc, module, annotations, __dict__
    copy.__dict__.pop("__wrapped__")  # the copy wraps nothing: only a copied wrapper wraps (the copy below it)
    return copy


def _name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)
