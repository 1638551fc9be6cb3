"""Template echoes: a prompt's format slot or example repeated back instead of an answer.

Small models often answer a format such as ``{"facts": ["<atomic fact>"]}`` with the slot itself. Such
values are never claims, facts, descriptions or quotes: :func:`is_placeholder` recognises them, and
:func:`shown_strings` collects the strings a reply schema shows the model (its example values and field
descriptions), so a stage can refuse those too, and :func:`resembles` catches near copies of an example.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rapidfuzz import fuzz

_ANGLE_OR_BRACE = re.compile(r"^(?:<[^<>]{0,80}>|\{[^{}]{0,80}\})$")
_SQUARE_OR_ROUND = re.compile(r"^(?:\[[^\[\]]{0,80}\]|\([^()]{0,80}\))$")
NON_ANSWERS = frozenset(
    {
        "n/a",
        "na",
        "none",
        "null",
        "nil",
        "tbd",
        "todo",
        "etc",
        "example",
        "placeholder",
        "fact",
        "atomic fact",
        "claim",
        "description",
        "inconsistency",
        "statement",
        "text",
        "string",
    }
)


def normalized(text: str) -> str:
    """Lower-cased, whitespace-collapsed, without surrounding quotes, dots and spaces (for comparisons)."""
    return " ".join(text.lower().split()).strip(" .\"'")


def is_placeholder(text: str, examples: frozenset[str] = frozenset()) -> bool:
    """Whether ``text`` is a format slot echoed back instead of content: empty or without any letter or
    digit (``...``, ``…``, ``---``), a whole value in angle or curly brackets (``<atomic fact>``, ``{fact}``),
    a short label in square or round brackets that is not a sentence (``[fact]``, ``(claim)``), a bare
    slot word (``N/A``, ``description``, ``fact``), or one of ``examples`` (compare with :func:`normalized`
    values, e.g. from :func:`shown_strings`)."""
    stripped = text.strip() if isinstance(text, str) else ""
    if not any(ch.isalnum() for ch in stripped):
        return True
    if _ANGLE_OR_BRACE.match(stripped):
        return True
    if _SQUARE_OR_ROUND.match(stripped) and not stripped[1:-1].rstrip().endswith((".", "!", "?")):
        return True
    norm = normalized(stripped)
    return norm in NON_ANSWERS or norm in examples


def example_strings(reply: Any) -> frozenset[str]:
    """The string values of a reply schema's ``example`` (a :class:`~halluscope.llm.replies.Reply` subclass),
    :func:`normalized`."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.add(normalized(value))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    walk(getattr(reply, "example", None) or {})
    found.discard("")
    return frozenset(found)


def shown_strings(reply: Any) -> frozenset[str]:
    """Every string a reply schema shows the model: its ``example`` values and its field descriptions,
    :func:`normalized`. Echoed back, they are the prompt talking, not the model answering."""
    found = set(example_strings(reply))
    schema = reply.model_json_schema()
    for part in [schema, *schema.get("$defs", {}).values()]:
        for prop in part.get("properties", {}).values():
            if prop.get("description"):
                found.add(normalized(prop["description"]))
    found.discard("")
    return frozenset(found)


RESEMBLANCE = 85.0
"""Word-order-insensitive similarity (0-100) from which a value counts as a copy of a prompt's example."""


def resembles(text: str, examples: Iterable[str], threshold: float = RESEMBLANCE) -> bool:
    """Whether ``text`` is a near copy of one of ``examples`` (small models copy the prompt's example with a
    detail changed: "opened in 1992" for "opened in 1990")."""
    norm = normalized(text)
    return any(fuzz.token_sort_ratio(norm, normalized(e)) >= threshold for e in examples)
