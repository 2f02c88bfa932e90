"""`kcatalog explain`: which backend runs an op on a platform, and why not the others (and, with layers, which
layer supplied each backend)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any

from ...errors import CatalogError, printable
from ...model import TableKeyValues, key_text
from ...select.buckets import origin
from .common import (
    UsageError,
    add_catalog_arguments,
    catalog_paths,
    dtype,
    load_or_report,
    platform_of_catalog,
    shape_sizes,
    split_ops,
)

if TYPE_CHECKING:
    from ...platform import Platform
    from ...registry.catalog import Catalog
    from ...select.selection import Selection


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "explain", help="which backend runs an op on a platform, and why not the others"
    )
    parser.add_argument("items", nargs="*", metavar="OP|PATH", help="an op id (e.g. layernorm.rms_norm), then PATHs")
    parser.add_argument("--all", action="store_true", help="explain every op")
    parser.add_argument("--platform", help="e.g. cuda:9.0, hip:gfx942, cpu (default: this machine)")
    parser.add_argument("--dtype", type=dtype, help="the call's dtype, e.g. bfloat16")
    parser.add_argument("--tokens", type=int, help="the call's leading dimension: picks a tuned table's bucket")
    parser.add_argument(
        "--shape",
        type=shape_sizes,
        metavar="K=V,...",
        help="the call's sizes an op keyed by its shape (table_key) is tuned by, e.g. E=128,H=2048,I=768,K=8: "
        "picks the tuned entry (without it, each key's choice is listed)",
    )
    parser.add_argument("--backend", help="the backend the call names (checked like any other path)")
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="as inside use(deterministic=True): only backends that promise deterministic outputs",
    )
    parser.add_argument(
        "--batch-invariant",
        action="store_true",
        help="as inside use(batch_invariant=True): only backends that promise batch-invariant outputs",
    )
    parser.add_argument(
        "--import",
        dest="import_chosen",
        action="store_true",
        help="import the chosen backend as a first call would, falling back past those whose import fails",
    )
    parser.add_argument(
        "--torch-ops",
        action="store_true",
        help="also show each op as a torch op: its schema, its fake, and what each device type binds",
    )
    add_catalog_arguments(parser, positional=None)
    parser.add_argument("--output-format", choices=["text", "json"], default="text")
    return parser


def run(options: argparse.Namespace) -> int:
    given = split_ops(options.items)
    if len(given.ops) != (0 if options.all else 1):
        raise UsageError("give one op, or --all")
    catalog = load_or_report(catalog_paths(options, given.paths))
    if catalog is None:
        return 1
    platform = platform_of_catalog(catalog, options.platform) if options.platform else None
    if platform is not None and catalog.tuning.packages(platform) is not None:
        catalog.platform()  # detected, so that a table for this machine is compared with its device and versions
    ops = catalog.ops() if options.all else given.ops
    keys = {op: _key(catalog, op, options) for op in ops}
    with catalog.use(deterministic=options.deterministic, batch_invariant=options.batch_invariant):
        selections = [_selection(catalog, op, platform, options, keys[op]) for op in ops]
        tuned = {s.op: _tuned_lines(catalog, s, options, keys[s.op]) for s in selections}  # each key's, alike
        backwards = {s.op: _backward(catalog, s, options) for s in selections}
    torch_ops = {}
    if options.torch_ops:
        torch_ops = {op: catalog.describe_torch_op(op, platform=platform) for op in ops}
    if options.output_format == "json":
        import json

        entries = [_as_dict(catalog, s, keys[s.op]) for s in selections]
        for entry in entries if torch_ops else ():
            entry["torch_op"] = torch_ops[str(entry["op"])].as_dict()
        for entry in entries:
            backward = backwards[str(entry["op"])]
            if backward is not None:
                entry["backward"] = _backward_dict(catalog, str(entry["op"]), backward)
        print(json.dumps(entries, indent=2))
    else:
        layered = len(catalog.layers) > 1

        def layer(backend: str, op: str) -> str:
            return f" [layer {catalog.info(op).backends[backend].layer}]" if layered else ""

        for s in selections:
            chosen = (
                f"{s.chosen.backend} ({s.chosen.target}){layer(s.chosen.backend, s.op)}, by {s.decided_by}"
                if s.chosen
                else "nothing eligible"
            )
            print(printable(f"{s.op} on {s.platform}: {chosen}"))  # reasons quote exceptions, plans their paths
            for note in s.notes:
                print(printable(f"  note: {note}"))
            for r in s.rejected:
                print(printable(f"  {r.backend}{layer(r.backend, s.op)}: {r.reason}"))
            for spec in catalog.specs(s.op):
                if spec.gate is not None:
                    print(f"  {spec.backend}: gated per call by {spec.gate.target} (asked once per argument shape)")
            for line in tuned[s.op]:
                print(printable(line))
            backward = backwards[s.op]
            if backward is not None:
                print(printable(_backward_line(catalog, s.op, backward)))
            for line in torch_ops[s.op].lines() if torch_ops else ():
                print(printable(line))
    return 0 if all(s.chosen for s in selections) else 1


def _backward(catalog: Catalog, s: Selection, options: argparse.Namespace) -> Selection | None:
    """What the op's backward op selects for the same call (platform, dtype, token count), or None: no backward."""
    backward = catalog.info(s.op).backward
    if backward is None:
        return None
    return catalog.select(backward.op, s.platform, options.dtype, tokens=options.tokens)


