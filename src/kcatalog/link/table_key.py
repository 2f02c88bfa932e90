"""An op's table key (`table_key:`) resolved at link time: each size it names, found as a dimension of a tensor
argument of the op's samples, so that a call's key is read from its arguments' shapes (KC236 where it is not)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import did_you_mean
from ..model import KeyDim, Parameters
from ..validate.schema import SamplesDecl, TensorArgDecl


@dataclass(frozen=True)
class KeyProblem:
    """Why one name of a table key cannot be read from a call: its position in `table_key`, and the message."""

    index: int
    message: str


@dataclass(frozen=True)
class ResolvedKey:
    """The key's sizes found in argument dimensions, and the problems of those that were not."""

    dims: tuple[KeyDim, ...]
    problems: tuple[KeyProblem, ...]


def resolve_table_key(
    op_id: str, names: Sequence[str], samples: SamplesDecl | None, parameters: Parameters, dispatch: str
) -> ResolvedKey:
    """Each name of `table_key` as the first tensor argument dimension (in signature order) the samples give as
    that name alone ('E' in [E, 2*I, H]; not '2*I'); `dispatch`: the argument dispatched on, whose leading
    dimension is the token count, which buckets key already."""
    found: dict[str, KeyDim] = {}
    token: str | None = None
    if samples is not None:
        for name in parameters.names:
            spec = samples.args.get(name)
            if not isinstance(spec, TensorArgDecl):
                continue
            index = parameters.positional.index(name) if name in parameters.positional else None
            for dim, size in enumerate(spec.shape):
                if isinstance(size, str) and size.isidentifier():
                    if name == dispatch and dim == 0:
                        token = size
                    else:
                        found.setdefault(size, KeyDim(size, name, dim, index))
    dims, problems = [], []
    for index, name in enumerate(names):
        if name in names[:index]:
            problems.append(KeyProblem(index, f"table_key of op '{op_id}' names '{name}' twice"))
        elif name == token:
            message = (
                f"table_key of op '{op_id}' names '{name}', the token count ({dispatch}'s leading dimension), "
                "which the buckets key already"
            )
            problems.append(KeyProblem(index, message))
        elif name in found:
            dims.append(found[name])
        elif samples is None:
            message = f"table_key of op '{op_id}' names '{name}', but the op declares no samples to find it in"
            problems.append(KeyProblem(index, message))
        else:
            shown = ", ".join(f"{d.name} ({d.arg}[{d.dim}])" for d in found.values()) or "none"
            problems.append(
                KeyProblem(
                    index,
                    f"table_key of op '{op_id}' names '{name}', which no tensor argument of its samples has as a "
                    f"dimension{did_you_mean(name, found)}; dimensions: {shown}",
                )
            )
    return ResolvedKey(tuple(dims), tuple(problems))
