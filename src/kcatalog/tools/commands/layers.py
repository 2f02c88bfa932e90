"""`kcatalog layers` (or `list --layers`): the catalog's layers in order, where each came from, what it adds."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..report import plural, text_table
from .common import add_catalog_arguments, catalog_paths, load_or_report

if TYPE_CHECKING:
    from ...registry.catalog import Catalog


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "layers", help="show the catalog's layers, where each came from and what each contributes"
    )
    add_catalog_arguments(parser)
    parser.add_argument("--output-format", choices=["text", "json"], default="text")
    return parser


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


def run(options: argparse.Namespace) -> int:
    catalog = load_or_report(catalog_paths(options))
    if catalog is None:
        return 1
    added = contributions(catalog)
    if options.output_format == "json":
        document = [
            {
                "name": layer.name,
                "origin": layer.origin,
                "paths": list(layer.paths),
                "ops": added[layer.name].ops,
                "backends_for_other_layers": added[layer.name].backends,
                "backend_specs": added[layer.name].specs,
                "allowed_modules": added[layer.name].allowed_modules,
            }
            for layer in catalog.layers
        ]
        print(json.dumps(document, indent=2))
        return 0
    rows = [["#", "layer", "origin", "contributes"]]
    for number, layer in enumerate(catalog.layers, 1):
        part = added[layer.name]
        text = f"{plural(len(part.ops), 'op')}, {plural(part.specs, 'backend spec')}"
        if part.backends:
            text += f" ({len(part.backends)} for ops of other layers: {', '.join(part.backends)})"
        if part.allowed_modules is not None:
            text += f"; targets under {', '.join(part.allowed_modules)}"
        rows.append([str(number), layer.name, layer.origin, text])
    print(text_table(rows))  # the directories read for each: --output-format json
    return 0
