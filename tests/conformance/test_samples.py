"""Declared samples: size expressions, the size sets they span, and the inputs built from them."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from catalog_builder import Workspace
from conformance_support import declare_op, run_cli

import kcatalog
from kcatalog import check_catalog
from kcatalog.link.samples import evaluate, expression_names  # unit tests of sample expressions: internal on purpose
from kcatalog.link.signature import read_parameters  # the parameters build_call reads, as the linker reads them
from kcatalog.tools.inputs import build_call, samples_of, size_sets  # and of the size sets and inputs from samples
from kcatalog.validate.schema import SamplesDecl, TensorArgDecl


@pytest.mark.parametrize(
    ("expr", "env", "value"),
    [
        ("2*H", {"H": 3}, 6),
        ("$D", {"D": 64}, 64),
        ("HQ*D", {"HQ": 4, "D": 64}, 256),
        ("(T+1)*2 - 3", {"T": 4}, 7),
        ("H//3", {"H": 10}, 3),
        ("H/4", {"H": 10}, 2.5),
        ("$NEOX", {"NEOX": False}, False),
        ("$APPROX", {"APPROX": "tanh"}, "tanh"),
        (4096, {}, 4096),
        (0.5, {}, 0.5),
    ],
)
def test_evaluate(expr: object, env: dict[str, Any], value: object) -> None:
    assert evaluate(expr, env) == value
    assert type(evaluate(expr, env)) is type(value)


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("2*H", {"H"}),
        ("$P", {"P"}),
        ("HQ*D + HK*D", {"HQ", "HK", "D"}),
        ("4096", set()),
        ("-P", {"P"}),
        (64, set()),
    ],
)
def test_expression_names(expr: object, names: set[str]) -> None:
    assert expression_names(expr) == names


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("2**H", "'2**H' uses Pow; only + - * / // and unary - on names and numbers"),
        ("+H", "'+H' uses UAdd; only + - * / // and unary - on names and numbers"),
        ("H % 2", "'H % 2' uses Mod; only + - * / // and unary - on names and numbers"),
        ("H.real", "'H.real' uses Attribute; only + - * / // and unary - on names and numbers"),
        ("__import__('os')", "'__import__('os')' uses Call; only + - * / // and unary - on names and numbers"),
        ("T*", "'T*' is not an arithmetic expression"),
    ],
)
def test_expression_names_refuses_anything_but_arithmetic(expr: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        expression_names(expr)


def test_evaluate_refuses_a_call_even_unchecked() -> None:
    with pytest.raises(ValueError, match=r"^unsupported expression node Call$"):
        evaluate("__import__('os')", {})


# -- size sets ------------------------------------------------------------------------------------------

SAMPLES = SamplesDecl(
    sizes={"T": (1, 7), "H": (64, 1000), "NEOX": (True,)},
    args={},
    decode={"T": (8,)},
    prefill={"T": (4096, 16384), "H": (8192,)},
)


def test_size_sets_are_the_cross_product_in_declaration_order() -> None:
    assert size_sets(SAMPLES) == [
        {"T": 1, "H": 64, "NEOX": True},
        {"T": 1, "H": 1000, "NEOX": True},
        {"T": 7, "H": 64, "NEOX": True},
        {"T": 7, "H": 1000, "NEOX": True},
    ]


def test_decode_and_prefill_override_only_the_sizes_they_name() -> None:
    assert size_sets(SAMPLES, "decode") == [{"T": 8, "H": 64, "NEOX": True}, {"T": 8, "H": 1000, "NEOX": True}]
    assert size_sets(SAMPLES, "prefill") == [
        {"T": 4096, "H": 8192, "NEOX": True},
        {"T": 16384, "H": 8192, "NEOX": True},
    ]
    assert size_sets(SAMPLES, "test") == size_sets(SAMPLES)


def test_no_sizes_is_one_empty_size_set() -> None:
    assert size_sets(SamplesDecl(args={"x": TensorArgDecl(shape=(4,))})) == [{}]


def test_shipped_size_sets() -> None:
    catalog = kcatalog.load_catalog()
    rotary = samples_of(catalog.info("attention.rotary_embedding"))
    assert rotary is not None
    assert len(size_sets(rotary)) == 2 * 2 * 2  # T x ROT x NEOX; the other sizes have one value
    assert size_sets(rotary, "decode") == [
        {"T": t, "HQ": 32, "HK": 8, "D": 128, "ROT": 128, "P": 4096, "NEOX": True} for t in (1, 8, 64)
    ]
    gelu = samples_of(catalog.info("activation.gelu_and_mul"))
    assert gelu is not None
    assert {s["APPROX"] for s in size_sets(gelu)} == {"none", "tanh"}
    assert {s["APPROX"] for s in size_sets(gelu, "prefill")} == {"tanh"}


# -- building inputs ------------------------------------------------------------------------------------


def test_build_call_follows_the_tensor_specs() -> None:
    info = kcatalog.load_catalog().info("attention.rotary_embedding")
    samples = samples_of(info)
    assert samples is not None
    sizes = {"T": 33, "HQ": 4, "HK": 2, "D": 64, "ROT": 32, "P": 128, "NEOX": False}
    call = build_call(info, samples, sizes, "bfloat16", "cpu", seed=1)
    args = call.kwargs
    assert list(args) == ["positions", "query", "key", "head_size", "cos_sin_cache", "is_neox"]  # signature order
    assert (args["head_size"], args["is_neox"]) == (64, False)  # '$D' and '$NEOX'
    assert (args["positions"].dtype, tuple(args["positions"].shape)) == (torch.int64, (33,))
    assert 0 <= int(args["positions"].min()) and int(args["positions"].max()) < 128  # range [0, P)
    assert (args["query"].dtype, tuple(args["query"].shape)) == (torch.bfloat16, (33, 4 * 64))  # the dtype under test
    assert (args["key"].dtype, tuple(args["key"].shape)) == (torch.bfloat16, (33, 2 * 64))
    assert (args["cos_sin_cache"].dtype, tuple(args["cos_sin_cache"].shape)) == (torch.float32, (128, 32))  # pinned
    for name in ("query", "key", "cos_sin_cache"):  # the default range [-1, 1), give or take rounding
        assert -1 <= float(args[name].min()) and float(args[name].max()) <= 1


def fake_info(signature: str) -> Any:
    """build_call reads only the parameters of an op, which the linker reads from its signature."""
    return SimpleNamespace(id="g.op", signature=signature, parameters=read_parameters(signature))


def test_integer_ranges_include_low_and_exclude_high() -> None:
    samples = SamplesDecl(
        sizes={"N": (4000,), "P": (3,)},
        args={
            "p": TensorArgDecl(shape=("N",), dtype="int32", range=(0, "P")),
            "q": TensorArgDecl(shape=("N",), dtype="int64", range=("P-5", "P-2")),
        },
    )
    call = build_call(
        fake_info("(p: Tensor, q: Tensor) -> Tensor"), samples, size_sets(samples)[0], "float16", "cpu", seed=0
    )
    assert call.kwargs["p"].dtype == torch.int32
    assert set(call.kwargs["p"].unique().tolist()) == {0, 1, 2}
    assert set(call.kwargs["q"].unique().tolist()) == {-2, -1, 0}


def test_float_ranges_and_expressions_in_shapes() -> None:
    samples = SamplesDecl(
        sizes={"T": (5,), "I": (32,), "W": (2,)},
        args={"x": TensorArgDecl(shape=("T", "2*I"), range=("W/2", "W*3")), "scale": "$W"},
    )
    call = build_call(
        fake_info("(x: Tensor, scale: float) -> Tensor"), samples, size_sets(samples)[0], "float64", "cpu", seed=0
    )
    x = call.kwargs["x"]
    assert (x.dtype, tuple(x.shape)) == (torch.float64, (5, 64))
    assert 1.0 <= float(x.min()) and float(x.max()) < 6.0
    assert float(x.max()) - float(x.min()) > 4.0  # spread over the range, not a constant
    assert call.kwargs["scale"] == 2


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_float_ranges_stay_half_open_after_rounding_to_the_dtype(dtype: str) -> None:
    samples = SamplesDecl(args={"x": TensorArgDecl(shape=(20000,), range=(-1.0, 1.0))})
    x = build_call(fake_info("(x: Tensor) -> Tensor"), samples, {}, dtype, "cpu", seed=0).kwargs["x"]
    assert float(x.min()) >= -1.0
    assert float(x.max()) < 1.0


def test_keyword_only_parameters_are_passed_by_name() -> None:
    samples = SamplesDecl(args={"x": TensorArgDecl(shape=(3,)), "eps": 0.5})
    call = build_call(fake_info("(x: Tensor, *, eps: float = 1.0) -> Tensor"), samples, {}, "float32", "cpu", 0)

    def kernel(x: torch.Tensor, *, eps: float = 1.0) -> torch.Tensor:
        return x + eps

    assert torch.equal(call.invoke(kernel), call.kwargs["x"] + 0.5)


def test_an_omitted_optional_parameter_does_not_shift_the_next() -> None:
    samples = SamplesDecl(args={"x": TensorArgDecl(shape=(3,)), "bias": 0.5})  # scale left to its default
    call = build_call(
        fake_info("(x: Tensor, scale: float = 2.0, bias: float = 0.0) -> Tensor"), samples, {}, "float32", "cpu", 0
    )

    def kernel(x: torch.Tensor, scale: float = 2.0, bias: float = 0.0) -> torch.Tensor:
        return x * scale + bias

    assert torch.equal(call.invoke(kernel), call.kwargs["x"] * 2.0 + 0.5)


def test_a_size_set_that_cannot_be_built_fails_its_check_and_the_run_goes_on(workspace: Workspace) -> None:
    module = workspace.module("kc_conformance_sample_kernels", "def twice(x, idx):\n    return 2 * x\n")
    catalog = workspace.write(
        {
            "scale2": declare_op(
                module,
                {"torch": "twice", "same": "twice"},
                signature="(x: Tensor, idx: Tensor) -> Tensor",
                samples={
                    "sizes": {"T": [4], "N": [3, 0]},
                    "args": {"x": {"shape": ["T", 8]}, "idx": {"shape": ["T"], "dtype": "int64", "range": [0, "N"]}},
                },
            )
        },
        backends=["torch", "same"],
        group="t",
    )
    result = run_cli("test", "--catalog", catalog, "--seed", "1")
    assert result.code == 1, result.err
    assert re.search(r"^t\.scale2 +same +float32 +T=4 N=3 .* ok$", result.out, re.M), result.out
    assert re.search(
        r"^FAIL t\.scale2 \[same\] float32 T=4 N=0: could not build the inputs: RuntimeError: random_ "
        r"expects 'from' to be less than 'to', but got from=0 >= to=0 \(seed 1; ",
        result.out,
        re.M,
    )
    assert result.out.splitlines()[-1] == "2 checks, 1 failed."


# -- malformed expressions are refused at load ----------------------------------------------------------

MALFORMED = """\
kcatalog: 1
group: t
ops:
  a:
    description: a throwaway op
    signature: "(x: Tensor, idx: Tensor, n: int = 1) -> Tensor"
    reference: torch
    dtypes: [float32]
    samples:
      sizes: {T: [4], H: [16]}
      args:
        x: {shape: [T, "2**H"]}
        idx: {shape: ["T*"], dtype: int64, range: [0, "P"]}
        n: "$H.real"
      decode: {B: [1]}
    backends:
      torch: {target: "kcatalog.kernels.torch.layernorm:rms_norm"}
