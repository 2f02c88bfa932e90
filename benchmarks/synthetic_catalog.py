"""Write a synthetic catalog of N ops x 3 backends, shaped like the shipped manifests, for load benchmarks."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

OPS_PER_GROUP = 50

BACKENDS = """\
kcatalog: 1
backends:
  torch: {description: reference}
  triton: {description: triton kernels}
  aot: {description: ahead-of-time CUDA kernels}
priority: [aot, triton, torch]
"""
SETTINGS = (
    BACKENDS
    + """\
policy:
  required_backends: [torch]
  required_platforms: [cpu, "cuda:9.0"]
"""
)

OP = """\
  op_{i}:
    description: synthetic op {i}, y = f(x) over the last dim
    signature: "(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor"
    reference: torch
    dtypes: [float32, float16, bfloat16]
    tolerance: {{float32: 1.0e-5, float16: 2.0e-3, bfloat16: 1.0e-2}}
    backends:
      torch:
        target: {torch}
      triton:
        target: {triton}
        requires: [triton]
        capabilities:
          - {{device: cuda, min_arch: "8.0"}}
          - {{device: hip}}
      aot:
        target: sgl_kernel:rmsnorm_{i}
        capabilities: [{{device: cuda, min_arch: "8.0", max_arch: "10.3"}}]
"""


def write_catalog(
    directory: Path,
    n_ops: int,
    module: str = "kcatalog.kernels.torch.layernorm",
    *,
    targets: Callable[[int], tuple[str, str]] | None = None,
    settings: str = SETTINGS,
) -> Path:
    """Write kcatalog.yaml plus ceil(n_ops / 50) group manifests into `directory`; `targets(i)` gives op i's
    torch and triton targets (default: `module:rms_norm` for both)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kcatalog.yaml").write_text(settings)
    pick = targets or (lambda i: (f"{module}:rms_norm", f"{module}:rms_norm"))
    for start in range(0, n_ops, OPS_PER_GROUP):
        group = f"group{start // OPS_PER_GROUP:03d}"
        ops = "".join(
            OP.format(i=i, torch=pick(i)[0], triton=pick(i)[1]) for i in range(start, min(start + OPS_PER_GROUP, n_ops))
        )
        (directory / f"{group}.yaml").write_text(f"kcatalog: 1\ngroup: {group}\nops:\n{ops}")
    return directory


def write_layered_catalog(directory: Path, n_ops: int, layers: int = 3) -> list[Path]:
    """The same N ops split over `layers` directories `layer0/`, `layer1/`, ...: the first holds the settings and
    the first share of the groups; each later one a settings file of its own (its allow-list, no backends) and
    its share, so that loading them exercises the layer merge. Returns the layer directories, in order."""
    whole = write_catalog(directory / "whole", n_ops)
    groups = sorted(path for path in whole.iterdir() if path.name != "kcatalog.yaml")
    found = []
    for number in range(layers):
        layer = directory / f"layer{number}"
        layer.mkdir(parents=True, exist_ok=True)
        settings = whole / "kcatalog.yaml" if number == 0 else None
        text = settings.read_text() if settings else "kcatalog: 1\nallowed_modules: [kcatalog.kernels, sgl_kernel]\n"
        (layer / "kcatalog.yaml").write_text(text)
        for group in groups[number::layers]:
            (layer / group.name).write_text(group.read_text())
        found.append(layer)
    return found


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--ops", type=int, default=1000)
    args = parser.parse_args()
    write_catalog(args.directory, args.ops)
