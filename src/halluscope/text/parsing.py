"""Defensive parsing of model replies: broken JSON, code fences, prose around the answer, lists.

Every parser raises :class:`ParseError` (with a reason) or returns a value; nothing else escapes.
"""

from __future__ import annotations

import json
import re
from typing import Any

import json_repair

from halluscope.text.tags import strip_think


class ParseError(ValueError):
    """A reply could not be turned into the expected structure; the message says why."""


# Possessive whitespace: with a plain ``\s*`` every split of a long whitespace run was retried against the
# lazy body (quadratic: "```" + 20,000 spaces took 2 s).
_FENCE = re.compile(r"```(?:json|JSON)?\s*+(.*?)```", re.S)


_MAX_STARTS = 200  # strict decoding is tried at this many "{"/"[" positions at most


_STRUCTURAL = re.compile(r'[{}\[\]"\\]')  # the only characters the scan below reacts to


def _top_level_starts(text: str) -> list[int]:
    """Positions of "{"/"[" that open a value at nesting depth 0 (quotes only count inside a value, so
    prose quotes do not hide it). An inner object of a truncated reply is never a candidate on its own.
    Jumps between structural characters in C: a long reply without brackets costs next to nothing."""
    starts: list[int] = []
    depth = 0
    in_string = False
    skip = -1  # the character after a backslash inside a string is escaped, whatever it is
    for m in _STRUCTURAL.finditer(text):
        i = m.start()
        if i == skip:
            continue
        ch = text[i]
        if depth == 0:
            if ch in "{[":
                starts.append(i)
                if len(starts) >= _MAX_STARTS:
                    break
                depth = 1
        elif in_string:
            if ch == "\\":
                skip = i + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return starts


def _strict_values(text: str):
    """Complete JSON values that start at a top-level "{" or "[" of ``text`` (fenced blocks first)."""
    decoder = json.JSONDecoder()
    text = strip_think(text)
    sources = [m.group(1).strip() for m in _FENCE.finditer(text)] + [text]
    for src in sources:
        for pos in _top_level_starts(src):
            try:
                value, _ = decoder.raw_decode(src, pos)
            except (json.JSONDecodeError, RecursionError):
                continue
            yield value


MAX_REPLY_CHARS = 200_000
"""Replies longer than this are refused before any parsing (no real verdict is that long)."""

MAX_REPAIR_CHARS = 8_000
"""JSON candidates longer than this must be valid as they are: syntax repair is super-linear on hostile input."""

_JSON_LITERALS = {"true", "false", "null", "True", "False", "None"}
_BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")


def _value_end(text: str, start: int) -> int | None:
    """Index just past the bracketed value opening at ``start``; None when it never closes (a truncated
    reply). Strings in double or single quotes are skipped."""
    depth = 0
    quote: str | None = None
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _only_syntax_errors(candidate: str) -> bool:
    """Whether every bare word outside quotes is a JSON literal or an object key: then a repair only fixes
    syntax (quotes, commas, Python literals). Bare prose inside brackets ("[nothing]") is never turned into
    a string value."""
    out: list[str] = []
    quote: str | None = None
    escaped = False
    for ch in candidate:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
            out.append(" ")
        elif ch in "\"'":
            quote = ch
            out.append(" ")
        else:
            out.append(ch)
    skeleton = "".join(out)
    for m in _BARE_WORD.finditer(skeleton):
        word = m.group(0)
        if word in _JSON_LITERALS:
            continue
        rest = skeleton[m.end():].lstrip()
        if rest.startswith(":"):
            continue  # an unquoted key
        if word[0] in "eE" and m.start() > 0 and skeleton[m.start() - 1].isdigit():
            continue  # exponent of a number
        return False
    return True


def extract_json(text: str, expect: type | tuple[type, ...] = (dict, list), *,
                 max_chars: int = MAX_REPLY_CHARS) -> Any:
    """The first JSON value of type ``expect`` in ``text``; tolerates fences, prose around it and *syntax*
    errors inside it, never more.

    A complete, valid JSON value anywhere in the reply wins. Otherwise a bracketed candidate is repaired only
    when it is complete (its brackets close: a reply cut off mid-value is refused, not completed), short
    (``MAX_REPAIR_CHARS``), and holds no bare prose words (only quoted strings, numbers, literals, keys)."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    if len(text) > max_chars:
        raise ParseError(f"reply of {len(text)} characters exceeds the {max_chars}-character limit")
    for value in _strict_values(text):
        if isinstance(value, expect):
            return value
    truncated = False
    body = strip_think(text)
    sources = [m.group(1) for m in _FENCE.finditer(body)] + [body]
    for src in sources:
        for pos in _top_level_starts(src):
            end = _value_end(src, pos)
            if end is None:
                truncated = True
                continue
            cand = src[pos:end]
            if len(cand) > MAX_REPAIR_CHARS or not _only_syntax_errors(cand):
                continue
            try:
                value = json_repair.loads(cand)
            except Exception:  # json_repair may raise anything on hostile input; treated as unparseable
                continue
            # An empty container after repair means the repair found nothing (a real "{}" parsed strictly).
            if isinstance(value, expect) and value:
                return value
    why = "the JSON in the reply is cut off" if truncated else f"no JSON {_type_names(expect)} found in reply"
    raise ParseError(f"{why}: {text[:120]!r}")


def _type_names(expect: type | tuple[type, ...]) -> str:
    types = expect if isinstance(expect, tuple) else (expect,)
    return "/".join({dict: "object", list: "array"}.get(t, t.__name__) for t in types)


_BULLET = re.compile(r"^\s*(?:[-*•]+|\d+[.)]|\(\d+\)|[a-z][.)])(?:\s+|$)")  # a bare bullet is no item
_NONE_ANSWERS = {"none", "none.", "no inconsistencies", "no inconsistencies.", "n/a", "[]", "nothing"}


def parse_items_after_marker(text: str, marker: str | None = None) -> list[str]:
    """A list of free-form items (one per line, bullets/numbers removed), taken from after the last
    ``marker`` when one is given. An explicit "None" answer gives ``[]``. Raises ParseError when the
    marker is required but missing or when there is nothing that reads as an answer."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    body = strip_think(text)
    if marker:
        idx = body.lower().rfind(marker.lower())
        if idx < 0:
            raise ParseError(f"marker {marker!r} not found in reply")
        body = body[idx + len(marker) :]
    body = body.strip().strip(":").strip()
    if not body:
        raise ParseError("nothing after the marker" if marker else "empty reply")
    try:
        value = json.loads(body)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [v.strip() for v in value if v.strip()]
    except (json.JSONDecodeError, RecursionError):
        pass
    items: list[str] = []
    for line in body.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.lower() in _NONE_ANSWERS:
            if not items:
                return []
            continue
        items.append(_BULLET.sub("", line).strip())
    items = [i for i in items if i]
    if not items:
        raise ParseError("no items found in reply")
    return items
