"""Validating, loading, selecting, explaining and listing a catalog run none of its kernel code: only the first
call of a kernel, or of an op handle, imports it (and its package), once. Each run is a fresh interpreter, so
sys.modules starts clean; the kernel package writes a marker file named after each of its modules on import.

Op handles are generated from the manifest's signature: nothing of it is evaluated, and every argument reaches
the kernel whatever the parameters are called."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import kcatalog

if TYPE_CHECKING:
    from catalog_builder import Workspace

TRAP = """\
import os
from pathlib import Path

with open(Path(os.environ["KC_TRAP_MARKERS"]) / __name__, "a", encoding="utf-8") as marker:
    marker.write("imported\\n")


def kernel(*args, **kwargs):
    return __name__
"""

CATALOG = {
    "kcatalog.yaml": {
        "kcatalog": 1,
        "backends": {"fused": {"description": "Hopper only"}, "portable": {"description": "anywhere"}},
        "priority": ["fused", "portable"],
    },
    "g.yaml": {
        "kcatalog": 1,
        "group": "g",
        "ops": {
            "op": {
                "description": "an op whose every kernel module leaves a marker when imported",
                "signature": "(x: Tensor) -> Tensor",
                "reference": "portable",
                "dtypes": ["float32"],
                "backends": {
                    "fused": {
                        "target": "kc_trap.hopper:kernel",
                        "requires": ["pytest"],
                        "capabilities": [{"device": "cuda", "min_arch": "9.0"}],
                    },
                    "portable": {"target": "kc_trap.kern:kernel"},
                },
            }
        },
    },
}

# Run in the child: every step observes the markers and which kc_trap modules are imported.
CHILD = """\
import json, os, sys, types
from pathlib import Path

sys.modules["torch"] = None  # platform detection then answers 'cpu' at once, instead of importing torch (seconds)
import kcatalog
from kcatalog.tools.cli import main

catalog_dir, first_call, report = sys.argv[1:]
markers = Path(os.environ["KC_TRAP_MARKERS"])
steps = []


def observe(step, result=None):
    steps.append({
        "step": step,
        "result": result,
        "markers": {path.name: path.read_text().count("imported") for path in sorted(markers.iterdir())},
        "modules": sorted(name for name in sys.modules if name.partition(".")[0] == "kc_trap"),
    })


observe("validate", main(["validate", catalog_dir]))
observe("validate json", main(["validate", "--output-format", "json", catalog_dir]))
catalog = kcatalog.load_catalog([catalog_dir], require={"g.op": ["fused", "portable"]})
observe("load_catalog")
observe("select cuda:9.0", catalog.select("g.op", platform="cuda:9.0").chosen.backend)
observe("select this machine", catalog.select("g.op").chosen.backend)
observe("explain cuda:9.0", main(["explain", "g.op", "--platform", "cuda:9.0", "--catalog", catalog_dir]))
observe("explain --all", main(["explain", "--all", "--catalog", catalog_dir]))
observe("list", main(["list", catalog_dir]))
observe("list json", main(["list", "--output-format", "json", catalog_dir]))
handle = catalog.op("g.op")
observe("op handle made")
tensor = types.SimpleNamespace(device=types.SimpleNamespace(type="cpu"), dtype="float32", is_cuda=False, is_cpu=True)
call = (lambda: catalog.kernel("g.op")()) if first_call == "kernel" else (lambda: handle(tensor))
observe("first call", call())
observe("second call", call())
Path(report).write_text(json.dumps(steps))
"""

NOTHING_RAN = {"markers": {}, "modules": []}
KERNEL_RAN_ONCE = {"markers": {"kc_trap": 1, "kc_trap.kern": 1}, "modules": ["kc_trap", "kc_trap.kern"]}


@pytest.fixture
def trap_catalog(workspace: Workspace, tmp_path: Path) -> Path:
    """A catalog whose kernels live in kc_trap (in the workspace's site/), every module of which leaves a marker."""
    workspace.package("kc_trap", dict.fromkeys(("__init__", "kern", "hopper"), TRAP))
    (tmp_path / "markers").mkdir()
    return workspace.files(CATALOG)


@pytest.mark.parametrize("first_call", ["kernel", "handle"])
def test_only_the_first_call_imports_the_kernel(
    first_call: str, trap_catalog: Path, workspace: Workspace, tmp_path: Path
) -> None:
    env = workspace.child_env() | {"KC_TRAP_MARKERS": str(tmp_path / "markers")}
    report = tmp_path / "report.json"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(trap_catalog), first_call, str(report)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert json.loads(report.read_text()) == [
        {"step": "validate", "result": 0, **NOTHING_RAN},
        {"step": "validate json", "result": 0, **NOTHING_RAN},
        {"step": "load_catalog", "result": None, **NOTHING_RAN},
        {"step": "select cuda:9.0", "result": "fused", **NOTHING_RAN},
        {"step": "select this machine", "result": "portable", **NOTHING_RAN},
        {"step": "explain cuda:9.0", "result": 0, **NOTHING_RAN},
        {"step": "explain --all", "result": 0, **NOTHING_RAN},
        {"step": "list", "result": 0, **NOTHING_RAN},
        {"step": "list json", "result": 0, **NOTHING_RAN},
        {"step": "op handle made", "result": None, **NOTHING_RAN},
        {"step": "first call", "result": "kc_trap.kern", **KERNEL_RAN_ONCE},
        {"step": "second call", "result": "kc_trap.kern", **KERNEL_RAN_ONCE},
    ]


# -- op handles are generated from the manifest's signature ----------------------------------------------------

ECHO = """
def kernel(*args, **kwargs):
    return args, kwargs
"""


@pytest.mark.parametrize(
    "default",
    [
        "__import__('os').system('touch MARKER')",
        "open('MARKER', 'w')",
        "(lambda: open('MARKER', 'w'))()",
        "[open('MARKER', 'w') for _ in '1'][0]",
    ],
)
def test_signature_defaults_are_never_evaluated(default: str, workspace: Workspace, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    marker = tmp_path / "MARKER-created-by-a-signature-default"
    workspace.module("kc_hard_echo", ECHO)
    signature = f"(x: Tensor, y: int = {default.replace('MARKER', str(marker))}) -> Tensor"
    op = workspace.op({"only": "kc_hard_echo:kernel"}, signature=signature)
    catalog = kcatalog.load_catalog([workspace.write({"op": op}, backends=["only"])])
    handle = catalog.op("g.op")
    x = torch.zeros(1)
    assert handle(x) == ((x,), {})  # the default is the kernel's business: the handle passes what it was given
    assert handle(x, 3) == ((x, 3), {})
    assert not marker.exists()


@pytest.mark.parametrize(
    "name",
    [
        "tensor",
        "args",
        "kwargs",
        "handle",
        "self",
        "dtype",
        "device",
        "table",
        "key",
        "lock",
        "fn",
    ],
)
def test_handles_pass_every_argument_whatever_its_name(name: str, workspace: Workspace) -> None:
    torch = pytest.importorskip("torch")
    workspace.module("kc_hard_echo", ECHO)
    op = workspace.op(
        {"only": "kc_hard_echo:kernel"}, signature=f"(x: Tensor, {name}: int = 0, *, k: int = 1) -> Tensor"
    )
    catalog = kcatalog.load_catalog([workspace.write({"op": op}, backends=["only"])])
    handle = catalog.op("g.op")
    x = torch.zeros(1)
    for _ in range(2):  # the first call resolves the kernel, the second takes the cached path
        assert handle(x, 5, k=2) == ((x, 5), {"k": 2})
        assert handle(x) == ((x, 0), {"k": 1})
