"""FINAL matching (FINAL paper §4.2, App. D): an LLM judge aligns predicted inconsistency descriptions with
gold descriptions. Each prediction matches at most one gold item; recall counts distinct gold items
matched, so repeated predictions lower precision without adding true positives.

The judge is only asked when there is something to align: with no predictions nothing can match, and
with no gold (a consistent item) every prediction is a false positive. A judge reply we cannot parse
(after one repair round) makes the item *unscored for matching*, never "no match": the reply is one JSON object
(:class:`MatchReply`) whose ``"matches"`` decides every candidate with a reference id or null, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from halluscope.bench.metrics import count_matched_gold
from halluscope.llm.client import LLM
from halluscope.llm.replies import Reply
from halluscope.llm.structured import generate_reply
from halluscope.prompts import PromptTemplate
from halluscope.records import LLMCall
from halluscope.text.parsing import ParseError


class MatchReply(Reply):
    """The judge's alignment: every candidate id mapped to one reference id or null (FINAL App. D, Fig. 10)."""

    reasoning: str = Field(default="", description="brief step-by-step thoughts")
    matches: dict[str, str | None] = Field(
        description='every candidate id ("P1", "P2", ...) mapped to the id of the reference error it describes '
        '("G1", "G2", ...), or to null when it describes none'
    )
    example: ClassVar[dict[str, Any] | None] = {
        "reasoning": "P1 and G2 both question the date; P2 is about nothing in the references.",
        "matches": {"P1": "G2", "P2": None},
    }


MATCH_PROMPT = PromptTemplate(
    name="final_match",
    version="2",
    reply=MatchReply,
    shared=("summary", "gold"),  # one summary's references are matched against every system's candidates
    system=(
        "You are a meticulous annotator who decides whether two descriptions of errors in a text point "
        "at the same error."
    ),
    user=(
        "A SUMMARY was checked against its source document. Two lists describe facts in the summary that "
        "the source does not support or contradicts: REFERENCE errors (written by expert annotators, ids "
        "G1, G2, ...) and CANDIDATE errors (written by a system, ids P1, P2, ...).\n\n"
        "For every candidate, decide which reference error it describes, if any.\n"
        "- A candidate describes a reference error when both single out the same piece of information in "
        "the summary as wrong. The wording and the explanation of why it is wrong may differ.\n"
        "- A candidate that is vague, lumps several unrelated problems together, or does not pin down one "
        "specific piece of information in the summary describes no reference error.\n"
        "- Each candidate describes at most one reference error. Several candidates may describe the same "
        "reference error.\n\n"
        'Think it through briefly in "reasoning", then give "matches" with every candidate id.\n\n$format\n\n'
        "SUMMARY:\n$summary\n\n"
        "REFERENCE errors:\n$gold\n\n"
        "CANDIDATE errors:\n$predicted"
    ),
)

_PRED_KEY = re.compile(r"^\s*P\s*(\d+)\s*$", re.I)
_GOLD_VALUE = re.compile(r"^\s*G\s*(\d+)\s*$", re.I)
_STATED_NONE = {"none", "null"}  # the paper's judge writes "None" for no match (App. D)


def _id_number(pattern: re.Pattern[str], text: str, n: int, not_an_id: str, what: str) -> int:
    """The number of the id ``text`` (``P3`` -> 3) that ``pattern`` reads; ParseError ``not_an_id`` when it is no such
    id, and "``what`` <id> does not exist" when the number is not in 1..n."""
    m = pattern.match(text)
    if m is None:
        raise ParseError(not_an_id)
    number = int(m.group(1))
    if not 1 <= number <= n:
        raise ParseError(f"{what}{number} does not exist (there are {n})")
    return number


def _gold_index(value: str | None, n_gold: int, key: str) -> int | None:
    if value is None or value.strip().lower() in _STATED_NONE:
        return None
    not_an_id = f"{key}: {value[:40]!r} is not a reference id (G1..G{n_gold}) or null"
    return _id_number(_GOLD_VALUE, value, n_gold, not_an_id, f"{key}: reference G") - 1


