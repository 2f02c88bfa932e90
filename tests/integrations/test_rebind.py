"""rebind.with_global: a copy of a function (and of the functools.wraps wrappers around it) that sees another
value for one global name, leaving the function, its wrappers and its module's globals as they were."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from kcatalog.integrations.rebind import global_of, with_global


def helper(x: int) -> int:
    return x + 1


def shout(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return ("wrapped", fn(*args, **kwargs))

    return wrapper


def calls_helper(x: int, *, scale: int = 10) -> int:
    return helper(x) * scale


@shout
def wrapped_calls_helper(x: int, *, scale: int = 10) -> int:
    return helper(x) * scale


def test_the_copy_sees_the_new_value_and_nothing_else_changes() -> None:
    copy = with_global(calls_helper, "helper", lambda x: x - 1)
    assert copy(5) == 40 and copy(5, scale=2) == 8  # keyword defaults kept
    assert calls_helper(5) == 60 and globals()["helper"] is helper
    assert copy.__name__ == "calls_helper" and copy.__doc__ == calls_helper.__doc__
    assert not hasattr(copy, "__wrapped__")
    assert global_of(calls_helper, "helper") is helper


def test_a_wrapper_is_copied_around_the_copy() -> None:
    copy = with_global(wrapped_calls_helper, "helper", lambda x: 0)
    assert copy(5) == ("wrapped", 0)
    assert wrapped_calls_helper(5) == ("wrapped", 60)
    inner = copy.__wrapped__  # type: ignore[attr-defined]
    assert inner is not wrapped_calls_helper.__wrapped__  # type: ignore[attr-defined]
    assert inner.__globals__["helper"](7) == 0 and "__name__" not in inner.__globals__
    assert global_of(wrapped_calls_helper, "helper") is helper


def test_what_cannot_be_copied_says_why() -> None:
    with pytest.raises(ValueError, match=r"^calls_helper does not call the module-level absent \(its code names"):
        with_global(calls_helper, "absent", None)
    with pytest.raises(ValueError, match=r"^partial is not a plain Python function"):
        with_global(functools.partial(calls_helper, 1), "helper", None)

    def loose(*args: Any) -> Any:  # claims to wrap calls_helper but calls it through a global, not its closure
        return calls_helper(*args)

    loose.__wrapped__ = calls_helper  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"does not hold the function it wraps \(calls_helper\) in its closure"):
        with_global(loose, "helper", None)
