"""A throwaway Python kernel registry in the shape real engines have (SGLang's `sglang.kernels`): enum backends
and devices, `(major, minor)` arch tuples, dotted `Class.method` targets, shared priority tuples that name
backends an op lacks, and a backend (`torch_compile`) the registry never picks by itself.

`write_registry` writes it as a package under a directory (put that on sys.path to import it); its module
`registry.py` fills `REGISTRY` as a side effect of being imported, as such registries do, and `REGISTRY.select`
is the registry's own selection rule, to compare kcatalog's with. Used by tests/migrate and
benchmarks/import_registry.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GROUPS = ("norm", "act", "attn", "moe", "quant")

_REGISTRY = '''\
"""A kernel registry filled at import, as engines do."""

import enum
from dataclasses import dataclass


class Backend(enum.Enum):
    TORCH = "torch"
    TRITON = "triton"
    KDA = "KDA"
    AITER = "aiter"
    TORCH_COMPILE = "torch_compile"
    PLUGIN = "plugin"  # declared, and no spec uses it yet (as SGLang's plugin and torch_npu)


class Device(enum.Enum):
    CUDA = "cuda"
    HIP = "hip"
    MUSA = "musa"


@dataclass(frozen=True)
class Capability:
    device: Device
    min_cuda_arch: tuple = None
    max_cuda_arch: tuple = None


@dataclass(frozen=True)
class KernelSpec:
    op: str
    backend: Backend
    target: str
    capabilities: frozenset = frozenset()
    auto: bool = True  # False: never picked by select(); used only when named


NV_FIRST = (Backend.KDA, Backend.TRITON, Backend.TORCH_COMPILE, Backend.TORCH)
AMD_FIRST = (Backend.AITER, Backend.TRITON, Backend.TORCH)
PLAIN = (Backend.TRITON, Backend.TORCH)


class Registry:
    def __init__(self):
        self._specs = {}
        self.priority = {}

    def register(self, spec):
        self._specs[(spec.op, spec.backend)] = spec

    def all_specs(self):
        return list(self._specs.values())

    def get_backend(self, op, backend):
        return self._specs[(op, backend)]

    def select(self, op, device, arch=None):
        """The registry's own rule: the op's priority first, then declaration order; auto specs only."""
        specs = {s.backend: s for s in self._specs.values() if s.op == op}
        order = [b for b in self.priority.get(op, ()) if b in specs] + list(specs)
        for backend in order:
            spec = specs[backend]
            if spec.auto and (not spec.capabilities or any(_fits(c, device, arch) for c in spec.capabilities)):
                return spec
        return None


def _fits(cap, device, arch):
    if cap.device.value != device:
        return False
    if cap.min_cuda_arch is not None and (arch is None or arch < cap.min_cuda_arch):
        return False
    return cap.max_cuda_arch is None or (arch is not None and arch <= cap.max_cuda_arch)


REGISTRY = Registry()
GROUPS = @GROUPS@
BROKEN = @BROKEN@


def _target(group, backend, name):
    target = f"@PACKAGE@.kernels_{group}:{backend.name.title().replace('_', '')}Kernels.{name}"
    return target + "_typo" if (group, name, backend.value) == BROKEN else target


def _register_all(ops_per_group):
    cuda, hip, musa = Device.CUDA, Device.HIP, Device.MUSA
    for group in GROUPS:
        for i in range(ops_per_group):
            name, op = f"op_{i}", f"{group}.op_{i}"
            add = lambda backend, caps=(), **kw: REGISTRY.register(
                KernelSpec(op, backend, _target(group, backend, name), frozenset(caps), **kw)
            )
            add(Backend.TORCH)
            if i % 4 != 3:
                caps = [Capability(cuda, (8, 0)), Capability(hip)] + ([Capability(musa)] if i % 5 == 0 else [])
                add(Backend.TRITON, caps)
            if i % 6 == 0:
                add(Backend.KDA, [Capability(cuda, (9, 0), (10, 3))])
            elif i % 6 == 3:
                add(Backend.KDA, [Capability(cuda, (10, 0))])
            if i % 3 == 1:
                add(Backend.AITER, [Capability(hip)])
            if i % 2 == 0:
                add(Backend.TORCH_COMPILE, [Capability(cuda, (7, 0))], auto=False)
            if i % 3 == 0:
                REGISTRY.priority[op] = NV_FIRST
            elif i % 3 == 1:
                REGISTRY.priority[op] = AMD_FIRST
            elif i % 6 == 2:
                REGISTRY.priority[op] = PLAIN


_register_all(@OPS@)
'''


@dataclass(frozen=True)
class RegistryFiles:
    """Where the throwaway registry lives: `root` goes on sys.path; `reference` is 'module:object'."""

    root: Path
    package: str
    reference: str


def _kernels(group: str, ops_per_group: int) -> str:
    lines = [f'"""Kernels of the {group} group: one class per backend, one method per op."""', ""]
    for backend in ("Torch", "Triton", "Kda", "Aiter", "TorchCompile"):
        lines += ["", f"class {backend}Kernels:"]
        for i in range(ops_per_group):
            lines += ["    @staticmethod", f"    def op_{i}(x, *args, **kwargs):", "        return x", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_registry(
    root: Path,
    *,
    ops_per_group: int = 30,
    package: str = "kcmig_reg",
    broken: tuple[str, str, str] | None = None,
) -> RegistryFiles:
    """Write the registry package under `root`; `broken` (group, op name, backend value) misspells that target."""
    directory = root / package
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "__init__.py").write_text('"""A throwaway kernel registry."""\n', encoding="utf-8")
    text = _REGISTRY
    for placeholder, value in (("@GROUPS@", repr(GROUPS)), ("@BROKEN@", repr(broken)), ("@OPS@", str(ops_per_group))):
        text = text.replace(placeholder, value)
    text = text.replace("@PACKAGE@", package)
    (directory / "registry.py").write_text(text, encoding="utf-8")
    for group in GROUPS:
        (directory / f"kernels_{group}.py").write_text(_kernels(group, ops_per_group), encoding="utf-8")
    return RegistryFiles(root, package, f"{package}.registry:REGISTRY")
