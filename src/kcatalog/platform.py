"""Platforms (device kind + architecture) and which capabilities they satisfy."""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from types import MappingProxyType

from .distributions import installed, version
from .errors import nearest
from .model import Capability, Environment

# The built-in device kinds; a catalog's settings may declare more (`devices:`).
DEVICES = ("cuda", "hip", "cpu", "npu", "xpu", "mps", "musa")


def known_devices(declared: Collection[str] = ()) -> tuple[str, ...]:
    """The device kinds a catalog knows: the built-in ones, then those its settings declare."""
    return (*DEVICES, *(device for device in declared if device not in DEVICES))


# The rule for a platform whose architecture is unknown (e.g. `--platform cuda`): it satisfies a capability that
# names no architecture, and no capability that does (an arch window or a list of archs). SGLang's registry
# treats an unknown arch as inside every window; kcatalog refuses to guess, and `explain` says the rule applied.
UNKNOWN_ARCH_RULE = "an unknown arch satisfies no arch window or arch list"
_CUDA_ARCH = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})")


def _arch_tuple(arch: str) -> tuple[int, ...]:
    return tuple(int(part) for part in arch.split("."))


@dataclass(frozen=True)
class Platform:
    """A device kind ('cuda', 'hip', 'cpu', ...) and its architecture ('9.0', 'gfx942', or None)."""

    device: str
    arch: str | None = None

    def __str__(self) -> str:
        return f"{self.device}:{self.arch}" if self.arch else self.device

    @classmethod
    def parse(cls, text: str, devices: Collection[str] = DEVICES) -> Platform:
        """Read 'cuda:9.0', 'hip:gfx942', 'cpu'; ValueError naming the valid devices (`devices`) otherwise.

        A CUDA arch is two numbers, written as torch reports them: 'cuda:9.00' is cuda:9.0, so that a plan or a
        table made for it applies where the machine says 9.0."""
        device, _, arch = text.strip().partition(":")
        if device not in devices:
            found = nearest(device, devices)
            hint = f" (did you mean '{found}{text.strip()[len(device) :]}'?)" if found is not None else ""
            raise ValueError(
                f"unknown device '{device}' in platform '{text}'{hint}; expected one of {', '.join(devices)}"
            )
        if device == "cuda" and arch:
            numbers = _CUDA_ARCH.fullmatch(arch)  # ASCII digits: int() takes any
            if numbers is None:
                raise ValueError(f"cuda arch '{arch}' in platform '{text}' is not 'major.minor', e.g. cuda:9.0")
            arch = f"{int(numbers[1])}.{int(numbers[2])}"
        return cls(device, arch or None)

    @classmethod
    def detect(cls) -> Platform:
        """The platform of this process's current accelerator; imports torch, so only call on first use."""
        try:
            import torch
        except ImportError:
            return cls("cpu")
        if torch.cuda.is_available():
            if getattr(torch.version, "hip", None):
                name = torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName
                return cls("hip", name.split(":")[0])
            major, minor = torch.cuda.get_device_capability()
            return cls("cuda", f"{major}.{minor}")
        for device in ("xpu", "npu", "musa", "mps"):
            backend = getattr(torch, device, None) or getattr(torch.backends, device, None)
            if backend is not None and getattr(backend, "is_available", lambda: False)():
                return cls(device)
        return cls("cpu")

    def environment(self, distributions: Iterable[str] = ()) -> Environment:
        """What timings on this platform depend on here besides the kernels' source: the device's name and
        multiprocessors, and the versions of `distributions` installed (and torch's); imports torch."""
        names = ["torch", *(d for d in distributions if d != "torch")]
        device, sms = self.device, None
        try:
            import torch
        except ImportError:
            return Environment(device, None, MappingProxyType({name: version(name) for name in names}))
        if self.device in ("cuda", "hip") and torch.cuda.is_available():
            properties = torch.cuda.get_device_properties(torch.cuda.current_device())
            device, sms = properties.name, properties.multi_processor_count
        return Environment(device, sms, MappingProxyType({name: version(name) for name in names}))

    def mismatch(self, capabilities: tuple[Capability, ...]) -> str | None:
        """Why no capability covers this platform, or None when one does (empty means anywhere)."""
        return _mismatch(self, capabilities) if capabilities else None


PlatformLike = Platform | str  # a Platform, or its text ("cuda:9.0")


@functools.lru_cache(maxsize=4096)  # a catalog has a handful of distinct capability sets, checked per op
def _mismatch(platform: Platform, capabilities: tuple[Capability, ...]) -> str | None:
    reasons = []
    for cap in capabilities:
        reason = _capability_mismatch(platform, cap)
        if reason is None:
            return None
        reasons.append(reason)
    return "; ".join(dict.fromkeys(reasons))