"""


def test_malformed_size_expressions_are_refused_at_load_with_kc210(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = workspace.files(
        {"kcatalog.yaml": "kcatalog: 1\nbackends: {torch: {description: r}}\npriority: [torch]\n", "t.yaml": MALFORMED}
    )
    monkeypatch.chdir(directory)
    catalog, diagnostics = check_catalog([directory])
    assert catalog is None
    assert [str(d) for d in diagnostics] == [
        "t.yaml:12:9: KC210 samples of op 't.a', argument 'x': '2**H' uses Pow; only + - * / // and unary - on names and numbers",
        "t.yaml:13:9: KC210 samples of op 't.a', argument 'idx': 'T*' is not an arithmetic expression",
        "t.yaml:13:9: KC210 samples of op 't.a', argument 'idx': unknown size P (sizes: H, T)",
        "t.yaml:14:9: KC210 samples of op 't.a', argument 'n': '$H.real' uses Attribute; only + - * / // and unary - on "
        "names and numbers",
        "t.yaml:15:16: KC210 samples of op 't.a': decode sets size 'B', which 'sizes' does not define (H, T)",
    ]
    refused = run_cli("test", "--catalog", directory)
    assert refused.code == 1
    assert refused.out == ""
    assert "t.yaml:12:9: KC210 " in refused.err
