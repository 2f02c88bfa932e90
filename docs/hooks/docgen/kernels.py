"""The shipped kernels' page: every op of the catalog shipped inside the package, its contract and its backends, as
the catalog declares them."""

from __future__ import annotations

import dataclasses

from kcatalog import check_catalog
from kcatalog.model import Capability, OpInfo

INTRO = """\
# The shipped kernels

The catalog shipped inside the package (the `shipped` layer) holds kernels for common LLM ops. Each op has a readable
torch reference (float32 accumulation), one fused Triton kernel (CUDA sm ≥ 8.0 and ROCm), the fused ATen op where
torch has one, and `torch.compile` of the reference, compiled on first use, on GPUs (`auto: false`: chosen only when
named). This page is generated from its manifests (`catalog/*.yaml`); how fast the kernels run on an H200 is on the
[Performance](../performance.md#kernels) page, and `kcatalog explain OP` says which backend runs on a machine and why.
"""


def _runs_on(capabilities: tuple[Capability, ...]) -> str:
    """As the manifest declares it: any of these; none means anywhere."""
    if not capabilities:
        return "anywhere"
    declared = []
    for capability in capabilities:
        fields = [
            f"{field.name} {value}"
            for field in dataclasses.fields(capability)[1:]
            if (value := getattr(capability, field.name))
        ]
        declared.append(" ".join([capability.device, *fields]))
    return "; ".join(declared)


def _op_section(info: OpInfo) -> str:
    facts = [f"`{info.signature}`" if info.signature else "any arguments"]
    facts.append(f"dtypes {', '.join(info.dtypes)}" if info.dtypes else "any dtype")
    if info.reference:
        facts.append(f"reference `{info.reference}`")
    rows = ["| backend | target | runs on | requires |", "| --- | --- | --- | --- |"]
    for name, spec in info.backends.items():
        auto = "" if spec.auto else " (auto: false)"
        requires = ", ".join(spec.requires) or "nothing"
        rows.append(f"| `{name}`{auto} | `{spec.target}` | {_runs_on(spec.capabilities)} | {requires} |")
    description = " ".join((info.description or "").split())
    return f"## `{info.id}`\n\n{description}\n\n{' · '.join(facts)}\n\n" + "\n".join(rows) + "\n"


def kernels_page() -> str:
    """The page: every shipped op, in id order."""
    catalog, diagnostics = check_catalog(["shipped"], check_targets=False, cache=False)
    if catalog is None:
        raise ValueError("the shipped catalog does not load: " + "; ".join(map(str, diagnostics)))
    return "\n".join([INTRO, *(_op_section(catalog.info(op)) for op in sorted(catalog.ops()))])
