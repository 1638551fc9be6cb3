"""Defensive parsing of model replies: broken JSON, code fences, prose around the answer, lists.

Every parser raises :class:`ParseError` (with a reason) or returns a value; nothing else escapes.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import json_repair

from halluscope.text.tags import strip_think


class ParseError(ValueError):
    """A reply could not be turned into the expected structure; the message says why."""


# Possessive whitespace: with a plain ``\s*`` every split of a long whitespace run was retried against the
# lazy body (quadratic: "```" + 20,000 spaces took 2 s).
_FENCE = re.compile(r"```(?:json|JSON)?\s*+(.*?)```", re.S)


MAX_REPAIR_CANDIDATES = 200
"""A reply with more bracketed values than this that only syntax repair could read is refused as a whole (never
read from its first few: a second answer may hide after them); repair is the one super-linear step."""


_STRUCTURAL = re.compile(r'[{}\[\]"\\]')  # the only characters the scan below reacts to


def _top_level_starts(text: str) -> list[int]:
    """Positions of "{"/"[" that open a value at nesting depth 0 (quotes only count inside a value, so
    prose quotes do not hide it). An inner object of a truncated reply is never a candidate on its own.
    Jumps between structural characters in C: a long reply without brackets costs next to nothing. Every start
    is returned, however many (a second answer after any amount of text is seen): the scan is linear, and the
    strict decoding tried at each start reads only that value, so the work over all of them stays linear."""
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


class RetractedAnswerError(ParseError):
    """The reply states an answer and then takes it back in prose (:data:`RETRACTION`): it has no final answer."""


class RepeatedKeyError(ParseError):
    """A JSON object of the reply names the same key twice (after case and Unicode normalisation: "verdict" and
    "Verdict", or a full-width "ｖｅｒｄｉｃｔ", are one key): which value it meant is not stated."""

    def __init__(self, key: str):
        super().__init__(f"the reply repeats the key {key!r} in one object: its value is ambiguous")
        self.key = key


def normalized_key(key: str) -> str:
    """A JSON key as it is compared: NFKC, case-folded, without format characters (zero-width spaces...) and
    surrounding whitespace. Two keys that normalise alike name the same field twice."""
    folded = unicodedata.normalize("NFKC", key).casefold()
    if not folded.isascii():
        folded = "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")
    return folded.strip()


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` that refuses a repeated key, compared by :func:`normalized_key` (``json`` would
    silently keep the last one; a key differing only in case would be ignored as an extra one)."""
    out: dict[str, Any] = {}
    seen: set[str] = set()
    for key, value in pairs:
        norm = normalized_key(key)
        if norm in seen:
            raise RepeatedKeyError(key)
        seen.add(norm)
        out[key] = value
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs)


