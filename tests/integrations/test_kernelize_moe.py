"""kcatalog.kernelize on tiny random-weight Qwen3-MoE and Mixtral models built from configs (float32, no
downloads): every layer's experts module goes through moe.fused_experts by transformers' experts interface
(implementation 'kcatalog' on the config, the class's forward kept; the router and the weights untouched),
greedy tokens equal plain transformers', logits agree within the op's tolerance, and unkernelize puts the
config's implementation back (outputs bit for bit). Where the interface is absent, or the class does not
dispatch through it, the instance's forward is replaced instead, with the same results."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch
from test_kernelize import SIZES, VOCAB  # the tiny models' sizes, one place for every integration test

import kcatalog
from kcatalog.integrations import moe
from kcatalog.integrations.kernelize import KernelizeReport, default_catalog

COMMON = {**SIZES, "num_experts_per_tok": 2}
MODELS = {
    "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(num_experts=8, moe_intermediate_size=32)),
    "mixtral": ("MixtralForCausalLM", "MixtralConfig", dict(num_local_experts=4)),
}
EXPERTS = {"qwen3_moe": "Qwen3MoeExperts", "mixtral": "MixtralExperts"}


@pytest.fixture(scope="module")
def build(transformers: ModuleType) -> Callable[[str], Any]:
    def make(name: str) -> Any:
        model_class, config_class, sizes = MODELS[name]
        torch.manual_seed(0)
        config = getattr(transformers, config_class)(**COMMON, **sizes)
        config._experts_implementation = "eager"  # plain: the experts classes' own loop
        return getattr(transformers, model_class)(config).eval()

    return make


def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))


def run(model: Any, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, 8 greedy tokens)."""
    with torch.no_grad():
        logits = model(ids).logits
        greedy = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    return logits, greedy


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def experts_of(report: KernelizeReport) -> list[Any]:
    return [item for item in report.replaced if item.mapping == "moe_experts"]


def check_experts_report(name: str, report: KernelizeReport, note: str) -> None:
    """Every layer's experts module kernelized, on the backend selected for the CPU, the way `note` says."""
    experts = experts_of(report)
    assert [item.module for item in experts] == [f"model.layers.{i}.mlp.experts" for i in range(2)]
    assert {item.layer_class.rsplit(":", 1)[1] for item in experts} == {EXPERTS[name]}
    catalog = default_catalog()
    expected = catalog.select(moe.FUSED_EXPERTS, catalog.platform("cpu"), "float32").require().backend
    assert {choice.backend for item in experts for choice in item.ops} == {expected}
    assert {item.note for item in experts} == {note}
    assert not [left for left in report.left if "Experts" in left.layer_class], report


def routers(model: Any) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Each router module, with a shallow copy of its instance attributes."""
    return {
        key: (module, dict(vars(module))) for key, module in model.named_modules() if "Router" in type(module).__name__
    }


def check_untouched(model: Any, weights: dict[str, Any], before: dict[str, tuple[Any, dict[str, Any]]]) -> None:
    """The same Parameters (router and experts alike), and the routers' instance attributes as they were."""
    assert dict(model.named_parameters()) == weights
    after = routers(model)
    assert after.keys() == before.keys() and len(after) == 2
    for key, (module, attributes) in before.items():
        assert after[key][0] is module
        assert vars(module).keys() == attributes.keys()
        assert all(vars(module)[attr] is value for attr, value in attributes.items()), key


def check_results(model: Any, ids: torch.Tensor, ref_logits: torch.Tensor, ref_greedy: torch.Tensor) -> None:
    logits, greedy = run(model, ids)
    assert torch.equal(greedy, ref_greedy)
    assert relative_error(logits, ref_logits) <= default_catalog().info(moe.FUSED_EXPERTS).tolerance["float32"] * 10


def counted(handle: Callable[..., torch.Tensor], calls: list[str]) -> Callable[..., torch.Tensor]:
    def call(*args: Any) -> torch.Tensor:
        calls.append("op")
        return handle(*args)

    return call


@pytest.mark.parametrize("backend", [None, "torch"], ids=["selected", "reference"])
@pytest.mark.parametrize("name", list(MODELS))
def test_kernelized_moe_model_goes_through_the_experts_interface_and_unkernelizes(
    name: str, backend: str | None, build: Callable[[str], Any]
) -> None:
    model = build(name)
    ids = tokens()
    ref_logits, ref_greedy = run(model, ids)
    weights, before = dict(model.named_parameters()), routers(model)
    report = kcatalog.kernelize(model)
    check_experts_report(name, report, "through transformers' experts interface ('kcatalog')")
    assert model.config._experts_implementation == moe.IMPLEMENTATION
    modules = [model.get_submodule(item.module) for item in experts_of(report)]
    assert all(module.config is model.config for module in modules)
    assert all("forward" not in vars(module) for module in modules)  # the class's forward dispatches
    check_untouched(model, weights, before)
    calls: list[str] = []
    handle = default_catalog().kernel(moe.FUSED_EXPERTS, backend)  # pins the backend under test
    for module in modules:
        bound = vars(module)[moe.OPS]
        assert bound.previous == "eager"
        module.__dict__[moe.OPS] = dataclasses.replace(bound, fused_experts=counted(handle, calls))
    check_results(model, ids, ref_logits, ref_greedy)
    assert len(calls) == 2 * (1 + 8)  # both layers, in the forward and at each generated token
    assert kcatalog.unkernelize(model) == len(report.replaced)
    assert model.config._experts_implementation == "eager"
    assert all(moe.OPS not in vars(module) and "forward" not in vars(module) for module in model.modules())
    check_untouched(model, weights, before)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref_logits)


