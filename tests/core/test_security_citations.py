"""SECURITY.md states each promise with the tests that hold it: every test, file and corpus case it cites exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
PATH = re.compile(r"`(tests/[\w/.]+)`")


def test_every_cited_test_exists() -> None:
    text = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    cited = TEST.findall(text)
    assert len(cited) > 30  # the promises cite their tests
    missing = [
        f"{path}::{name}"
        for path, name in cited
        if not (ROOT / path).is_file()
        or not re.search(rf"^(async )?def {name}\(|^class {name}\b", (ROOT / path).read_text(encoding="utf-8"), re.M)
    ]
    assert missing == []


def test_every_cited_file_and_case_exists() -> None:
    text = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    missing = [path for path in PATH.findall(text) if not (ROOT / path).exists()]
    assert missing == []
