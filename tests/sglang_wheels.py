"""SGLang's real code, for the tests that check kcatalog against it: the wheels of SGLang 0.5.23 and of the
sglang-kernel 0.4.10 it pins, from the package index (`pip download --no-deps`), unpacked once into pytest's cache
(only their Python sources: a few MB). A test using them skips only where the package index cannot be reached,
and says so; any other failure of pip fails it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SGLANG = "0.5.23"
SGL_KERNEL = "0.4.10"
# The one wheel SGLang publishes for 0.5.23: its Python sources are the same for every interpreter and platform.
_SGLANG_WHEEL = [
    "--only-binary=:all:",
    "--platform",
    "manylinux_2_34_x86_64",
    "--python-version",
    "3.11",
    "--abi",
    "cp311",
]
# sglang-kernel's one Linux wheel (abi3, from CPython 3.10): its Python wrappers, whatever runs the tests.
_SGL_KERNEL_WHEEL = [
    "--only-binary=:all:",
    "--platform",
    "manylinux2014_x86_64",
    "--implementation",
    "cp",
    "--python-version",
    "3.10",
    "--abi",
    "abi3",
]


def unreachable(pip_output: str, project: str) -> str | None:
    """Why the package indexes pip looked in cannot be reached, or None when one answers (then pip failed for
    another reason, which is a failure)."""
    looked = next((line for line in pip_output.splitlines() if line.startswith("Looking in indexes:")), "")
    urls = [url.strip() for url in looked.partition(":")[2].split(",") if url.strip().startswith("http")]
    problems = []
    for url in urls or ["https://pypi.org/simple"]:
        try:
            urllib.request.urlopen(f"{url.rstrip('/')}/{project}/", timeout=20).close()
        except urllib.error.HTTPError:
            return None  # it answered
        except OSError as exc:  # URLError, timeouts, refused connections
            problems.append(f"{url}: {exc}")
        else:
            return None
    return "; ".join(problems)


def cache_for(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """pytest's cache directory `name` (kept between runs), or a temporary one under -p no:cacheprovider."""
    config_cache = getattr(config, "cache", None)
    return Path(config_cache.mkdir(name)) if config_cache else tmp_path_factory.mktemp(name)


@contextmanager
def _wheel(project: str, version: str, wheel: list[str]) -> Iterator[zipfile.ZipFile]:
    """The project's wheel, downloaded into a temporary directory removed afterwards."""
    with tempfile.TemporaryDirectory() as download:
        requirement = f"{project}=={version}"
        command = [sys.executable, "-m", "pip", "download", requirement, "--no-deps", *wheel, "-d", download]
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            output = result.stdout + result.stderr
            reason = unreachable(output, project)
            if reason is not None:
                pytest.skip(f"the package index cannot be reached to download {requirement}: {reason}")
            pytest.fail(f"pip download {requirement} failed:\n{output}")
        (found,) = Path(download).glob("*.whl")
        with zipfile.ZipFile(found) as archive:
            yield archive


def _unpacked(site: Path, fill: Callable[[Path], None]) -> Path:
    """`site`, filled by `fill` into a staging directory beside it and renamed into place: whole or not at all,
    so that a half-unpacked tree is never taken for the package."""
    staging = Path(tempfile.mkdtemp(dir=site.parent))
    try:
        fill(staging)
        shutil.rmtree(site, ignore_errors=True)
        staging.rename(site)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return site


def sglang_site(cache: Path) -> Path:
    """A directory holding SGLang's `sglang/kernels` as its wheel has it: found in `cache`, or downloaded (about
    40 MB, without SGLang's dependencies) and unpacked there."""
    site = cache / "site"
    if (site / "sglang" / "kernels" / "registry.py").is_file():
        return site

    def fill(staging: Path) -> None:
        with _wheel("sglang", SGLANG, _SGLANG_WHEEL) as archive:
            archive.extractall(staging, [name for name in archive.namelist() if name.startswith("sglang/kernels/")])
        # SGLang's own sglang/__init__.py imports its server runtime; the kernels need none of it.
        (staging / "sglang" / "__init__.py").write_text('"""SGLang\'s kernels only."""\n', encoding="utf-8")

    return _unpacked(site, fill)


def sgl_kernel_site(cache: Path) -> Path:
    """A directory holding sglang-kernel's `sgl_kernel` package: its Python sources as the wheel has them, and
    each of its compiled extension modules as an empty file of the same name (found as compiled, never loaded).
    Found in `cache`, or downloaded (the wheel is about 370 MB) and unpacked there."""
    site = cache / "site"
    if (site / "sgl_kernel" / "__init__.py").is_file():
        return site

    def fill(staging: Path) -> None:
        with _wheel("sglang-kernel", SGL_KERNEL, _SGL_KERNEL_WHEEL) as archive:
            names = [name for name in archive.namelist() if name.startswith("sgl_kernel/")]
            archive.extractall(staging, [name for name in names if name.endswith(".py")])
            for name in names:
                if name.endswith(".so"):
                    (staging / name).parent.mkdir(parents=True, exist_ok=True)
                    (staging / name).write_bytes(b"")

    return _unpacked(site, fill)