def _capability_mismatch(platform: Platform, cap: Capability) -> str | None:
    if cap.device != platform.device:
        return f"runs on {_describe(cap)}, not {platform.device}"
    if cap.archs is None and cap.min_arch is None and cap.max_arch is None:
        return None
    if platform.arch is None:
        return f"needs {_describe(cap)}; the arch of {platform} is unknown, and {UNKNOWN_ARCH_RULE}"
    if cap.archs is not None and platform.arch not in cap.archs:
        return f"needs {cap.device} arch in {', '.join(cap.archs)}; this is {platform}"
    if cap.min_arch is None and cap.max_arch is None:
        return None
    arch = _arch_tuple(platform.arch)
    if cap.min_arch is not None and arch < _arch_tuple(cap.min_arch):
        return f"needs {_describe(cap)}; this is {platform}"
    if cap.max_arch is not None and arch > _arch_tuple(cap.max_arch):
        return f"needs {_describe(cap)}; this is {platform}"
    return None


def contending(capabilities: dict[str, tuple[Capability, ...]]) -> list[str]:
    """The backends (name -> capabilities) that share some platform with another one: where an order among them
    decides which runs. An empty capability set runs anywhere."""
    names = list(capabilities)
    return [
        name
        for name in names
        if any(other != name and _share(capabilities[name], capabilities[other]) for other in names)
    ]


def _share(first: tuple[Capability, ...], second: tuple[Capability, ...]) -> bool:
    return not first or not second or any(_overlap(a, b) for a in first for b in second)


def _overlap(a: Capability, b: Capability) -> bool:
    """Whether some platform satisfies both capabilities: one device, and arches both admit."""
    if a.device != b.device:
        return False
    low = max((_arch_tuple(c.min_arch) for c in (a, b) if c.min_arch), default=None)
    high = min((_arch_tuple(c.max_arch) for c in (a, b) if c.max_arch), default=None)
    lists = [set(c.archs) for c in (a, b) if c.archs is not None]
    if not lists:
        return low is None or high is None or low <= high
    return any(_within(arch, low, high) for arch in set.intersection(*lists))


def _within(arch: str, low: tuple[int, ...] | None, high: tuple[int, ...] | None) -> bool:
    if low is None and high is None:
        return True
    if not _CUDA_ARCH.fullmatch(arch):  # arch windows are CUDA's
        return False
    value = _arch_tuple(arch)
    return (low is None or value >= low) and (high is None or value <= high)


def covers(capabilities: tuple[Capability, ...], needed: Capability | None) -> bool:
    """Whether one of `capabilities` (empty: anywhere) admits every platform `needed` admits (None: every
    platform): one device, a window at least as wide, and exact architectures among its own."""
    if not capabilities:
        return True
    return needed is not None and any(_contains(cap, needed) for cap in capabilities)


def _contains(outer: Capability, inner: Capability) -> bool:
    if outer.device != inner.device:
        return False
    if inner.archs is not None:  # exact architectures: each one inner admits, outer must admit
        admitted = [arch for arch in inner.archs if _within(arch, _bound(inner.min_arch), _bound(inner.max_arch))]
        return all(
            (outer.archs is None or arch in outer.archs)
            and _within(arch, _bound(outer.min_arch), _bound(outer.max_arch))
            for arch in admitted
        )
    if outer.archs is not None:
        return False
    low = outer.min_arch is None or (
        inner.min_arch is not None and _arch_tuple(inner.min_arch) >= _arch_tuple(outer.min_arch)
    )
    high = outer.max_arch is None or (
        inner.max_arch is not None and _arch_tuple(inner.max_arch) <= _arch_tuple(outer.max_arch)
    )
    return low and high


def _bound(arch: str | None) -> tuple[int, ...] | None:
    return None if arch is None else _arch_tuple(arch)


def describe_capabilities(capabilities: tuple[Capability, ...]) -> str:
    """'cuda >= 8.0 or hip', as messages show where a backend runs ('anywhere' for none)."""
    return " or ".join(_describe(cap) for cap in capabilities) if capabilities else "anywhere"


def _describe(cap: Capability) -> str:
    if cap.min_arch and cap.max_arch:
        return f"{cap.device} {cap.min_arch}..{cap.max_arch}"
    if cap.min_arch:
        return f"{cap.device} >= {cap.min_arch}"
    if cap.max_arch:
        return f"{cap.device} <= {cap.max_arch}"
    if cap.archs:
        return f"{cap.device} ({', '.join(cap.archs)})"
    return cap.device


@functools.lru_cache(maxsize=None)
def is_installed(distribution: str) -> bool:
    """Whether a distribution is installed, found through its metadata without importing it (or asking any
    import hook: distributions.py)."""
    return installed(distribution)
