"""The catalog as one self-contained HTML page (no scripts, no network): the op x backend x platform support
matrix, each cell's reason on hover and a link to its manifest line, the policy's status and the layers."""

from __future__ import annotations

import html
import math
import os
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import Location
from ..platform import Platform
from ..read.files import display_path
from .formats import plural

if TYPE_CHECKING:
    from ..registry.catalog import Catalog

CHOSEN, ELIGIBLE, UNAVAILABLE, MISSING = "chosen", "eligible", "unavailable", "missing"
_MARK = {CHOSEN: "runs", ELIGIBLE: "yes", UNAVAILABLE: "no", MISSING: "—"}

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d1d1f; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; }
th, td { border: 1px solid #d0d0d5; padding: 3px 8px; text-align: left; }
th { background: #f3f3f6; font-weight: 600; }
td.cell { text-align: center; min-width: 52px; }
td.cell a { color: inherit; text-decoration: none; display: block; }
.chosen { background: #1a7f37; color: #fff; font-weight: 700; }
.eligible { background: #bfe5c6; }
.unavailable { background: #f6dcc0; color: #6e4a1f; }
.missing { background: #f7f7f9; color: #9a9aa2; }
.legend span { display: inline-block; padding: 2px 8px; margin-right: 6px; border: 1px solid #d0d0d5; }
code { font-size: 12px; }
td.ran { outline: 3px solid #0b5cad; outline-offset: -3px; }
tr.idle th, tr.idle td { opacity: 0.45; }
"""


@dataclass(frozen=True)
class Cell:
    """One op x backend x platform: its state, why (the reason `explain` gives), and where the backend is declared."""

    op: str
    backend: str
    platform: str
    state: str
    reason: str
    location: Location | None


def cells(catalog: Catalog, platforms: Sequence[Platform]) -> list[Cell]:
    """Every cell of the matrix, ops sorted, then platforms, then backends in the catalog's order."""
    found = []
    for op in catalog:
        info = catalog.info(op)
        for platform in platforms:
            selection = catalog.select(op, platform)
            rejected = {r.backend: r for r in selection.rejected}
            for backend in catalog.backends:
                spec = info.backends.get(backend)
                if spec is None:
                    state, reason = MISSING, f"op '{op}' declares no '{backend}' backend"
                elif selection.chosen is not None and selection.chosen.backend == backend:
                    state, reason = CHOSEN, f"chosen, by {selection.decided_by}"
                else:  # an `auto: false` backend that can run here is eligible, though only chosen when named
                    state = ELIGIBLE if rejected[backend].eligible else UNAVAILABLE
                    reason = rejected[backend].reason
                found.append(Cell(op, backend, str(platform), state, reason, spec.location if spec else None))
    return found


@dataclass(frozen=True)
class Links:
    """Where the page's links to manifest lines point: under `base` (a URL such as
    https://github.com/org/repo/blob/main/), the file's path relative to the working directory appended; else
    relative to `page_dir`, the directory the page is written into. Never an absolute file:// link, which dies
    once the page is copied elsewhere (a CI artifact)."""

    page_dir: Path
    base: str | None = None

    def href(self, location: Location) -> str | None:
        """The link to the location's line; None for a file that is not under the working directory when a base
        is given (its place under the base is unknown)."""
        path = Path(location.path).resolve()
        if self.base is not None:
            try:
                relative = path.relative_to(Path.cwd().resolve())
            except ValueError:
                return None
            return f"{self.base.rstrip('/')}/{urllib.parse.quote(relative.as_posix())}#L{location.line}"
        try:
            relative_to_page = os.path.relpath(path, self.page_dir.resolve())
        except ValueError:  # another drive (Windows): no relative path exists
            return f"{path.as_uri()}#L{location.line}"
        return f"{urllib.parse.quote(Path(relative_to_page).as_posix())}#L{location.line}"


def use_style(calls: int, most: int) -> str:
    """A cell's background by how much it ran, on a log scale up to the most-called cell: pale to deep blue."""
    share = math.log1p(calls) / math.log1p(most) if most > 0 else 1.0
    lightness = round(88 - 50 * share)
    return f"background: hsl(212, 75%, {lightness}%); color: {'#fff' if lightness < 60 else '#1d1d1f'}"


def render(
    catalog: Catalog,
    platforms: Sequence[Platform],
    links: Links,
    title: str = "kcatalog support matrix",
    *,
    usage: Mapping[tuple[str, str, str], int] | None = None,
) -> str:
    """The page, as text, its manifest links made by `links`; with `usage` ((op, backend, platform) -> calls, from a
    trace), each cell that ran is coloured by its calls and the rows of ops that never ran are faded."""
    e = html.escape
    backends = [b for b in catalog.backends if any(b in catalog.info(op).backends for op in catalog)]
    by_key = {(c.op, c.backend, c.platform): c for c in cells(catalog, platforms)}
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f"<p>{plural(len(catalog), 'op')}, {plural(len(catalog.specs()), 'backend spec')}, "
        f"{plural(len(catalog.layers), 'layer')}. "
        "Hover a cell for the reason <code>kcatalog explain</code> gives; click it for the manifest line.</p>",
        '<p class="legend">' + "".join(f'<span class="{s}">{_MARK[s]}: {s}</span>' for s in _MARK) + "</p>",
        *_trace_legend(usage),
        '<h2>Support matrix</h2><table id="matrix"><thead><tr><th rowspan="2">op</th>',
    ]
    out += [f'<th colspan="{len(backends)}">{e(str(p))}</th>' for p in platforms]
    out.append("</tr><tr>")
    out += [f"<th>{e(b)}</th>" for _ in platforms for b in backends]
    out.append("</tr></thead><tbody>")
    most = max(usage.values(), default=0) if usage else 0
    ran_ops = {op for op, _, _ in usage} if usage else set()
    for op in catalog:
        info = catalog.info(op)
        href = links.href(info.location)
        name = f'<a href="{e(href)}" title="{e(str(info.location))}">{e(op)}</a>' if href else e(op)
        idle = ' class="idle"' if usage is not None and op not in ran_ops else ""
        out.append(f'<tr data-op="{e(op)}"{idle}><th>{name}</th>')
        for platform in platforms:
            for backend in backends:
                cell = by_key[(op, backend, str(platform))]
                mark = e(_MARK[cell.state])
                calls = usage.get((op, backend, cell.platform), 0) if usage else 0
                classes, reason, style = f"cell {cell.state}", cell.reason, ""
                if calls:
                    mark += f" · {calls:,}"
                    classes += " ran"
                    reason += f"; ran {plural(calls, 'call')} in the trace"
                    style = f' style="{use_style(calls, most)}"'
                href = links.href(cell.location) if cell.location else None
                link = f'<a href="{e(href)}" data-location="{e(str(cell.location))}">{mark}</a>' if href else mark
                out.append(
                    f'<td class="{classes}" data-backend="{e(backend)}" data-platform="{e(cell.platform)}" '
                    f'title="{e(reason)}"{style}>{link}</td>'
                )
        out.append("</tr>")
    out.append("</tbody></table>")
    out += _policy(catalog)
    out += _tuned(catalog, links)
    out += _layers(catalog)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _trace_legend(usage: Mapping[tuple[str, str, str], int] | None) -> list[str]:
    if usage is None:
        return []
    calls = sum(usage.values())
    ops = len({op for op, _, _ in usage})
    return [
        f'<p class="legend" id="trace">From the trace: {plural(calls, "call")} to {plural(ops, "op")}. '
        '<span class="ran" style="background: hsl(212, 75%, 60%); color: #fff">runs · calls</span>a backend that '
        'ran, the deeper the more calls; <span class="idle">faded</span>an op that never ran.</p>'
    ]


def _policy(catalog: Catalog) -> list[str]:
    e = html.escape
    # Each layer's rules: `policy` governs the ops it declares (and extends), `require_of_all` every op loaded.
    rules = [
        (layer.layer or "the catalog", scope, policy)
        for layer in catalog.settings.policies
        for scope, policy in (("its own ops", layer.policy), ("every op loaded", layer.require_of_all))
        if not policy.is_empty
    ]
    out = [
        '<h2>Coverage policy</h2><table id="policy"><tr><th>layer</th><th>applies to</th><th>required backends</th>'
        "<th>required platforms</th><th>reference required</th><th>torch ops</th></tr>"
    ]
    for layer, scope, policy in rules:
        cells = (
            layer,
            scope,
            ", ".join(policy.required_backends) or "none",
            ", ".join(policy.required_platforms) or "none",
            "yes" if policy.require_reference else "no",
            "yes (problems are warnings below)" if policy.torch_ops else "no",
        )
        out.append("<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in cells) + "</tr>")
    out.append("</table>")
    if not rules:
        out.append("<p>No layer sets a policy.</p>")
    if catalog.warnings:
        out.append(f"<p>{len(catalog.warnings)} warnings:</p><ul>")
        out += [f"<li><code>{e(str(d))}</code></li>" for d in catalog.warnings]
        out.append("</ul>")
    else:
        out.append("<p>The catalog loaded with no warnings: every rule is met.</p>")
    return out


def _tuned(catalog: Catalog, links: Links) -> list[str]:
    """The tuned entries: op, platform, dtype, key (for an op keyed by its shape, `table_key`), buckets, staleness."""
    e = html.escape
    tuning = catalog.tuning
    entries = sorted(tuning.tables.values(), key=lambda t: (t.op, t.platform, t.dtype, t.key))
    if not entries:
        return ["<h2>Tuned tables</h2><p>No tuned table.</p>"]
    out = [
        '<h2>Tuned tables</h2><table id="tuned"><tr><th>op</th><th>platform</th><th>dtype</th><th>key</th>'
        "<th>buckets</th><th>stale</th></tr>"
    ]
    for table in entries:
        buckets = ", ".join(f"{b.span} {b.backend}" for b in table.buckets)
        href = links.href(table.location) if table.location else None
        op = f'<a href="{e(href)}">{e(table.op)}</a>' if href else e(table.op)
        stale = tuning.staleness(table, None) or "no"  # the kernels' source; the machine is compared where it runs
        key = e(table.key_text) or "—"
        out.append(
            f'<tr data-tuned-op="{e(table.op)}" data-key="{e(table.key_text)}"><td>{op}</td>'
            f"<td>{e(table.platform)}</td><td>{e(table.dtype)}</td><td>{key}</td><td>{e(buckets)}</td><td>{e(stale)}</td></tr>"
        )
    out.append("</table>")
    return out


def _layers(catalog: Catalog) -> list[str]:
    from .layer_summary import contributions

    e = html.escape
    added = contributions(catalog)
    out = ['<h2>Layers</h2><table id="layers"><tr><th>#</th><th>layer</th><th>origin</th><th>paths</th>']
    out.append("<th>ops</th><th>backend specs</th></tr>")
    for number, layer in enumerate(catalog.layers, 1):
        part = added[layer.name]
        paths = ", ".join(display_path(Path(p)) for p in layer.paths)
        out.append(
            f'<tr data-layer="{e(layer.name)}"><td>{number}</td><td>{e(layer.name)}</td><td>{e(layer.origin)}</td>'
            f"<td><code>{e(paths)}</code></td><td>{len(part.ops)}</td><td>{part.specs}</td></tr>"
        )
    out.append("</table>")
    return out