def _backward_line(catalog: Catalog, op: str, b: Selection) -> str:
    """'  backward: layernorm.rms_norm_backward runs torch (...), by ...; gradients of x, weight', and what autograd
    keeps for it where that is not every input ('; keeps cos, sin'), and the saved outputs ('; saves return.1')."""
    backward = catalog.info(op).backward
    assert backward is not None
    chosen = f"{b.chosen.backend} ({b.chosen.target}), by {b.decided_by}" if b.chosen else "nothing eligible"
    parameters = catalog.info(op).parameters
    everything = parameters is not None and backward.inputs == parameters.names and not backward.outputs
    handed = [*backward.inputs, *(f"return.{i}" for i in backward.outputs)]
    keeps = "" if everything else f"; keeps {', '.join(handed) or 'nothing'}"
    saves = f"; saves {', '.join(f'return.{i}' for i in backward.saves)}" if backward.saves else ""
    why = "".join(f"; {r.backend}: {r.reason}" for r in b.rejected) if not b.chosen else ""
    return f"  backward: {b.op} runs {chosen}; gradients of {', '.join(backward.grads)}{keeps}{saves}{why}"


def _backward_dict(catalog: Catalog, op: str, b: Selection) -> dict[str, Any]:
    backward = catalog.info(op).backward
    assert backward is not None
    return {
        "op": b.op,
        "grads": list(backward.grads),
        "inputs": list(backward.inputs),
        "outputs": [f"return.{i}" for i in backward.outputs],
        "saves": [f"return.{i}" for i in backward.saves],
        "chosen": b.chosen.backend if b.chosen else None,
        "target": str(b.chosen.target) if b.chosen else None,
        "decided_by": b.decided_by,
        "rejected": [{"backend": r.backend, "kind": r.kind.value, "reason": r.reason} for r in b.rejected],
    }


def _key(catalog: Catalog, op: str, options: argparse.Namespace) -> TableKeyValues | None:
    """The call's table key from --shape, for an op keyed by its shape (None: not given, or not keyed); a
    UsageError where --shape, given for one op, does not name exactly the sizes of its table_key."""
    names = catalog.info(op).key_names
    shape = options.shape
    if shape is None:
        return None
    if not names:
        if options.all:
            return None
        raise UsageError(f"--shape: op '{op}' declares no table_key; its tuned tables are keyed by --tokens alone")
    missing, extra = [n for n in names if n not in shape], [n for n in shape if n not in names]
    if missing or extra:
        if options.all:
            return None
        parts = [f"lacks {', '.join(missing)}"] if missing else []
        parts += [f"gives {', '.join(extra)}, not in it"] if extra else []
        raise UsageError(f"--shape {' and '.join(parts)}: op '{op}' is keyed by {', '.join(names)} (its table_key)")
    return tuple(shape[n] for n in names)


