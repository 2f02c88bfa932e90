"""`kcatalog layers` (or `list --layers`): the catalog's layers in order, where each came from, what it adds."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..formats import plural, text_table
from ..layer_summary import contributions
from .common import add_catalog_arguments, catalog_paths, load_or_report


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "layers", help="show the catalog's layers, where each came from and what each contributes"
    )
    add_catalog_arguments(parser)
    parser.add_argument("--output-format", choices=["text", "json"], default="text")
    return parser


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