def _canonical(value: Any) -> str:
    """One spelling per JSON value (key order and spacing aside), to tell repeated statements from different ones."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=True)
    except (RecursionError, ValueError) as exc:
        raise ParseError(f"the JSON in the reply cannot be compared ({type(exc).__name__})") from exc


def _repeated_key(candidate: str) -> str | None:
    """The first key that one object of ``candidate`` names twice (quoted in either quote, or bare), else None.
    A linear scan used on candidates that only syntax repair can read (the repair would keep the last value)."""
    stack: list[set[str] | None] = []  # one set of keys per open object, None per open array
    i, n = 0, len(candidate)
    while i < n:
        ch = candidate[i]
        key: str | None = None
        if ch in "\"'":
            j, escaped = i + 1, False
            while j < n:
                c = candidate[j]
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif c == ch:
                    break
                j += 1
            key, i = candidate[i + 1 : j], j + 1
        elif ch.isalpha() or ch == "_":
            j = i
            while j < n and (candidate[j].isalnum() or candidate[j] in "_-"):
                j += 1
            key, i = candidate[i:j], j
        else:
            if ch == "{":
                stack.append(set())
            elif ch == "[":
                stack.append(None)
            elif ch in "}]" and stack:
                stack.pop()
            i += 1
            continue
        k = i
        while k < n and candidate[k] in " \t\r\n":
            k += 1
        keys = stack[-1] if stack else None
        if k < n and candidate[k] == ":" and keys is not None:
            norm = normalized_key(key)
            if norm in keys:
                return key
            keys.add(norm)
    return None


MAX_REPLY_CHARS = 200_000
"""Replies longer than this are refused before any parsing (no real verdict is that long)."""

MAX_REPAIR_CHARS = 8_000
"""JSON candidates longer than this must be valid as they are: syntax repair is super-linear on hostile input."""

RETRACTION = re.compile(
    r"\b(?:on (?:second|further) thoughts?|on (?:reflection|closer (?:look|inspection|reading))|scratch that|"
    r"(?:disregard|ignore|forget) (?:that answer|this answer|the (?:above|previous|last|first)|my (?:previous |last |"
    r"first )?(?:answer|verdict|reply|response|score|json))|i (?:hereby )?retract|retract(?:ing|ed)? (?:that|this|"
    r"the|my)|i take (?:that|this|it) back|i was (?:wrong|mistaken)|(?:the (?:above|previous)|my (?:previous |first )?)"
    r"(?:answer|verdict|score|json) (?:is|was) (?:wrong|incorrect|mistaken|a mistake)|let me (?:correct|revise|"
    r"reconsider|change) (?:that|this|it|my)|i (?:need to |must |should )?(?:correct|revise|change) (?:that|this|my)|"
    r"changed? my (?:mind|answer)|(?:actually|wait)\W{0,3}no\b)",
    re.I,
)
"""Prose after a reply's last JSON value that takes it back ("On second thought, ...", "Scratch that", "Disregard
the above", "I retract ...", "I was wrong", "Actually, no"): the answer stated is then not the reply's final word.
Only a speaker taking back their own answer counts: "that is wrong" or "Correction: ..." after the answer may
explain it (the claim is wrong, the text should say ...), and is read as before."""

_JSON_LITERALS = {"true", "false", "null", "True", "False", "None"}
_BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")


def _value_end(text: str, start: int, stop: int | None = None) -> int | None:
    """Index just past the bracketed value opening at ``start``; None when it never closes before ``stop`` (a
    truncated reply). Strings in double or single quotes are skipped."""
    depth = 0
    quote: str | None = None
    escaped = False
    for i in range(start, len(text) if stop is None else stop):
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
    # the same quote scan as _value_end, written out again on purpose: one shared per-character generator (or a
    # regular expression over the strings) made the scan of a hostile 1 MB reply about twice as slow
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
        rest = skeleton[m.end() :].lstrip()
        if rest.startswith(":"):
            continue  # an unquoted key
        if word[0] in "eE" and m.start() > 0 and skeleton[m.start() - 1].isdigit():
            continue  # exponent of a number
        return False
    return True


def extract_json(  # noqa: C901 - the defensive JSON extraction tries each repair in order, one branch each
    text: str,
    expect: type | tuple[type, ...] = (dict, list),
    *,
    max_chars: int = MAX_REPLY_CHARS,
    examples: Sequence[Any] = (),
) -> Any:
    """The one JSON value of type ``expect`` that ``text`` states; tolerates fences, prose around it and
    *syntax* errors inside it, never more.

    Complete, valid JSON values win. Otherwise a bracketed candidate is repaired only when it is complete (its
    brackets close: a reply cut off mid-value is refused, not completed), short (``MAX_REPAIR_CHARS``), and
    holds no bare prose words (only quoted strings, numbers, literals, keys).

    A verdict comes from one unambiguous statement of it, so the reply is refused (ParseError) when

    * it states two *different* non-empty values of type ``expect`` (``{"score": 1} ... On second thought:
      {"score": 5}``, after any amount of text; the same value repeated is one statement, an empty ``{}``/``[]``
      beside an answer none); an object inside a list counts as a statement of its own (``{"supported": true}
      [{"supported": false}]``), though a list alone is never read as an object,
    * an object names the same key twice, compared after case and Unicode normalisation
      (``{"score": 1, "score": 5}``, ``{"score": 5, "Score": 1}``),
    * more than ``MAX_REPAIR_CANDIDATES`` bracketed values need syntax repair (work stays bounded; no answer is
      read from the first few), or one that needs it is longer than ``MAX_REPAIR_CHARS`` (whether it states a
      second answer cannot be known),
    * a bracketed value that would need only syntax repair is cut off (a second answer cut off; alone, the
      answer is cut off),
    * prose after the answer's last statement takes it back (:data:`RETRACTION`: "On second thought, ...",
      "Scratch that"), or
    * its only value is one of ``examples`` (the format's own example echoed back, alone or inside echoed
      format text or an echoed prompt); an example beside one real answer is an echo and is skipped."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    if len(text) > max_chars:
        raise ParseError(f"reply of {len(text)} characters exceeds the {max_chars}-character limit")
    echo_keys = {_canonical(e) for e in examples}
    answers: dict[str, Any] = {}
    inner: dict[str, Any] = {}  # objects inside a list when only objects are expected: a second statement
    echoed = 0
    repairable: list[str] = []
    truncated = False
    cut_off: str | None = None  # the first cut-off value that looks like JSON (only syntax to repair)
    body = strip_think(text)
    answer_end = 0  # where the body's last statement of an answer ends: prose after it may take the answer back
    body_ends: dict[str, int] = {}  # where each bracketed value of the body that needs repair ends
    sources = [m.group(1) for m in _FENCE.finditer(body)] + [body]
    for src in sources:
        starts = _top_level_starts(src)
        for n, pos in enumerate(starts):
            try:
                value, end = _DECODER.raw_decode(src, pos)
            except RepeatedKeyError:
                raise
            except (json.JSONDecodeError, RecursionError):
                # searched only up to the next start: a value never closing there is cut off (single quotes
                # can make it look longer; scanning to the end from every start would be quadratic)
                stop = starts[n + 1] if n + 1 < len(starts) else None
                found_end = _value_end(src, pos, stop)
                if found_end is None:
                    truncated = True
                    if cut_off is None and _only_syntax_errors(src[pos:stop]):
                        cut_off = src[pos : pos + 60]
                    continue
                repairable.append(src[pos:found_end])
                if src is body:
                    body_ends[src[pos:found_end]] = found_end
                continue
            if not isinstance(value, expect):
                if isinstance(value, list) and dict in (expect if isinstance(expect, tuple) else (expect,)):
                    for item in value:
                        if isinstance(item, dict) and item:
                            inner.setdefault(_canonical(item), item)
                continue
            key = _canonical(value)
            if key in echo_keys:
                echoed += 1
            else:
                answers.setdefault(key, value)
                if src is body:
                    answer_end = max(answer_end, end)
    # Candidates only syntax repair can read: the answer when nothing parsed strictly, and a second statement
    # (a contradiction to refuse) when something did.
    candidates = [c for c in dict.fromkeys(repairable) if len(c) <= MAX_REPAIR_CHARS]
    for cand in dict.fromkeys(repairable):
        if len(cand) > MAX_REPAIR_CHARS and _only_syntax_errors(cand):
            raise ParseError(
                f"the reply holds a bracketed value of {len(cand)} characters that is not valid JSON and too long "
                f"to repair (over {MAX_REPAIR_CHARS}); whether it states another answer is not clear: {cand[:60]!r}"
            )
    if len(candidates) > MAX_REPAIR_CANDIDATES:
        raise ParseError(
            f"the reply holds {len(candidates)} bracketed values that are not valid JSON (more than "
            f"{MAX_REPAIR_CANDIDATES}); which one is the answer is not clear: {text[:80]!r}"
        )
    for cand in candidates:
        if not _only_syntax_errors(cand):
            continue
        try:
            value = json_repair.loads(cand)
        except Exception:  # json_repair may raise anything on hostile input; treated as unparseable
            continue
        # An empty container after repair means the repair found nothing (a real "{}" parsed strictly).
        if not isinstance(value, expect) or not value:
            continue
        repeated = _repeated_key(cand)
        if repeated is not None:
            raise RepeatedKeyError(repeated)
        key = _canonical(value)
        if key in echo_keys:
            echoed += 1
        else:
            answers.setdefault(key, value)
            answer_end = max(answer_end, body_ends.get(cand, 0))
    stated = {k: v for k, v in answers.items() if v}
    if len(answers) > 1 and stated:
        answers = stated  # an empty "{}" or "[]" beside a real answer states nothing
    if len(answers) > 1:
        raise ParseError(
            f"the reply states {len(answers)} different answers; a verdict must be stated once: {text[:120]!r}"
        )
    if answers and any(k not in answers and k not in echo_keys for k in inner):
        raise ParseError(
            f"the reply states a second answer inside a list; a verdict must be stated once: {text[:120]!r}"
        )
    if answers and cut_off is not None:
        raise ParseError(
            f"the reply states an answer and a second bracketed value that is cut off; which one is the answer is "
            f"not clear: {cut_off!r}"
        )
    if answers:
        retraction = RETRACTION.search(body, answer_end)
        if retraction is not None:
            raise RetractedAnswerError(
                f"the reply takes its answer back after stating it ({retraction.group(0)!r}): {text[:120]!r}"
            )
        return next(iter(answers.values()))
    if echoed:
        raise ParseError("the reply repeats the format's example instead of answering")
    why = "the JSON in the reply is cut off" if truncated else f"no JSON {_type_names(expect)} found in reply"
    raise ParseError(f"{why}: {text[:120]!r}")


def _type_names(expect: type | tuple[type, ...]) -> str:
    types = expect if isinstance(expect, tuple) else (expect,)
    names: dict[type, str] = {dict: "object", list: "array"}
    return "/".join(names.get(t, t.__name__) for t in types)


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
