"""Plain data as YAML text: the one emitter behind every YAML file kcatalog writes (manifests and settings from
import-registry, plans, tuned tables), so that any string reads back as itself and no value becomes structure.

A string is written unquoted only when it is a simple word the loader reads back as text (not `no`, `null`,
`1.0`); anything else is double-quoted, with every line break (`\\n`, `\\r`, U+0085, U+2028, U+2029), control
character and character outside the Basic Multilingual Plane escaped, so that each scalar stays on its line.
Comments are escaped the same way. A key too long for YAML's implicit keys is written as an explicit `? key`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from ..read.yaml_nodes import MAX_NUMBER_CHARS, reads_as_text


@dataclass(frozen=True)
class Flow:
    """A mapping or list written on one line (`{device: cuda, min_arch: "8.0"}`), as a reader scans a table."""

    value: Union[Mapping[Any, Any], Sequence[Any]]


@dataclass(frozen=True)
class Rows:
    """A list written one item to a line, each item inline where it can be: a tuned table's buckets, so that a
    reader (and a diff) sees one bucket per line."""

    items: Sequence[Any]


class UnwritableValue(ValueError):
    """A value no YAML file can hold: a lone surrogate (YAML readers refuse its escape), a numeral longer than the
    loader reads, or a type that is not plain data."""


# Written unquoted: starts with a letter or '_', then letters, digits, '_', '.', '-' (no indicator, no ': ' or
# ' #', nothing flow context reads as structure), and reads back as text.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
# What a double-quoted scalar must escape: all but printable ASCII (less '"' and '\') and the printable BMP
# characters YAML reads as themselves (less the byte-order mark and U+2028/U+2029, which are line breaks).
_QUOTED_ESCAPE = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd]")
_COMMENT_ESCAPE = re.compile(r"[^\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd]")
_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0", "\x85": "\\N"}
# Implicit keys end within 1024 characters of their start (libyaml); longer ones are written as `? key`.
_IMPLICIT_KEY_CHARS = 512


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if 0xD800 <= ord(char) <= 0xDFFF:
        raise UnwritableValue(f"text holds a lone surrogate U+{ord(char):04X}, which no YAML file can hold")
    return _escape_in_comment(match)


def _escape_in_comment(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02X}" if code <= 0xFF else f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def scalar(value: Any) -> str:
    """One scalar as YAML: text (plain or double-quoted), an int, a float, a boolean or null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if abs(value) >= 10 ** (MAX_NUMBER_CHARS - 1):  # the loader refuses longer numerals
            raise UnwritableValue(f"an integer of {MAX_NUMBER_CHARS} digits or more")
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        return text if "." in mantissa else f"{mantissa}.0{e}{exponent}"  # YAML 1.1 floats need a '.'
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and reads_as_text(value):
            return value
        return f'"{_QUOTED_ESCAPE.sub(_escape, value)}"'
    raise UnwritableValue(f"a {type(value).__name__} is not a YAML scalar")


def comment(text: str) -> str:
    """A comment line: `# text`, every line break and control character in it escaped, so it stays one line."""
    return f"# {_COMMENT_ESCAPE.sub(_escape_in_comment, text)}".rstrip()


def document(data: Mapping[str, Any], *, comments: Sequence[str] = ()) -> str:
    """A YAML document: the comment lines, then `data` as a block mapping. Mappings are written as blocks and
    lists of scalars on one line, unless wrapped in Flow (one line, whatever they hold)."""
    lines = [comment(text) for text in comments]
    lines += _block(data, 0) if data else ["{}"]
    return "\n".join(lines) + "\n"


def _inline(value: Any) -> str | None:
    """The value on one line, or None when it is written as a block."""
    if isinstance(value, Flow):
        return _flow(value.value)
    if isinstance(value, Rows):
        return "[]" if not value.items else None
    if isinstance(value, Mapping):
        return "{}" if not value else None
    if isinstance(value, (list, tuple)):
        if all(_is_scalar(item) or isinstance(item, Flow) for item in value):
            return _flow(value)
        return None
    return scalar(value)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float))


def _flow(value: Any) -> str:
    if isinstance(value, Flow):
        return _flow(value.value)
    if isinstance(value, Mapping):
        items = []
        for key, item in value.items():
            text = scalar(key)
            items.append(f"? {text}: {_flow(item)}" if len(text) > _IMPLICIT_KEY_CHARS else f"{text}: {_flow(item)}")
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(item) for item in value) + "]"
    return scalar(value)


def _block(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, Rows):
        value = list(value.items)
    if isinstance(value, Mapping):
        for key, item in value.items():
            text = scalar(key)
            if len(text) > _IMPLICIT_KEY_CHARS:
                lines.append(f"{pad}? {text}")
                text = ""  # the ':' goes on a line of its own, below the key
            inline = _inline(item)
            if inline is not None:
                lines.append(f"{pad}{text}: {inline}")
            else:
                lines.append(f"{pad}{text}:")
                lines += _block(item, indent + 2)
        return lines
    if isinstance(value, (list, tuple)):
        for item in value:
            inline = _inline(item)
            if inline is not None:
                lines.append(f"{pad}- {inline}")
            else:
                inner = _block(item, indent + 2)
                lines.append(f"{pad}- {inner[0][indent + 2 :]}")
                lines += inner[1:]
        return lines
    raise UnwritableValue(f"a {type(value).__name__} is not a mapping or list")
