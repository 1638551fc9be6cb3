"""DoveScore's reply schemas and strict parsers: a verdict, a fact list or an order is read only from a reply
that states it.

* decomposer: ``{"event_facts": [...], "descriptive_facts": [...]}``, both lists present (empty is fine);
* fact checker: ``{"reason", "evidence", "supported": bool, "contradicted": bool}``; ``supported`` is
  required and must be a JSON boolean (``{"supported": false}`` is *unsupported*, plus ``"contradicted":
  true`` *contradicted*; ``null``, ``"yes"``, prose such as ``Supported? No.`` are no verdict);
* batch fact checker: ``{"results": [{"id": n, ...}, ...]}``, exactly one entry per fact number;
* sorter: ``{"order": [...]}`` (or the bare list), each item an event number or an event's text.

Each parser returns a value or raises :class:`~halluscope.text.ParseError` saying why."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import Field, model_validator
from rapidfuzz import fuzz, process

from halluscope.llm.replies import Reply
from halluscope.methods.batching import BatchAnswers, batch_reply, numbered_entry, parse_batch
from halluscope.stages.protocols import EventOrder
from halluscope.text import ParseError
from halluscope.text.placeholders import is_placeholder, normalized, shown_strings

# ------------------------------------------------------------------------------------------------ schemas


class DoveFactsReply(Reply):
    """Decomposer: event facts in the text's chronological order, and descriptive facts."""

    event_facts: list[str] = Field(description="the event facts, earliest first according to the TEXT")
    descriptive_facts: list[str] = Field(description="the descriptive facts, in any order")


