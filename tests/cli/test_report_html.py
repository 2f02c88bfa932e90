"""`kcatalog report --html`: one self-contained page; rendered in headless Chromium where it is installed (Debian's
`chromium`, which .ci/run installs), checked for its rows and its cells' hover text, and screenshotted."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import kcatalog
from kcatalog.tools.cli import main

PLATFORMS = ("cpu", "cuda:9.0", "hip:gfx942")


class Cells(HTMLParser):
    """The matrix as (op, backend, platform) -> (class, title, href), and the op of every row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[str] = []
        self.cells: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        self.external: list[str] = []
        self._op = ""
        self._cell: tuple[str, str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag in ("script", "link", "img", "iframe") or any(v.startswith(("http:", "https:")) for v in a.values()):
            self.external.append(tag)
        if tag == "tr" and "data-op" in a:
            self._op = a["data-op"]
            self.rows.append(self._op)
        elif tag == "td" and "data-backend" in a:
            self._cell = (self._op, a["data-backend"], a["data-platform"])
            self.cells[self._cell] = (a["class"], a["title"], "")
        elif tag == "a" and self._cell is not None and "data-location" in a:
            cls, title, _ = self.cells[self._cell]
            self.cells[self._cell] = (cls, title, a["href"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None


def parsed(text: str) -> Cells:
    cells = Cells()
    cells.feed(text)
    return cells


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "shipped.html"
    argv = ["report", "--html", str(path), *(f"--platform={p}" for p in PLATFORMS)]
    assert main(argv) == 0
    return path


def check_page(cells: Cells, page_dir: Path) -> None:
    """Every op's row, the reasons `explain` gives, and links to the manifest lines relative to the page (a page
    copied with its files elsewhere, or served, still links them; a file:// link would die)."""
    catalog = kcatalog.load_catalog()
    assert cells.rows == catalog.ops()
    assert cells.external == []  # self-contained: nothing fetched
    for platform in PLATFORMS:
        selection = catalog.select("layernorm.rms_norm", platform)
        for rejected in selection.rejected:  # the hover text is the reason `explain` gives
            cls, title, _ = cells.cells[("layernorm.rms_norm", rejected.backend, platform)]
            assert title == rejected.reason
            assert cls == ("cell eligible" if rejected.eligible else "cell unavailable")
        assert selection.chosen is not None
        cls, title, href = cells.cells[("layernorm.rms_norm", selection.chosen.backend, platform)]
        assert cls == "cell chosen" and title == f"chosen, by {selection.decided_by}"
        location = selection.chosen.location
        linked, _, line = href.partition("#")
        assert not Path(linked).is_absolute() and ":" not in linked
        assert ((page_dir / linked).resolve(), line) == (Path(location.path).resolve(), f"L{location.line}")
    # torch_compile is `auto: false`: it can run on cuda:9.0, so eligible there, though chosen only when named
    cls, title, _ = cells.cells[("layernorm.rms_norm", "torch_compile", "cuda:9.0")]
    assert cls == "cell eligible" and title.startswith("not chosen automatically (auto: false)")
    cls, title, href = cells.cells[("activation.silu_and_mul", "aten", "cpu")]
    assert (cls, title, href) == ("cell missing", "op 'activation.silu_and_mul' declares no 'aten' backend", "")


def test_the_page_has_every_op_and_the_reasons_explain_gives(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    check_page(parsed(text), page.parent)
    assert "file:" not in text
    # the shipped policy, which governs the shipped ops
    assert (
        "<tr><td>shipped</td><td>its own ops</td><td>torch</td><td>cpu, cuda:9.0, hip:gfx942</td><td>yes</td>"
        "<td>yes (problems are warnings below)</td></tr>"
    ) in text


def test_links_go_under_the_base_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--link-base`: for a page published as a CI artifact, links into the repository's web view; each file's
    path is taken relative to the working directory (the checkout's root, in CI)."""
    from kcatalog.read.files import shipped_catalog_dir

    root = shipped_catalog_dir().resolve().parent  # the checkout (or the installed package) holding catalog/
    monkeypatch.chdir(root)
    page = tmp_path / "report.html"
    base = "https://github.com/org/repo/blob/main"  # no trailing slash: one is added
    assert main(["report", "--html", str(page), "--platform", "cpu", "--link-base", base]) == 0
    cells = parsed(page.read_text(encoding="utf-8"))
    location = kcatalog.load_catalog().select("layernorm.rms_norm", "cpu").chosen.location  # type: ignore[union-attr]
    relative = Path(location.path).resolve().relative_to(root).as_posix()
    href = next(h for (op, _, _), (cls, _, h) in cells.cells.items() if op == "layernorm.rms_norm" and "chosen" in cls)
    assert href == f"{base}/{relative}#L{location.line}"
    assert relative.startswith("catalog/")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("headless Chromium is not installed (Debian: `apt-get install chromium`; .ci/run installs it)")
    return found


def test_rendered_in_headless_chromium(page: Path, tmp_path: Path) -> None:
    browser = chromium()
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1500,1000"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr
    check_page(parsed(dom.stdout), page.parent)  # what the browser built from the page, not the file's text
    shot = tmp_path / "shot.png"
    taken = subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    assert taken.returncode == 0, taken.stderr
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000  # a rendered table, not a blank page
