"""Parsing a module without its function bodies, where that is known to give the same index.

The index (index.py) reads only what module and class bodies bind; function bodies, most of a
module's bytes, only cost parsing, so they are left out. A syntax error anywhere must still be found (KC306):
where the import system holds bytecode for this very source (its `__pycache__` entry matches the source's
time and size, or its hash, as the import system itself checks them), importing would run that bytecode, and
no syntax error can show; elsewhere the source is compiled, as importing it would compile it (its symbol table
alone, a third cheaper, accepts a `return` or `await` at module level and a `break` outside a loop).

Leaving a body out: strings and comments are blanked (keeping their length and line breaks), each `def`
header's end is found at bracket depth 0, and the def becomes `def name(): pass` followed by empty lines up
to the first later line indented no deeper than the `def` (not continued by a backslash), so line numbers
stay. The result is parsed and checked: every emptied def must hold exactly its `pass` where it was put;
otherwise the module is parsed whole. A body cut short at a line inside its brackets leaves a closing bracket
at the top level, which does not parse.
"""

from __future__ import annotations

import _imp
import ast
import importlib.util
import os
import re

from .parsing import parse

# Strings and comments (a string's prefix letters stay in the code, harmless; a raw string ends where any
# other string does). Strings become "" plus their line breaks, each continued line marked with \x01.
_STRING_OR_COMMENT = re.compile(
    rb"#[^\n]*"
    rb"|'''(?:[^'\\]+|\\.|'(?!''))*'''"
    rb'|"""(?:[^"\\]+|\\.|"(?!""))*"""'
    rb"|'(?:[^'\\\n]+|\\.)*'"
    rb'|"(?:[^"\\\n]+|\\.)*"',
    re.DOTALL,
)
_ODD_INDENT = re.compile(rb"^ *[\t\x0c]", re.MULTILINE)  # tabs and form feeds: indentation that is not columns
_DEF = re.compile(rb"def +([^\s(\[:]+) *[(\[]")  # searched for literally; what precedes it is checked after
_DEF_PREFIX = re.compile(rb"( *)(async +)?")
_DEDENTS: dict[int, re.Pattern[bytes]] = {}
MAX_HEADER_LINES = 200


def syntax_tree(source: bytes, origin: str) -> ast.Module:
    """The tree to index the module from: without function bodies wherever that gives the same index.

    Raises what parsing the module whole would (SyntaxError, ValueError for NUL bytes, RecursionError), so
    that a module importing would fail on is found whatever is left out: unless the import system's bytecode
    cache vouches for the source, it is compiled as importing it would (without making Python objects of its
    tree: two thirds of the cost of ast.parse)."""
    if not _compiles(source, origin):
        compile(source, origin, "exec", dont_inherit=True)
    tree = without_bodies(source, origin)
    return tree if tree is not None else parse(source, filename=origin)


