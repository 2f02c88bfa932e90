"""The diagnostic codes' reference: every code of `kcatalog.codes.CODES`, grouped by the stage that finds it (the group
comments of codes.py), each with an example taken from the test suite: a case of the diagnostics corpus
(tests/corpus), of `import-registry` (tests/migrate/cases), or an API case of tests/core/test_corpus.py."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

from kcatalog import codes

from .project import REPO, Project

CORPUS = REPO / "tests" / "corpus"
MIGRATE_CASES = REPO / "tests" / "migrate" / "cases"
CORPUS_TEST = REPO / "tests" / "core" / "test_corpus.py"
#: A diagnostic line: optional `path:line:col: `, then the code.
LINE = re.compile(r"^(?:(?P<path>[^:\s]+):(?P<line>\d+):\d+: )?(?P<code>KC\d{3}) ")
#: `# KC0xx read: finding files and parsing YAML.` in codes.py.
GROUP = re.compile(r"^# (?P<codes>KC[0-9x]{3}) (?P<stage>\w+): (?P<what>.+)$")
CONSTANT = re.compile(r'^(?P<name>[A-Z0-9_]+): Final = "(?P<code>KC\d{3})"$')
SHOWN_FILE_LINES = 40  # a longer or wider file is linked, not shown
SHOWN_LINE_WIDTH = 120


@dataclass(frozen=True)
class Group:
    """Codes found by one stage, as codes.py groups them."""

    codes: str  # 'KC0xx'
    stage: str
    what: str
    members: list[tuple[str, str]]  # (code, constant name)


@dataclass(frozen=True)
class Example:
    """One real case that reports a code: how it is run, what it prints, and the file it points into."""

    source: str  # the case's directory, relative to the repository
    command: list[str]  # what is typed, prompt included: '$ kcatalog validate .', or Python's '>>> ...' lines
    output: list[str]
    shown_file: str | None = None  # relative to the case's directory
    shown_line: int | None = None


def groups() -> list[Group]:
    """codes.py's constants under its group comments, in its order; every code of CODES in one."""
    found: list[Group] = []
    for text in Path(codes.__file__).read_text(encoding="utf-8").splitlines():
        if header := GROUP.match(text):
            found.append(Group(header["codes"], header["stage"], header["what"], []))
        elif (constant := CONSTANT.match(text)) and found:
            found[-1].members.append((constant["code"], constant["name"]))
    grouped = {code for group in found for code, _ in group.members}
    if grouped != set(codes.CODES):
        raise ValueError(f"codes.py: codes outside a '# KCnxx stage: ...' group: {sorted(set(codes.CODES) - grouped)}")
    return found


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _corpus_examples() -> list[Example]:
    found = []
    for case in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        args = (case / "args.txt").read_text(encoding="utf-8").split() if (case / "args.txt").exists() else []
        layers = (case / "layers.txt").read_text(encoding="utf-8").split() if (case / "layers.txt").exists() else ["."]
        command = ["$ " + " ".join(["kcatalog validate", *layers, *args])]
        found.append(Example(str(case.relative_to(REPO)), command, _lines(case / "expected.txt")))
    return found


def _migrate_examples() -> list[Example]:
    command = ["$ kcatalog import-registry --from-json registry.json --out out"]
    return [
        Example(str(case.relative_to(REPO)), command, _lines(case / "expected.txt")[:-1])  # the last: 'exit N'
        for case in sorted(p for p in MIGRATE_CASES.iterdir() if p.is_dir())
    ]


def _api_examples() -> list[Example]:
    """test_corpus.py's API_CASES (read as data, never imported): check_catalog calls on the clean_minimal case."""
    tree = ast.parse(CORPUS_TEST.read_text(encoding="utf-8"))
    value = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "API_CASES"
    )
    if value is None:
        raise ValueError(f"{CORPUS_TEST}: API_CASES has no value")
    found = []
    for kwargs, environ, expected in ast.literal_eval(value).values():
        arguments = "".join(f", {key}={json.dumps(item)}" for key, item in kwargs.items())
        command = [
            *([">>> import os"] if environ else []),
            *(f">>> os.environ[{json.dumps(key)}] = {json.dumps(item)}" for key, item in environ.items()),
            ">>> import kcatalog",
            f'>>> catalog, diagnostics = kcatalog.check_catalog(["."]{arguments})',
            '>>> print(*diagnostics, sep="\\n")',
        ]
        found.append(Example(str((CORPUS / "clean_minimal").relative_to(REPO)), command, expected))
    return found


def _shown(example: Example, code: str) -> Example:
    """The example with the file its first `code` line points into, where that file is short plain text."""
    for text in example.output:
        match = LINE.match(text)
        if not (match and match["code"] == code and match["path"]):
            continue
        path = REPO / example.source / match["path"]
        if not path.is_file() or path.suffix not in (".yaml", ".yml", ".lock"):
            return example
        try:
            content = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            return example
        lines = content.splitlines()
        if len(lines) > SHOWN_FILE_LINES or max(map(len, lines), default=0) > SHOWN_LINE_WIDTH:
            return example
        if "\t" in content or content.startswith("\ufeff"):  # hostile cases: shown as bytes would not be
            return example
        return Example(example.source, example.command, example.output, match["path"], int(match["line"]))
    return example


def examples() -> dict[str, Example]:
    """For each code, the case that shows it best: one whose file can be shown first, then the shortest output
    (ties: the first by name)."""
    candidates: dict[str, list[Example]] = {}
    for example in [*_corpus_examples(), *_api_examples(), *_migrate_examples()]:
        for code in {m["code"] for m in map(LINE.match, example.output) if m}:
            candidates.setdefault(code, []).append(_shown(example, code))
    return {
        code: min(found, key=lambda e: (e.shown_file is None, len(e.output), e.source))
        for code, found in candidates.items()
    }


def _example_text(example: Example, project: Project) -> str:
    where = f"[`{example.source}`]({project.tree(example.source)})"
    language = "pycon" if example.command[0].startswith(">>>") else "console"
    text = [f"In {where}:\n", f"```{language}", *example.command, *example.output, "```\n"]
    if example.shown_file is not None:
        content = (REPO / example.source / example.shown_file).read_text(encoding="utf-8").rstrip("\n")
        language = "yaml" if example.shown_file.endswith((".yaml", ".yml")) else "text"
        text += [f'```{language} title="{example.shown_file}" hl_lines="{example.shown_line}"', content, "```\n"]
    return "\n".join(text)


def diagnostics_page(project: Project) -> str:
    """The page: each group, then each code with its meaning and an example."""
    found = examples()
    parts = [
        "# Diagnostic codes\n",
        "Every code kcatalog reports, from `kcatalog.codes` (each is a named constant there, e.g. "
        "`codes.YAML_SYNTAX == 'KC001'`), grouped by the stage that finds it. A diagnostic prints as "
        "`path:line:col: CODE message`, with `warning:` before the message where it is one; `--strict` makes "
        "warnings fail, `--error-on CODES` some of them. Each example is a case of the test suite, "
        "which checks that exact output.\n",
    ]
    for group in groups():
        parts.append(f"## {group.codes}: {group.stage}\n\n{group.what[0].upper()}{group.what[1:]}\n")
        for code, name in group.members:
            if code not in found:  # tests/core/test_corpus.py holds every code to a case too
                raise ValueError(f"{code}: no case of the test suite reports it")
            parts.append(f"### {code}: {codes.CODES[code]} {{#{code.lower()}}}\n\n`kcatalog.codes.{name}`\n")
            parts.append(_example_text(found[code], project))
    return "\n".join(parts)
