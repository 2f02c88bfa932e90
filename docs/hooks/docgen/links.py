"""Links in Markdown: found outside code, and those that leave the docs folder (to a file of the repository, as
`../benchmarks/results/load_time.md` from docs/performance.md) rewritten to the file's address in the repository,
so that a page reads right on the site and where the repository is browsed alike."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .project import REPO, Project

DOCS = REPO / "docs"
#: `[text](target)` or `![alt](target)`, an optional title after the target.
LINK = re.compile(r"(?P<open>!?\[[^\]]*\]\()(?P<target>[^)\s]+)(?P<close>(?:\s+\"[^\"]*\")?\))")
FENCE = re.compile(r"^\s*(```|~~~)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


@dataclass(frozen=True)
class Link:
    """A link as written, split into its path and its anchor (either may be empty)."""

    target: str
    line: int  # 1-based

    @property
    def path(self) -> str:
        return self.target.partition("#")[0]

    @property
    def anchor(self) -> str:
        return self.target.partition("#")[2]

    @property
    def absolute(self) -> bool:
        return bool(SCHEME.match(self.target)) or self.target.startswith("/")


def prose_lines(markdown: str) -> Iterator[tuple[int, str]]:
    """(index, line) of every line outside fenced code blocks."""
    fence: str | None = None
    for index, line in enumerate(markdown.splitlines()):
        match = FENCE.match(line)
        if match and (fence is None or match[1] == fence):
            fence = match[1] if fence is None else None
        elif fence is None:
            yield index, line


def find_links(markdown: str) -> list[Link]:
    """Every link outside code: fenced blocks and inline code spans are left out."""
    return [
        Link(match["target"], index + 1)
        for index, line in prose_lines(markdown)
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line))
    ]


def _rewrite(markdown: str, replace: Callable[[str], str]) -> str:
    lines = markdown.splitlines(keepends=True)
    for index, line in prose_lines(markdown):
        rewritten = LINK.sub(lambda m: m["open"] + replace(m["target"]) + m["close"], line)
        lines[index] = rewritten + lines[index][len(line) :]
    return "".join(lines)


def resolve(source: Path, link: Link) -> Path | None:
    """The path a relative link written in the file `source` names; None for an address or an anchor alone."""
    if link.absolute or not link.path:
        return None
    return (source.parent / link.path).resolve()


def to_repository(markdown: str, source: Path, page: str, project: Project, shown: dict[str, str]) -> str:
    """`markdown` (written in the file `source`, shown as the site's `page`) with its links made right for the site:
    a repository file outside docs/ is linked at its address in the repository, unless the site shows it as a page of
    its own (`shown`: site page -> repository file, as CONTRIBUTING.md); a file of docs/ linked from outside it is
    linked as its page."""
    pages_of = {(REPO / file).resolve(): site_page for site_page, file in shown.items()}
    up = [".."] * (len(PurePosixPath(page).parts) - 1)

    def replace(target: str) -> str:
        link = Link(target, 0)
        path = resolve(source, link)
        anchor = f"#{link.anchor}" if link.anchor else ""
        if path is None or not path.is_relative_to(REPO) or not path.exists():
            return target  # an address, an anchor, or a broken link: left for the build and the tests to report
        if path in pages_of:
            return str(PurePosixPath(*up, pages_of[path])) + anchor
        if path.is_relative_to(DOCS):
            inside = source.resolve().is_relative_to(DOCS)
            return target if inside else str(PurePosixPath(*up, path.relative_to(DOCS).as_posix())) + anchor
        relative = path.relative_to(REPO).as_posix()
        return (project.tree(relative) if path.is_dir() else project.blob(relative)) + anchor

    return _rewrite(markdown, replace)