def without_bodies(source: bytes, filename: str = "<unknown>") -> ast.Module | None:
    """The AST of the source with function bodies left out, or None where that is not sure to give the index
    a whole parse gives (a SyntaxError of the source itself is not looked for: see skeleton())."""
    if b"\r" in source or ((b"\t" in source or b"\x0c" in source) and _ODD_INDENT.search(source)):
        return None
    hollowed = _hollow(source)
    if hollowed is None:
        return None
    text, passes = hollowed
    try:
        tree = parse(text, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return tree if _holds(tree, passes) else None


def _compiles(source: bytes, origin: str) -> bool:
    """Whether the import system holds bytecode for exactly this source (and would run it, not the source)."""
    if not origin.endswith(".py"):
        return False
    try:
        cached = importlib.util.cache_from_source(origin)
        fd = os.open(cached, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            header = os.read(fd, 16)
        finally:
            os.close(fd)
        info = os.stat(origin)
    except (OSError, ValueError, NotImplementedError):
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(header[4:8], "little")
    if flags == 0:  # timestamp-based: what the import system compares
        mtime = int.from_bytes(header[8:12], "little")
        size = int.from_bytes(header[12:16], "little")
        return mtime == int(info.st_mtime) & 0xFFFFFFFF and size == info.st_size & 0xFFFFFFFF
    if flags & 0b1 == 0:
        return False
    check = _imp.check_hash_based_pycs
    if check == "never" or (check == "default" and not flags & 0b10):  # an unchecked hash-based pyc: used as is
        return True
    return header[8:16] == importlib.util.source_hash(source)


def _hollow(source: bytes) -> tuple[bytes, set[int]] | None:
    """The source with function bodies emptied, and the line of each `pass` put in; None where unsure."""
    code = _STRING_OR_COMMENT.sub(_blank, source)  # as long as the source: offsets are the same in both
    parts: list[bytes] = []
    passes: set[int] = set()
    done = 0  # source offset up to which the output is written: defs inside emptied bodies go with them
    line, counted = 1, 0  # the 1-based line at offset `counted`, counted as the defs come
    for match in _DEF.finditer(code):
        if match.start() < done:
            continue
        begin = code.rfind(b"\n", 0, match.start()) + 1  # the line must hold only the def (after `async`)
        prefix = _DEF_PREFIX.fullmatch(code, begin, match.start())
        if prefix is None:
            continue
        header = _header_end(code, begin)
        if header is None:
            return None
        if header < 0:  # a one-line def: nothing to empty
            continue
        end = _body_end(code, header, len(prefix.group(1)))
        if end <= header:
            continue
        line += code.count(b"\n", counted, begin)
        counted = begin
        # `def name(): pass` (parameters, annotations and defaults go too: the index needs none of them),
        # then as many line breaks as the def had, so that every later line keeps its number.
        parts += (source[done:begin], prefix.group(1), b"async def " if prefix.group(2) else b"def ", match.group(1))
        parts += (b"(): pass", b"\n" * code.count(b"\n", begin, end))
        passes.add(line)
        done = end
    if not passes:
        return None
    parts.append(source[done:])
    return b"".join(parts), passes


_SPACES = bytes(range(256)).translate(bytes(0x20 if b != 0x0A else 0x0A for b in range(256)))


def _blank(match: re.Match[bytes]) -> bytes:
    """A comment becomes spaces, a string quote characters (nothing in them is code); a string's line breaks
    stay, each line it continues marked (\x01). The same length, so that offsets match the source's."""
    text = match.group()
    if text[0] == 0x23:  # '#'
        return b" " * len(text)
    if b"\n" not in text:
        return b'"' * len(text)
    return b'""' + text[2:].translate(_SPACES).replace(b"\n ", b"\n\x01")


def _header_end(code: bytes, start: int) -> int | None:
    """The offset where the def's body starts (the line after its header); -1 for a def on one line; None
    where unsure (a header continued by a backslash, brackets that do not close)."""
    depth = 0
    position = start
    for _ in range(MAX_HEADER_LINES):
        newline = code.find(b"\n", position)
        stop = len(code) if newline < 0 else newline
        text = code[position:stop].rstrip()
        depth += text.count(b"(") + text.count(b"[") + text.count(b"{")
        depth -= text.count(b")") + text.count(b"]") + text.count(b"}")
        if depth < 0 or (depth == 0 and text.endswith(b"\\")) or (newline < 0 and depth):
            return None
        if depth == 0:
            if not text.endswith(b":"):
                return -1
            return stop + 1 if newline >= 0 else stop
        position = stop + 1
    return None


def _body_end(code: bytes, body: int, indent: int) -> int:
    """The offset of the line after the body: the first line indented no deeper than the def that is not
    continued by a backslash (or the end of the module)."""
    pattern = _DEDENTS.get(indent)
    if pattern is None:  # led by the line break: the regex engine then skips ahead to each one quickly
        pattern = _DEDENTS[indent] = re.compile(rb"\n {0,%d}[^ \n\x01]" % indent)
    position = body - 1  # the line break before the body's first line
    while True:
        found = pattern.search(code, position)
        if found is None:
            return len(code)
        start = found.start() + 1
        if not (start >= 2 and code[start - 2] == 0x5C):  # a backslash before the line break continues it
            return start
        position = start


def _holds(tree: ast.Module, passes: set[int]) -> bool:
    """Every emptied def holds exactly the `pass` put in, and every `pass` put in is in one."""
    seen = 0
    blocks: list[list[ast.stmt]] = [tree.body]
    while blocks:
        for stmt in blocks.pop():
            kind = type(stmt)
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                body = stmt.body  # type: ignore[attr-defined]
                if body[0].lineno in passes:
                    if len(body) != 1 or type(body[0]) is not ast.Pass:
                        return False
                    seen += 1
            elif kind in _COMPOUND:
                for name in ("body", "orelse", "finalbody"):
                    block = getattr(stmt, name, None)
                    if block:
                        blocks.append(block)
                for part in getattr(stmt, "handlers", None) or getattr(stmt, "cases", None) or ():
                    blocks.append(part.body)
    return seen == len(passes)


# Statements holding other statements (where defs can be).
_COMPOUND = frozenset(
    getattr(ast, name)
    for name in ("ClassDef", "If", "For", "AsyncFor", "While", "With", "AsyncWith", "Try", "TryStar", "Match")
    if hasattr(ast, name)
)