def parse_matches(text: str, n_pred: int, n_gold: int) -> dict[int, int | None]:
    """``{prediction index: gold index or None}`` (0-based) for every prediction, from a judge reply.

    Strict: one JSON object whose ``"matches"`` maps every candidate id ``P1..Pn`` (nothing else) to a
    reference id ``G1..Gm`` or null (the string "None" is the paper's way of writing null). Raises ParseError
    when the reply is not that object, names an unknown id, gives a value of another type (a number, a
    list, a boolean, prose), or leaves a candidate undecided: an unusable reply is never read as "no match"."""
    mapping = MatchReply.parse(text).matches
    out: dict[int, int | None] = {}
    for key, value in mapping.items():
        number = _id_number(
            _PRED_KEY,
            key,
            n_pred,
            f"'matches' has the key {key[:40]!r}, not a candidate id P1..P{n_pred}",
            "candidate P",
        )
        gold = _gold_index(value, n_gold, f"P{number}")
        if number - 1 in out and out[number - 1] != gold:
            raise ParseError(f"candidate P{number} is given two different answers")
        out[number - 1] = gold
    missing = [f"P{i + 1}" for i in range(n_pred) if i not in out]
    if missing:
        raise ParseError(f"no decision for {', '.join(missing)}")
    return out


class MatchResult(BaseModel):
    """The matching of one item. ``matches`` is None when the judge's reply could not be used
    (``unscored_reason`` says why); the item is then left out of the FINAL P/R/F1."""

    example_id: str
    key: str  # fingerprint of (judge, prompt, gold, predictions): a stored result is reused only if equal
    n_gold: int
    n_pred: int
    matches: dict[int, int | None] | None = None
    matched_gold: int | None = None
    judged: bool = False  # False when no judge call was needed (no predictions or no gold)
    unscored_reason: str | None = None
    calls: list[LLMCall] = Field(default_factory=list)


def match_key(judge_name: str, gold: list[str], predicted: list[str], prompt: PromptTemplate = MATCH_PROMPT) -> str:
    """The identity of one judgment: the judge, the prompt actually sent (``ref()``: name, version and a hash of
    its text and reply schema), the gold and the predicted descriptions."""
    payload = json.dumps([judge_name, prompt.ref(), gold, predicted], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _numbered(prefix: str, items: list[str]) -> str:
    return "\n".join(f"{prefix}{i + 1}. {text.strip()}" for i, text in enumerate(items))


async def match_descriptions(
    judge: LLM | None,
    example_id: str,
    summary: str,
    gold: list[str],
    predicted: list[str],
    prompt: PromptTemplate = MATCH_PROMPT,
) -> MatchResult:
    """Align ``predicted`` with ``gold`` for one item (asks the judge only when both lists are non-empty)."""
    judge_name = judge.name if judge is not None else "none"
    base = dict(
        example_id=example_id,
        key=match_key(judge_name, gold, predicted, prompt),
        n_gold=len(gold),
        n_pred=len(predicted),
    )
    if not predicted or not gold:
        return MatchResult(**base, matches={i: None for i in range(len(predicted))}, matched_gold=0)
    if judge is None:
        return MatchResult(**base, unscored_reason="no judge model configured")
    messages = prompt.render(summary=summary, gold=_numbered("G", gold), predicted=_numbered("P", predicted))
    step = await generate_reply(
        judge, messages, MatchReply, parse=lambda text: parse_matches(text, len(predicted), len(gold))
    )  # type: ignore[arg-type, return-value]
    if step.value is None:
        return MatchResult(**base, judged=True, unscored_reason=f"judge reply unusable: {step.error}", calls=step.calls)
    matches: dict[int, int | None] = step.value  # type: ignore[assignment]
    return MatchResult(**base, judged=True, matches=matches, matched_gold=count_matched_gold(matches), calls=step.calls)