def _tuned_lines(catalog: Catalog, s: Selection, options: argparse.Namespace, key: TableKeyValues | None) -> list[str]:
    """The op's tuned entries for the dtype: without --tokens each entry's buckets; for an op keyed by its shape
    and no --shape, what each key chooses at --tokens."""
    tuning, lines = catalog.tuning, []
    keys = (key,) if key is not None else tuning.keys(s.op, s.platform, options.dtype)
    if options.tokens is None:
        for each in keys:
            table = tuning.table(s.op, s.platform, options.dtype, each)
            if table is None:
                continue
            buckets = ", ".join(f"{b.span} {b.backend}" for b in table.buckets)
            stale = tuning.staleness(table, catalog.runtime.environment(s.platform))
            when = f" (stale: {stale})" if stale else ""
            picks = "--tokens N picks one" + ("" if not table.key or key is not None else ", --shape K=V,... a key")
            lines.append(f"  tuned table for {table.label}{origin(table)}: {buckets}{when} ({picks})")
    elif key is None and catalog.info(s.op).table_key and any(keys):
        names = catalog.info(s.op).key_names
        for each in keys:
            chosen = catalog.select(s.op, s.platform, options.dtype, tokens=options.tokens, key=each)
            backend = chosen.chosen.backend if chosen.chosen else "nothing eligible"
            lines.append(f"  at {key_text(names, each)}: {backend}, by {chosen.decided_by}")
        lines.append("  (the choice above is for a call of no key: --shape K=V,... explains one key)")
    return lines


def _selection(
    catalog: Catalog, op: str, platform: Platform | None, options: argparse.Namespace, key: TableKeyValues | None
) -> Selection:
    """What a call would select; with --import, after importing as its first call would (failures fall back)."""
    dtype, note = _dtype(catalog, op, platform, options)
    if options.import_chosen:
        with contextlib.suppress(CatalogError):  # nothing importable: the selection below says why
            catalog.resolve(op, platform, dtype, backend=options.backend, tokens=options.tokens, key=key)
    selection = catalog.select(op, platform, dtype, backend=options.backend, tokens=options.tokens, key=key)
    return dataclasses.replace(selection, notes=(note, *selection.notes)) if note else selection


def _dtype(
    catalog: Catalog, op: str, platform: Platform | None, options: argparse.Namespace
) -> tuple[str | None, str | None]:
    """The call's dtype: --dtype; with --tokens alone, the one dtype the op's tuned tables for the platform cover
    (a bucket is a dtype's), and a note saying so; a UsageError where they cover several."""
    if options.dtype is not None or options.tokens is None:
        return options.dtype, None
    here = str(platform or catalog.platform())
    dtypes = sorted({dtype for (name, where, dtype, _) in catalog.tuning.tables if (name, where) == (op, here)})
    if len(dtypes) > 1:
        raise UsageError(f"--tokens picks a bucket of one dtype's table: give --dtype ({', '.join(dtypes)} on {here})")
    if not dtypes:
        return None, None
    return dtypes[0], f"--dtype not given: {dtypes[0]}, the dtype of the op's tuned table for {here}"


def _as_dict(catalog: Catalog, s: Selection, key: TableKeyValues | None) -> dict[str, Any]:
    names = catalog.info(s.op).key_names
    return {
        "op": s.op,
        "platform": str(s.platform),
        **({"key": dict(zip(names, key))} if key is not None else {}),
        "chosen": s.chosen.backend if s.chosen else None,
        "target": str(s.chosen.target) if s.chosen else None,
        "decided_by": s.decided_by,
        "notes": list(s.notes),
        "order": list(s.order),
        "rejected": [{"backend": r.backend, "kind": r.kind.value, "reason": r.reason} for r in s.rejected],
        "layers": {name: spec.layer for name, spec in catalog.info(s.op).backends.items()},
    }