def undecorated(transformers: ModuleType, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The experts class's own forward, as in a transformers whose experts classes have no interface."""
    cls = getattr(getattr(transformers.models, name), f"modeling_{name}").__dict__[EXPERTS[name]]
    monkeypatch.setattr(cls, "forward", cls.forward.__wrapped__)


def no_interface(transformers: ModuleType, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """A transformers without ExpertsInterface (the classes already imported keep dispatching on theirs)."""
    monkeypatch.delattr(transformers.integrations.moe, "ALL_EXPERTS_FUNCTIONS")


FALLBACKS = {
    "no_interface": (no_interface, "instance forward: transformers here has no experts interface"),
    "undecorated": (
        undecorated,
        "instance forward: its class does not dispatch through transformers' experts interface",
    ),
}


@pytest.mark.parametrize("cause", list(FALLBACKS))
def test_without_the_experts_interface_the_instance_forward_is_replaced(
    cause: str, build: Callable[[str], Any], transformers: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "qwen3_moe"
    take_away, note = FALLBACKS[cause]
    take_away(transformers, monkeypatch, name)
    model = build(name)
    ids = tokens()
    ref_logits, ref_greedy = run(model, ids)
    weights, before = dict(model.named_parameters()), routers(model)
    report = kcatalog.kernelize(model)
    check_experts_report(name, report, note)
    assert model.config._experts_implementation == "eager"  # not set: nothing dispatches on it
    modules = [model.get_submodule(item.module) for item in experts_of(report)]
    assert all(moe.OPS not in vars(module) for module in modules)
    check_untouched(model, weights, before)
    calls: list[str] = []
    handle = default_catalog().kernel(moe.FUSED_EXPERTS, "torch")  # transformers' own backends need its interface
    for module in modules:
        module.forward.args[1][moe.FUSED_EXPERTS] = counted(handle, calls)  # the forward's ops mapping
    check_results(model, ids, ref_logits, ref_greedy)
    assert len(calls) == 2 * (1 + 8)
    assert kcatalog.unkernelize(model) == len(report.replaced)
    assert all("forward" not in vars(module) for module in model.modules())
    check_untouched(model, weights, before)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref_logits)


def test_an_implementation_of_the_users_choice_is_kept(build: Callable[[str], Any]) -> None:
    model = build("mixtral")
    model.config._experts_implementation = "sonicmoe"  # never run: kernelize only reads the name
    report = kcatalog.kernelize(model)
    assert not experts_of(report)
    left = {item.module: item.reason for item in report.left if "Experts" in item.layer_class}
    assert list(left) == [f"model.layers.{i}.mlp.experts" for i in range(2)]
    assert all(reason.startswith("moe_experts: the model's experts implementation is 'sonicmoe', not one of None, ")
               for reason in left.values())  # fmt: skip
    assert model.config._experts_implementation == "sonicmoe"
    assert all(moe.OPS not in vars(module) and "forward" not in vars(module) for module in model.modules())
    kcatalog.unkernelize(model)
    assert model.config._experts_implementation == "sonicmoe"


def test_kernelize_twice_keeps_the_first_implementation_and_an_unbound_module_runs_its_own_loop(
    build: Callable[[str], Any],
) -> None:
    model = build("qwen3_moe")
    model.config._experts_implementation = "grouped_mm"
    ids = tokens()
    with torch.no_grad():
        ref = model(ids).logits
    kcatalog.kernelize(model)
    kcatalog.kernelize(model)  # undoes the first, then binds again: what it restores is still the model's own
    assert model.config._experts_implementation == moe.IMPLEMENTATION
    assert {vars(m)[moe.OPS].previous for m in model.modules() if moe.OPS in vars(m)} == {"grouped_mm"}
    kcatalog.unkernelize(model)
    assert model.config._experts_implementation == "grouped_mm"
    model.config._experts_implementation = moe.IMPLEMENTATION  # registered, but this model holds no handles
    with torch.no_grad():
        out = model(ids).logits
    model.config._experts_implementation = "eager"
    with torch.no_grad():
        assert torch.equal(out, model(ids).logits)  # the class's own loop
    assert relative_error(out, ref) <= default_catalog().info(moe.FUSED_EXPERTS).tolerance["float32"] * 10


def test_calls_with_weights_of_another_dtype_go_to_the_implementation_the_config_named_before(
    build: Callable[[str], Any],
) -> None:
    """bfloat16 experts in a float32 model: not the op's call; grouped_mm (the config's) casts the hidden states."""
    model = build("mixtral")
    model.config._experts_implementation = "grouped_mm"
    for module in model.modules():
        if type(module).__name__ == EXPERTS["mixtral"]:
            module.to(torch.bfloat16)
    ids = tokens()
    with torch.no_grad():
        ref = model(ids).logits
    report = kcatalog.kernelize(model)
    calls: list[str] = []
    for item in experts_of(report):
        module = model.get_submodule(item.module)
        bound = vars(module)[moe.OPS]
        module.__dict__[moe.OPS] = dataclasses.replace(bound, fused_experts=counted(bound.fused_experts, calls))
    assert model.config._experts_implementation == moe.IMPLEMENTATION
    with torch.no_grad():
        out = model(ids).logits
    assert calls == [] and torch.equal(out, ref)
    kcatalog.unkernelize(model)
