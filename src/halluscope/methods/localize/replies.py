"""The localizer's and the binary filter's declared replies, and their defensive parsers (see the package
docstring: a reply that is not the declared format is no answer)."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pydantic import Field, ValidationError, field_validator

from halluscope.llm.replies import Reply
from halluscope.methods.localize.examples import FEW_SHOT_EXAMPLES
from halluscope.text import ParseError
from halluscope.text.descriptions import clean_descriptions, spans_for_description
from halluscope.text.labels import ascii_text
from halluscope.text.parsing import RetractedAnswerError
from halluscope.text.placeholders import (
    example_strings,
    normalized,
    resembles,
    shown_strings,
)
from halluscope.text.tags import strip_think

FINAL_MARKER = "Final Output:"


class LocalizationReply(Reply):
    """The declared list of descriptions; ``[]`` is the explicit "no inconsistency" answer. Echoed
    placeholders and the prompt's own examples are not descriptions: a list of nothing else is refused, and
    so is a list that says "None" beside real descriptions."""

    inconsistencies: list[str] = Field(
        description="every factual inconsistency of the TEXT, each as one self-contained sentence that quotes "
        "the TEXT's words in double quotes and says what the SOURCE says instead, or that the SOURCE "
        "does not say it; an empty list when the TEXT has no factual inconsistency"
    )
    example: ClassVar[dict[str, Any] | None] = {
        "inconsistencies": ['The text says the bridge opened "in 1990", but the source says it opened in 1992.']
    }

    @field_validator("inconsistencies")
    @classmethod
    def _real_descriptions(cls, items: list[str]) -> list[str]:
        return clean_descriptions(items, LOCALIZATION_ECHOES)


class HintedLocalizationReply(LocalizationReply):
    """The same list, for a TEXT known to contain an inconsistency (the empty-list option is not offered)."""

    inconsistencies: list[str] = Field(
        description="every factual inconsistency of the TEXT, each as one self-contained sentence that quotes "
        "the TEXT's words in double quotes and says what the SOURCE says instead, or that the SOURCE "
        "does not say it"
    )


LOCALIZATION_EXAMPLES = example_strings(LocalizationReply) | frozenset(
    normalized(d) for _, _, ds in FEW_SHOT_EXAMPLES for d in ds
)
LOCALIZATION_ECHOES = shown_strings(LocalizationReply) | shown_strings(HintedLocalizationReply) | LOCALIZATION_EXAMPLES


def reply_schema(hint: bool) -> type[LocalizationReply]:
    return HintedLocalizationReply if hint else LocalizationReply


_MARKER_LINE = re.compile(r"^[ \t*#>_]*final\s+output\s*:", re.I | re.M | re.A)
"""ASCII-only case folding (``re.A``): "Fınal Output:" with a dotless i is no marker."""


def _without_example_copies(descriptions: list[str], target: str) -> list[str]:
    """Drop near copies of the prompt's example descriptions (small models copy an example with a detail
    changed) unless they point at words of the target; a list of nothing else is no answer."""
    kept = [d for d in descriptions if not resembles(d, LOCALIZATION_EXAMPLES) or spans_for_description(d, target)]
    if descriptions and not kept:
        raise ParseError("the list copies the prompt's example descriptions instead of describing the TEXT")
    return kept


def parse_localization(text: str, hint: bool = False, target: str = "") -> list[str]:
    """Descriptions from a zero-/few-shot reply: exactly the declared JSON object (``[]`` = none found)."""
    return _without_example_copies(reply_schema(hint).parse(text).inconsistencies, target)


def parse_final_output(text: str, hint: bool = False, target: str = "") -> list[str]:
    """Descriptions from a chain-of-thought reply: the reasoning, then a line starting ``Final Output:``;
    what follows the last such line must be the declared JSON object (in a code fence or not). Raises
    ParseError when the marker is missing, when the final answer is anything else, and when an earlier marker
    line states a different answer (two verdicts)."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    body = strip_think(text)
    marks = list(_MARKER_LINE.finditer(body))
    if not marks:
        raise ParseError(f'no line starting "{FINAL_MARKER}" in the reply')
    rest = body[marks[-1].end() :].lstrip(" \t*_").strip()
    if not rest:
        raise ParseError(f'nothing after "{FINAL_MARKER}"')
    if not rest.startswith(("{", "```")):
        raise ParseError(f'after "{FINAL_MARKER}" the reply must be the JSON object, not {rest[:40]!r}')
    final = reply_schema(hint).parse(rest).inconsistencies
    for before, after in zip(marks, marks[1:]):  # an earlier final output that answers otherwise: two verdicts
        try:
            earlier = reply_schema(hint).parse(body[before.end() : after.start()]).inconsistencies
        except RetractedAnswerError as exc:  # "Final Output: A ... on second thought ... Final Output: B"
            raise ParseError(f'the reply has two "{FINAL_MARKER}" lines and takes the first back') from exc
        except (ParseError, ValidationError):
            continue
        if earlier != final:
            raise ParseError(f'the reply has two "{FINAL_MARKER}" lines with different answers')
    return _without_example_copies(final, target)


_LAST_LINE_ANSWER = re.compile(r"^final\s+answer\s*[:\-]?\s*(yes|no)\s*\.?$", re.I | re.A)


def parse_binary_verdict(text: str) -> bool:
    """True (consistent) / False from a reply whose last line is exactly "Final answer: yes" or "Final answer:
    no" (FINAL H.3; case, markdown emphasis and a final period aside). Anything else raises ParseError: a
    verdict is not guessed from wording elsewhere in the reply; look-alike letters ("yeſ") are not "yes"; an
    earlier "Final answer:" line with the other answer makes two verdicts (refused)."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    lines = [line for line in strip_think(text).splitlines() if line.strip()]
    last = re.sub(r"[*_`#>]", "", lines[-1]).strip() if lines else ""
    answers = {a.lower() for line in lines[:-1] if (a := _stated_answer(line)) is not None}
    m = _LAST_LINE_ANSWER.match(last) if ascii_text(last) is not None else None
    if m is None:
        raise ParseError(f'the last line is not "Final answer: yes" or "Final answer: no": {last[:60]!r}')
    if answers - {m.group(1).lower()}:
        raise ParseError('the reply states "Final answer: yes" and "Final answer: no": two verdicts')
    return m.group(1).lower() == "yes"


_EARLIER_ANSWER = re.compile(r"\bfinal\s+answer\s*:\s*[\"'“”]?\s*(yes|no)\b", re.I | re.A)
"""A "Final answer: yes/no" anywhere in an earlier line, whatever follows it ("Final answer: no [note] ...")."""


def _stated_answer(line: str) -> str | None:
    """The yes/no of an earlier "Final answer: ..." statement (a verdict stated before the last line, also one
    with text after it on its line), else None."""
    clean = re.sub(r"[*_`#>]", "", line).strip()
    m = _LAST_LINE_ANSWER.match(clean) or _EARLIER_ANSWER.search(clean)
    return m.group(1) if m else None
