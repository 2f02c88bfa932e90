"""What each layer of a catalog contributes: its ops, the backends it adds to other layers' ops, its allow-list
(`kcatalog layers`, and the HTML report)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..registry.catalog import Catalog


@dataclass(frozen=True)
class Contribution:
    """What one layer adds to the catalog."""

    ops: list[str]  # ops it declares
    backends: list[str]  # 'op:backend' it supplies to ops of other layers (added or replacing)
    specs: int  # backend specs it supplies in all
    allowed_modules: list[str] | None  # its settings file's allow-list, as its specs carry it


def contributions(catalog: Catalog) -> dict[str, Contribution]:
    """Each layer's contribution, by layer name."""
    result = {}
    for layer in catalog.layers:
        specs = [spec for spec in catalog.specs() if spec.layer == layer.name]
        lists = {prefixes for spec in specs for prefixes in spec.allowed_modules}
        result[layer.name] = Contribution(
            ops=[op for op in catalog if catalog.info(op).layer == layer.name],
            backends=[f"{s.op}:{s.backend}" for s in specs if catalog.info(s.op).layer != layer.name],
            specs=len(specs),
            allowed_modules=sorted(p for prefixes in lists for p in prefixes) if lists else None,
        )
    return result
