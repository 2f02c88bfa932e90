"""Platform: parsing 'device:arch' text, detecting this machine, and keeping torch out of a plain load."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kcatalog import Platform


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cuda:9.0", Platform("cuda", "9.0")),
        ("cuda:10.0", Platform("cuda", "10.0")),
        ("hip:gfx942", Platform("hip", "gfx942")),
        ("cpu", Platform("cpu")),
        ("npu", Platform("npu")),
        ("xpu", Platform("xpu")),
        ("mps", Platform("mps")),
    ],
)
def test_parse(text: str, expected: Platform) -> None:
    platform = Platform.parse(text)
    assert platform == expected
    assert str(platform) == text


def test_parse_of_a_device_without_arch_has_arch_none() -> None:
    assert Platform.parse("cuda").arch is None
    assert Platform.parse("cpu:").arch is None


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("tpu", ""),  # cpu, npu and xpu are equally near: no guess
        ("gpu:9.0", " (did you mean 'cuda:9.0'?)"),  # an alias
        ("CUDA:9.0", " (did you mean 'cuda:9.0'?)"),  # another case
        ("cdua", " (did you mean 'cuda'?)"),  # a typo
        ("", ""),
        ("sm_90", ""),
    ],
)
def test_parse_of_an_unknown_device_names_the_valid_ones(text: str, hint: str) -> None:
    device = text.partition(":")[0]
    with pytest.raises(ValueError) as raised:
        Platform.parse(text)
    assert str(raised.value) == (
        f"unknown device '{device}' in platform '{text}'{hint}; expected one of cuda, hip, cpu, npu, xpu, mps, musa"
    )


@pytest.mark.parametrize("text", ["cuda:sm90", "cuda:9.x", "cuda:gfx942"])
def test_parse_of_a_malformed_cuda_arch(text: str) -> None:
    arch = text.partition(":")[2]
    with pytest.raises(
        ValueError, match=rf"^cuda arch '{arch}' in platform '{text}' is not 'major\.minor', e\.g\. cuda:9\.0$"
    ):
        Platform.parse(text)


def test_detect_on_this_cpu_machine_gives_cpu() -> None:
    torch = pytest.importorskip("torch")
    accelerator = getattr(torch, "accelerator", None)
    if torch.cuda.is_available() or (accelerator is not None and accelerator.is_available()):
        pytest.skip("this machine has an accelerator")
    assert Platform.detect() == Platform("cpu")


def test_load_and_select_import_no_torch_but_detect_does() -> None:
    # A finder that records, then refuses, every import of torch: detect() must ask for it, a load must not.
    # (Refusing keeps the subprocess fast: a real torch import costs seconds.)
    script = textwrap.dedent(
        """
        import sys

        asked = []

        class RefuseTorch:
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in ("torch", "triton"):
                    asked.append(name)
                    raise ImportError(f"{name} refused by the test")
                return None

        sys.meta_path.insert(0, RefuseTorch())

        import kcatalog

        catalog = kcatalog.load_catalog()
        catalog.select("layernorm.rms_norm", "cuda:9.0")  # an explicit platform needs no torch either
        kernels = sorted(name for name in sys.modules if name.startswith("kcatalog.kernels"))
        assert not asked, f"a plain load asked for {asked}"
        assert not kernels, f"a plain load imported {kernels}"
        print(kcatalog.Platform.detect())
        assert asked == ["torch"], asked
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "cpu\n"  # what detect() falls back to without torch
