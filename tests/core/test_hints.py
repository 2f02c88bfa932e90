"""The one did-you-mean helper every name check uses: another case, a known alias, the nearest spelling, no guess
between equals, and only a near-typo among hundreds of installed modules."""

from __future__ import annotations

import pytest

from kcatalog.errors import did_you_mean, nearest
from kcatalog.platform import DEVICES

DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int64", "int32", "bool")


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("CUDA", "cuda"),  # another case
        ("cdua", "cuda"),  # a typo
        ("rocm", "hip"),  # an alias
        ("gpu", "cuda"),  # an alias, not 'xpu', which difflib's ratio finds
        ("tpu", None),  # cpu, npu and xpu are equally near: no guess
        ("sm_90", None),
    ],
)
def test_devices(name: str, meant: str | None) -> None:
    assert nearest(name, DEVICES) == meant


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("fp16", "float16"),
        ("half", "float16"),
        ("bf16", "bfloat16"),
        ("fp32", "float32"),
        ("float", "float32"),
        ("fp8", "float8_e4m3fn"),
        ("e5m2", "float8_e5m2"),
        ("torch.bfloat16", "bfloat16"),
        ("Float16", "float16"),
        ("bfloat61", "bfloat16"),
        ("float128", None),
    ],
)
def test_dtypes(name: str, meant: str | None) -> None:
    assert nearest(name, DTYPES) == meant


def test_an_alias_is_named_only_where_it_is_a_candidate() -> None:
    assert nearest("fp16", ("float32", "bfloat16")) is None


def test_the_name_itself_is_no_hint() -> None:
    assert did_you_mean("cuda", DEVICES) == ""
    assert did_you_mean("cdua", DEVICES) == " (did you mean 'cuda'?)"


INSTALLED = ("zlib", "kcatalog", "torch", "numpy", "triton", "pydantic", "yaml", "kc_corpus_allowed")


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("kcatalg", "kcatalog"),
        ("torhc", "torch"),  # two neighbours swapped: one edit
        ("trition", "triton"),
        ("pydnatic", "pydantic"),
        ("mylib", None),  # not 'zlib': two edits in five letters are another name
        ("kc_corpus_allowed_extra", None),  # a longer name, not a misspelling
        ("mykernels", None),
    ],
)
def test_typo_mode_for_installed_modules(name: str, meant: str | None) -> None:
    assert nearest(name, INSTALLED, typo=True) == meant


def test_typo_mode_is_stricter_than_the_ratio() -> None:
    assert nearest("mylib", INSTALLED) == "zlib"  # difflib's ratio alone: 0.67
    assert nearest("mylib", INSTALLED, typo=True) is None
