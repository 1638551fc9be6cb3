"""Read the *data* a prompt fenced (``<name_KEY>\\n...\\n</name_KEY>``), never its wording: a scripted reply that
depends on the claim, sentence or source it is asked about reads them with these helpers, so rewording an
instruction does not break a test. Which stage a request comes from is told by its reply type
(``FakeModel(by_reply=...)``), not by searching the prompt."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_MISSING = object()


def user_text(prompt: str | Sequence[Any]) -> str:
    """The user messages of a request, joined (a source-once request can put the source and the claim in two)."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(m["content"] for m in prompt if m["role"] == "user")


def fenced(prompt: str | Sequence[Any], name: str, default: Any = _MISSING) -> str:
    """The value fenced as ``name`` (the last one: worked examples come before the data); ``default`` when the
    prompt fences none, or an AssertionError naming the value when no default is given."""
    found = re.findall(rf"<{name}_(\w+)>\n(.*?)\n</{name}_\1>", user_text(prompt), re.DOTALL)
    if found:
        return str(found[-1][1])
    if default is _MISSING:
        raise AssertionError(f"no fenced {name} in the prompt")
    return str(default)


def listing(prompt: str | Sequence[Any], name: str) -> list[tuple[int, str]]:
    """``(number, text)`` of each ``N. text`` line of the numbered listing fenced as ``name``."""
    return [(int(n), text) for n, text in re.findall(r"^(\d+)\.\s*(.+)$", fenced(prompt, name), re.MULTILINE)]
