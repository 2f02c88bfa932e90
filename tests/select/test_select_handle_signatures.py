"""Op handles take the op's own parameter list, and forward exactly what the caller passed."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from catalog_builder import Workspace

ECHO = "def echo(*args, **kwargs):\n    return args, kwargs\n"


@pytest.mark.parametrize(
    ("signature", "expected"),
    [
        ("(x: Tensor, w: Tensor, eps: float = 1e-6) -> Tensor", "(x, w, eps=1e-06)"),
        ("(x: Tensor, /, w: Tensor) -> Tensor", "(x, w)"),
        ("(x: Tensor, *, approximate: str = 'none') -> Tensor", "(x, *, approximate='none')"),
        ("(x: Tensor, *rest) -> Tensor", "(*args, **kwargs)"),
        ("(x: Tensor, eps: float = EPS) -> Tensor", "(*args, **kwargs)"),
    ],
    ids=["defaults", "positional-only", "keyword-only", "variadic", "non-literal-default"],
)
def test_handle_signature(workspace: Workspace, signature: str, expected: str) -> None:
    workspace.module("kc_sig_echo", ECHO)
    workspace.write({"op": workspace.op({"ref": "kc_sig_echo:echo"}, signature=signature)}, backends=["ref"])
    handle = workspace.load().op("g.op")
    assert str(inspect.signature(handle)) == expected


def test_declared_defaults_are_passed_and_overridable(workspace: Workspace) -> None:
    workspace.module("kc_sig_echo", ECHO)
    workspace.write(
        {"op": workspace.op({"ref": "kc_sig_echo:echo"}, signature="(x: Tensor, *, k: int = 3) -> Tensor")},
        backends=["ref"],
    )
    handle = workspace.load().op("g.op")
    x = torch.ones(2)
    assert handle(x) == ((x,), {"k": 3})
    assert handle(x, k=5) == ((x,), {"k": 5})


def test_variadic_handles_forward_what_was_given(workspace: Workspace) -> None:
    workspace.module("kc_sig_echo", ECHO)
    workspace.write(
        {"op": workspace.op({"ref": "kc_sig_echo:echo"}, signature="(x: Tensor, *rest, **options) -> Tensor")},
        backends=["ref"],
    )
    handle = workspace.load().op("g.op")
    x = torch.ones(2)
    assert handle(x, 1, 2, flag=True) == ((x, 1, 2), {"flag": True})


def test_a_default_that_is_code_is_never_run(workspace: Workspace, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    workspace.module("kc_sig_echo", ECHO)
    signature = f"(x: Tensor, eps: float = open({str(marker)!r}, 'w')) -> Tensor"
    workspace.write({"op": workspace.op({"ref": "kc_sig_echo:echo"}, signature=signature)}, backends=["ref"])
    handle = workspace.load().op("g.op")
    handle(torch.ones(2))
    assert not marker.exists()
