"""`kcatalog list`: the op x backend coverage matrix (`--layers`: the layers instead)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from ..formats import plural, text_table
from .common import add_catalog_arguments, catalog_paths, load_or_report


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser("list", help="show the op x backend coverage matrix")
    add_catalog_arguments(parser)
    parser.add_argument("--output-format", choices=["text", "json"], default="text")
    parser.add_argument("--layers", action="store_true", help="show the catalog's layers (as `kcatalog layers`)")
    return parser


def run(options: argparse.Namespace) -> int:
    if options.layers:
        from . import layers

        return layers.run(options)
    catalog = load_or_report(catalog_paths(options))
    if catalog is None:
        return 1
    backends = [b for b in catalog.backends if any(b in catalog.info(op).backends for op in catalog)]
    if options.output_format == "json":
        ops = {
            op: {
                "description": catalog.info(op).description,
                "reference": catalog.info(op).reference,
                "location": str(catalog.info(op).location),
                "layer": catalog.info(op).layer,
                "backends": {
                    spec.backend: {
                        "target": str(spec.target),
                        "requires": list(spec.requires),
                        "capabilities": [
                            {k: v for k, v in dataclasses.asdict(c).items() if v is not None} for c in spec.capabilities
                        ],
                        "dtypes": None if spec.dtypes is None else list(spec.dtypes),
                        "layer": spec.layer,
                    }
                    for spec in catalog.specs(op)
                },
            }
            for op in catalog
        }
        print(json.dumps({"backends": backends, "ops": ops}, indent=2))
        return 0
    rows = [["op", *backends]]
    for op in catalog:
        info = catalog.info(op)
        rows.append([op, *("ref" if b == info.reference else "yes" if b in info.backends else "-" for b in backends)])
    print(text_table(rows))
    print(f"{plural(len(catalog), 'op')}, {plural(len(catalog.specs()), 'backend spec')}")
    return 0