class DoveCheckReply(Reply):
    """Fact checker: the stated verdict on one fact."""

    reason: str | None = Field(default="", description="one sentence explaining the verdict")
    evidence: str | None = Field(
        default="", description="the shortest exact quote from the SOURCE that decides it, or an empty string"
    )
    supported: bool = Field(description="true if the SOURCE states the fact or clearly implies it, else false")
    contradicted: bool = Field(
        default=False,
        description="true if the SOURCE says something incompatible with the fact (then supported is false)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> DoveCheckReply:
        if self.supported and self.contradicted:
            raise ValueError('"supported" and "contradicted" are both true: the reply contradicts itself')
        return self

    @property
    def label(self) -> str:
        return "supported" if self.supported else "contradicted" if self.contradicted else "unsupported"


DoveBatchJudgment = numbered_entry(
    DoveCheckReply,
    "fact",
    name="DoveBatchJudgment",
    doc="Batch fact checker: the verdict on the fact with number ``id``.",
)
DoveBatchReply = batch_reply(
    DoveBatchJudgment, "fact", name="DoveBatchReply", doc="Batch fact checker: one judgment per numbered fact."
)


class DoveOrderReply(Reply):
    """Sorter: the events, earliest first (a bare list is read as ``order``)."""

    order: list[int | str] = Field(description="the event numbers, earliest first, each number exactly once")
    bare_list_field: ClassVar[str | None] = "order"


# ------------------------------------------------------------------------------------------------ decomposer

_FACTS_SHOWN = shown_strings(DoveFactsReply)  # the schema's field descriptions, echoed back as "facts"


@dataclass
class DoveFacts:
    """A parsed decomposition: cleaned, de-duplicated fact texts (a fact listed as both kinds is an event),
    and the placeholders or copied prompt examples that were dropped."""

    events: list[str]
    descriptive: list[str]
    dropped: list[str] = field(default_factory=list)


def parse_decomposition(text: str, examples: Sequence[str] = (), target: str = "") -> DoveFacts:
    """The declared event and descriptive facts. Placeholders (``...``, ``<fact>``, ``N/A``) are dropped, and
    so are copies of ``examples`` (the prompt's example facts) unless ``target`` says them. Raises ParseError
    when the reply is not the declared object, or when it listed facts and none is left."""
    reply = DoveFactsReply.parse(text)
    echoes = {normalized(e) for e in examples}
    dropped: list[str] = []

    def clean(values: list[str]) -> list[str]:
        facts: list[str] = []
        for value in values:
            value = " ".join(value.split())
            if is_placeholder(value, _FACTS_SHOWN) or (normalized(value) in echoes and not _in_target(value, target)):
                dropped.append(value)
            elif value.lower() not in (f.lower() for f in facts):
                facts.append(value)
        return facts

    events = clean(reply.event_facts)
    seen = {f.lower() for f in events}
    descriptive = [f for f in clean(reply.descriptive_facts) if f.lower() not in seen]
    if not events and not descriptive and dropped:
        raise ParseError("the reply lists no facts, only placeholders or the prompt's examples")
    return DoveFacts(events, descriptive, dropped)


def _in_target(fact: str, target: str) -> bool:
    return bool(target) and normalized(fact) in normalized(target)


# ------------------------------------------------------------------------------------------------ fact checker


def parse_fact_judgment(text: str) -> DoveCheckReply:
    """One fact's verdict (strict :class:`DoveCheckReply`)."""
    return DoveCheckReply.parse(text)


DoveBatchAnswers = BatchAnswers[DoveCheckReply]


def parse_batch_judgments(text: str, n_facts: int) -> DoveBatchAnswers:
    """``{"results": [{"id": i, ...}, ...]}`` (or the bare list) for facts 1..n, read by the batching module's
    one parser (:func:`~halluscope.methods.batching.parse_batch`): a fact gets a judgment only from exactly one
    valid entry with its number, a number outside 1..n refuses the whole reply, and a reply that judges no fact
    raises ParseError."""
    return parse_batch(text, n_facts, DoveBatchJudgment, unit="fact", examples=DoveBatchReply.echoes())


# ------------------------------------------------------------------------------------------------ sorter

_NUMBERED_TEXT = re.compile(r"^\s*(\d+)\s*[.):]\s*(.+)$", re.DOTALL)


def match_event(item: int | str, events: Sequence[str]) -> int | None:
    """The 0-based index an item of a sorter reply refers to: a 1-based event number (a JSON integer), an
    event's text (near-exact), or an event's listing line ("3. its text"); None when it names no event."""
    if isinstance(item, int):
        return item - 1 if 1 <= item <= len(events) else None
    text = item.strip().strip("\"'").strip()
    if not text or is_placeholder(text):
        return None
    best = process.extractOne(text, list(events), scorer=fuzz.ratio, processor=lambda s: s.lower())
    if best is not None and best[1] >= 85:
        return int(best[2])
    numbered = _NUMBERED_TEXT.match(text)
    if numbered:
        index = int(numbered.group(1)) - 1
        if 0 <= index < len(events) and fuzz.ratio(numbered.group(2).strip().lower(), events[index].lower()) >= 60:
            return index
    return None


def parse_event_order(text: str, events: Sequence[str], example: Sequence[int] = ()) -> EventOrder:
    """A sorter reply -> an :class:`EventOrder` over ``events``: the JSON list under ``order`` (or the bare
    list). The repairs of docs/dove.md, each recorded: a repeated event keeps its first position
    (``duplicated``), an item naming no event is dropped (``invented``), an unplaced event is ``missing``.
    Raises ParseError on anything but such a list, when fewer than two events are placed, and when the reply
    is the prompt's ``example`` order while the events are not that many (an echo, not an answer)."""
    reply = DoveOrderReply.parse(text)
    if example and list(reply.order) == list(example) and len(events) != len(example):
        raise ParseError(f"the reply copies the prompt's example order {list(example)}; there are {len(events)} events")
    outcome = EventOrder(order=[])
    for item in reply.order:
        index = match_event(item, events)
        if index is None:
            outcome.invented.append(str(item)[:200])
        elif index in outcome.order:
            outcome.duplicated.append(index)
        else:
            outcome.order.append(index)
    outcome.missing = [i for i in range(len(events)) if i not in outcome.order]
    if len(outcome.order) < 2 <= len(events):
        raise ParseError(f"the reply places {len(outcome.order)} of the {len(events)} events")
    return outcome
