"""prepare(): import every op's chosen backend for a platform now, and nothing else."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from catalog_builder import Workspace

MODULES = ("kc_sel_prep_one_a", "kc_sel_prep_one_b", "kc_sel_prep_two_a", "kc_sel_prep_two_b")


@pytest.fixture
def catalog_dir(workspace: Workspace) -> Workspace:
    """Priority [a, b]. g.one: a and b run anywhere. g.two: a runs on cuda >= 8.0 only. One module per spec."""
    for name in MODULES:
        workspace.named_functions(name, ["kernel"])
    workspace.write(
        {
            "one": workspace.op({"a": "kc_sel_prep_one_a:kernel", "b": "kc_sel_prep_one_b:kernel"}),
            "two": workspace.op(
                {
                    "a": {
                        "target": "kc_sel_prep_two_a:kernel",
                        "capabilities": [{"device": "cuda", "min_arch": "8.0"}],
                    },
                    "b": "kc_sel_prep_two_b:kernel",
                }
            ),
        },
        backends=["a", "b"],
    )
    return workspace


def _imported() -> set[str]:
    return {name for name in MODULES if name in sys.modules}


@pytest.mark.parametrize(
    ("platform", "chosen"),
    [
        ("cpu", {"g.one": "a", "g.two": "b"}),
        ("cuda:9.0", {"g.one": "a", "g.two": "a"}),
        ("cuda:7.5", {"g.one": "a", "g.two": "b"}),
    ],
)
def test_prepare_imports_each_ops_chosen_backend(catalog_dir: Workspace, platform: str, chosen: dict[str, str]) -> None:
    catalog = catalog_dir.load()
    assert _imported() == set()
    specs = catalog.prepare(platform)
    assert {op: spec.backend for op, spec in specs.items()} == chosen
    assert _imported() == {f"kc_sel_prep_{op.removeprefix('g.')}_{backend}" for op, backend in chosen.items()}
    for spec in specs.values():
        assert spec.load() is sys.modules[spec.target.module].kernel  # already loaded: no import left


def test_prepare_only_the_given_ops(catalog_dir: Workspace) -> None:
    catalog = catalog_dir.load()
    assert list(catalog.prepare("cpu", ops=["g.two"])) == ["g.two"]
    assert _imported() == {"kc_sel_prep_two_b"}
