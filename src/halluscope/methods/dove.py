"""``dove``: DoveScore (seed 000, §5) — fact accuracy AND event order.

Three stages, each a named async callable:

- **decomposer** (``dove.decompose``): splits the target into *event facts* (tied to a moment, listed in
  the target's chronological order) and *descriptive facts* (lasting properties), pronouns resolved;
- **fact checker** (``dove.check``): judges every fact against the source (supported / unsupported /
  contradicted), one fact per call or ``batch_size`` facts per call;
- **sorter** (``dove.sort``): orders the *verified* event facts by the source's chronology and by the
  target's.

Extensions, not the paper's setup: ``decomposer="sentences"`` swaps the LLM decomposer for ``dove.sentences``
(every target sentence is an event fact: no decomposition call, exact spans, no pronoun resolution);
``sorter="position"`` swaps the LLM sorter for ``dove.position_sort`` (order of mention in the source, found
by retrieval; only valid for chronologically narrated sources).

Scores (the paper's Eq. 5), over the facts that got a verdict::

    S_E  = |F_E^c| / |F_E|          S_D = |F_D^c| / |F_D|          alpha = |F_E| / (|F_E| + |F_D|)
    ShuffleD = Inv(pi) / C(m, 2)    pi = the source positions of the verified events, read in target order
    S_EO = 1 - ShuffleD             DoveScore = alpha * S_E * S_EO + (1 - alpha) * S_D

Edge cases (also in docs/dove.md):

- no facts at all, or no fact that could be checked: the Report is unscored (0/0 is not a score);
- no event facts: alpha = 0, the score is S_D; S_E, S_EO, ShuffleD are None (not applicable);
- no descriptive facts: alpha = 1, the score is S_E * S_EO; S_D is None;
- fewer than two verified events: no pair can be out of order, so ShuffleD = 0 and S_EO = 1 (wrong events
  are already charged by S_E); no sorter call is made;
- unscored fact verdicts (unparseable checker replies) are left out of every count and listed in
  ``details["unscored_facts"]``;
- sorter output is repaired, never trusted blindly: a duplicated event keeps its first position, a number
  or text matching no input event ("invented") is dropped, a missing event is left out of the comparison;
  ShuffleD is computed over the events that BOTH orderings placed, and every repair is recorded in
  ``details["order"]``. If fewer than two events survive in both orderings while at least two were
  verified, the order cannot be judged and the Report is unscored (sub-scores S_E, S_D, alpha kept).

Long sources: when the source does not fit the model's context next to the prompt, each fact is checked
against retrieved source snippets (the shared :mod:`halluscope.retrieval` stage; the index is built once
per source) and the source-side sorter reads the snippets retrieved for the verified events, in source
order, instead of the whole source. Which path ran is recorded in ``details["context"]``.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from rapidfuzz import fuzz, process

from halluscope.llm import LLM, ContextOverflowError
from halluscope.llm.base import GenerateParams
from halluscope.llm.structured import generate_parsed
from halluscope.methods import register_method
from halluscope.methods.base import Method
from halluscope.permutations import inverted_pairs
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import Claim, Evidence, Finding, LLMCall, Report, Span, Verdict
from halluscope.retrieval import (RetrievalConfig, RetrieverName, Snippet, SourceIndex, fits_in_context,
                                  score_with_retrieval)
from halluscope.stages import register_stage
from halluscope.text import ParseError, extract_json, locate, parse_items_after_marker, split_sentences

# --- prompts -------------------------------------------------------------------------------------------------

DECOMPOSE_PROMPT = PromptTemplate(
    name="dove_decompose",
    version="1",
    system="You break texts into small, checkable facts.",
    user=(
        "Split the TEXT below into independent, self-contained factual statements, and sort each one into "
        "one of two kinds.\n\n"
        "EVENT facts are tied to a point in time: actions, happenings, changes, and feelings or states someone "
        'goes through at a particular moment (e.g. "The committee rejected the proposal.", "Anna felt relieved '
        'after the exam."). They can be placed on a timeline.\n'
        "DESCRIPTIVE facts are not tied to a moment: definitions, classifications, lasting properties and "
        'relationships (e.g. "Copper conducts electricity.", "Tom is Anna\'s brother.").\n\n'
        "Rules:\n"
        "1. Each fact is one short sentence that can be understood on its own: replace pronouns and other "
        'references ("she", "the company", "that day") with the names they refer to.\n'
        "2. Keep to what the text says; add nothing.\n"
        "3. List the event facts in the chronological order in which, according to the TEXT, they happened "
        "(this can differ from the order in which the text mentions them). Descriptive facts can be in any "
        "order.\n\n"
        "TEXT:\n$target\n\n"
        "Reply with one JSON object and nothing else:\n"
        '{"event_facts": ["...", "..."], "descriptive_facts": ["...", "..."]}'
    ),
)

_VERDICT_RULES = (
    "Use only the SOURCE, not outside knowledge.\n"
    '- "supported": the source states it or clearly implies it;\n'
    '- "contradicted": the source says something incompatible with it;\n'
    '- "unsupported": the source neither confirms nor contradicts it.\n'
)

CHECK_PROMPT = PromptTemplate(
    name="dove_check",
    version="1",
    system="You are a meticulous fact-checker who judges statements only against the source text you are given.",
    user=(
        "SOURCE:\n$source\n\n"
        "FACT:\n$fact\n\n"
        "Is the FACT true according to the SOURCE? " + _VERDICT_RULES + "\n"
        "Reply with one JSON object and nothing else:\n"
        '{"reason": "<one sentence>", "evidence": "<the shortest exact quote from the source that decides '
        'it, or an empty string>", "verdict": "supported" | "contradicted" | "unsupported"}'
    ),
)

CHECK_BATCH_PROMPT = PromptTemplate(
    name="dove_check_batch",
    version="1",
    system=CHECK_PROMPT.system,
    user=(
        "SOURCE:\n$source\n\n"
        "FACTS:\n$facts\n\n"
        "For each numbered FACT, decide whether it is true according to the SOURCE. Judge every fact on its "
        "own. " + _VERDICT_RULES + "\n"
        "Reply with one JSON object and nothing else, with one entry per fact:\n"
        '{"results": [{"id": 1, "reason": "<one sentence>", "evidence": "<shortest exact quote from the '
        'source, or an empty string>", "verdict": "supported" | "contradicted" | "unsupported"}, ...]}'
    ),
)

SORT_PROMPT = PromptTemplate(
    name="dove_sort",
    version="1",
    system="You put events in the chronological order in which they happen in a text.",
    user=(
        "Below are a TEXT and a numbered list of EVENTS from it. Order the events by when they happen according "
        "to the TEXT, earliest first. A text can mention events in a different order from the one in which "
        'they happen (flashbacks, "earlier", "before that"): follow the timeline, not the order of mention. '
        "Do not add, drop, merge or reword events: use every number exactly once.\n\n"
        "Example:\n"
        "TEXT: The guests arrived after Paul had set the table. Before setting the table, he cooked the soup. "
        "Once everyone had eaten, they played cards.\n"
        "EVENTS:\n1. The guests played cards\n2. Paul cooked the soup\n3. The guests arrived\n4. Paul set the table\n"
        'ORDER: {"order": [2, 4, 3, 1]}\n\n'
        "TEXT:\n$text\n\n"
        "EVENTS:\n$events\n\n"
        'Reply with one JSON object and nothing else: {"order": [<event numbers, earliest first>]}'
    ),
)

# --- parsing (every parser raises ParseError or returns a value; fuzzed with tests/garble.py) ----------------


class Decomposition(BaseModel):
    events: list[str]
    descriptive: list[str]


_EVENT_KEY = re.compile(r"event", re.I)
_DESCRIPTIVE_KEY = re.compile(r"descri|static|state", re.I)
_EVENT_HEADER = re.compile(r"^\W*event\s*facts?(?:\s*list)?\W*$", re.I | re.M)
_DESCRIPTIVE_HEADER = re.compile(r"^\W*descriptive\s*facts?(?:\s*list)?\W*$", re.I | re.M)


def _clean_facts(values: list[Any], what: str) -> list[str]:
    facts: list[str] = []
    for value in values:
        if isinstance(value, dict):  # {"fact": "..."} / {"text": "..."}
            value = next((v for k, v in value.items() if k.lower() in ("fact", "text", "statement")), None)
        if not isinstance(value, str):
            raise ParseError(f"{what} list holds a non-text item: {str(value)[:60]!r}")
        value = " ".join(value.split())
        if value and value.lower() not in (f.lower() for f in facts):
            facts.append(value)
    return facts


def parse_decomposition(text: str) -> Decomposition:
    """JSON ``{"event_facts": [...], "descriptive_facts": [...]}`` (key names matched loosely), or a reply
    with an "Event Facts" and a "Descriptive Facts" heading each followed by a list. Both lists must be
    present (an empty list is fine: it means the text has no fact of that kind)."""
    try:
        data = extract_json(text, expect=dict)
    except ParseError:
        data = None
    if isinstance(data, dict):
        event_keys = [k for k in data if _EVENT_KEY.search(k)]
        descriptive_keys = [k for k in data if _DESCRIPTIVE_KEY.search(k) and k not in event_keys]
        if len(event_keys) == 1 and len(descriptive_keys) == 1:
            events, descriptive = data[event_keys[0]], data[descriptive_keys[0]]
            if not isinstance(events, list) or not isinstance(descriptive, list):
                raise ParseError("event_facts and descriptive_facts must be lists")
            return _decomposition(events, descriptive)
    if not isinstance(text, str):
        raise ParseError("empty reply")
    ev, de = _EVENT_HEADER.search(text), _DESCRIPTIVE_HEADER.search(text)
    if ev is None or de is None:
        raise ParseError("expected a JSON object with event_facts and descriptive_facts lists")
    sections = sorted([(ev.start(), ev.end(), "events"), (de.start(), de.end(), "descriptive")])
    lists: dict[str, list[str]] = {}
    for n, (_, body_start, kind) in enumerate(sections):
        body_end = sections[n + 1][0] if n + 1 < len(sections) else len(text)
        body = text[body_start:body_end]
        lists[kind] = parse_items_after_marker(body) if body.strip() else []
    return _decomposition(lists["events"], lists["descriptive"])


def _decomposition(events: list[Any], descriptive: list[Any]) -> Decomposition:
    """Cleaned, de-duplicated lists; a fact listed as both kinds is kept as an event."""
    event_facts = _clean_facts(events, "event")
    seen = {f.lower() for f in event_facts}
    return Decomposition(events=event_facts,
                         descriptive=[f for f in _clean_facts(descriptive, "descriptive") if f.lower() not in seen])


class FactJudgment(BaseModel):
    label: Literal["supported", "unsupported", "contradicted"]
    reason: str = ""
    evidence: str = ""


_LABEL_WORDS: dict[str, str] = {
    "supported": "supported", "support": "supported", "true": "supported", "yes": "supported",
    "entailed": "supported", "correct": "supported",
    "contradicted": "contradicted", "contradiction": "contradicted", "contradicts": "contradicted",
    "refuted": "contradicted",
    "unsupported": "unsupported", "not supported": "unsupported", "false": "unsupported", "no": "unsupported",
    "not_supported": "unsupported", "incorrect": "unsupported", "not mentioned": "unsupported",
}
_VERDICT_KEYS = ("verdict", "label", "answer", "result", "judgment", "judgement")
_LOOSE_VERDICT = re.compile(
    r"^\W*(?:(?:final\s+)?(?:verdict|answer|label)\s*[:=-]\s*)?\W*"
    r"(not supported|unsupported|supported|contradicted|true|false)\b", re.I
)


def _label_from(value: Any) -> str | None:
    if isinstance(value, bool):
        return "supported" if value else "unsupported"
    if isinstance(value, str):
        return _LABEL_WORDS.get(" ".join(value.lower().replace("_", " ").split()).strip(" .!\"'"))
    return None


def _judgment_from_dict(data: dict[str, Any]) -> FactJudgment:
    keys = [k for k in data if str(k).lower() in _VERDICT_KEYS]
    if not keys:
        raise ParseError("no verdict field in the reply")
    label = _label_from(data[keys[0]])
    if label is None:
        raise ParseError(f"unknown verdict {str(data[keys[0]])[:40]!r}")
    reason = data.get("reason", "")
    evidence = data.get("evidence", "")
    return FactJudgment(label=label, reason=reason if isinstance(reason, str) else str(reason),
                        evidence=evidence if isinstance(evidence, str) else "")


def parse_fact_judgment(text: str) -> FactJudgment:
    """JSON with a ``verdict``; otherwise a reply that starts with (or labels) one of the verdict words."""
    try:
        data = extract_json(text, expect=dict)
        return _judgment_from_dict(data)
    except ParseError as exc:
        if not isinstance(text, str):
            raise
        m = _LOOSE_VERDICT.search(text.strip())
        if m is None:
            raise ParseError(f"no verdict found ({exc})") from exc
        return FactJudgment(label=_LABEL_WORDS[m.group(1).lower()], reason=text.strip()[:500])


def parse_batch_judgments(text: str, n_facts: int) -> dict[int, FactJudgment]:
    """``{"results": [{"id": i, "verdict": ...}, ...]}`` (or the bare list) -> {0-based fact index: judgment}.
    Entries with a bad id or verdict are ignored; an id answered twice with different verdicts is dropped as
    ambiguous. Raises ParseError when no entry is usable."""
    data = extract_json(text)
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise ParseError("expected a results list")
        data = lists[0]
    if not isinstance(data, list):
        raise ParseError("expected a results list")
    answers: dict[int, FactJudgment] = {}
    conflicting: set[int] = set()
    for item in data:
        if not isinstance(item, dict):
            continue
        raw_id = item.get("id")
        if isinstance(raw_id, str) and raw_id.strip().isdigit():
            raw_id = int(raw_id.strip())
        if not isinstance(raw_id, int) or isinstance(raw_id, bool) or not 1 <= raw_id <= n_facts:
            continue
        try:
            judgment = _judgment_from_dict(item)
        except (ParseError, ValueError):
            continue
        index = raw_id - 1
        if index in answers and answers[index].label != judgment.label:
            conflicting.add(index)
        answers.setdefault(index, judgment)
    for index in conflicting:
        del answers[index]
    if not answers:
        raise ParseError("no usable verdicts in the results list")
    return answers


@dataclass
class EventOrder:
    """A sorter's ordering of events (0-based indices into the input list), with what had to be repaired."""

    order: list[int]
    missing: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    invented: list[str] = field(default_factory=list)


_NUMBERS_ONLY = re.compile(r"^[\s\[\](),;>\-–→\d]*\d[\s\[\](),;>\-–→\d]*$")
_LEADING_NUMBER = re.compile(r"^\s*(?:event\s*)?#?(\d+)\s*[.):\]-]?\s*(.*)$", re.I | re.S)


def _match_event(item: Any, events: Sequence[str]) -> int | None:
    """The 0-based index an item of a sorter reply refers to: a 1-based number, or an event's text."""
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return item - 1 if 1 <= item <= len(events) else None
    if not isinstance(item, str) or not item.strip():
        return None
    text = item.strip().strip("\"'").strip()
    if text.isdigit():
        return _match_event(int(text), events)
    best = process.extractOne(text, list(events), scorer=fuzz.ratio, processor=lambda s: s.lower())
    if best is not None and best[1] >= 85:
        return int(best[2])
    m = _LEADING_NUMBER.match(text)
    if m:
        index = int(m.group(1)) - 1
        rest = m.group(2).strip()
        if 0 <= index < len(events) and (not rest or fuzz.ratio(rest.lower(), events[index].lower()) >= 60):
            return index
    return None


def parse_event_order(text: str, events: Sequence[str]) -> EventOrder:
    """A sorter reply -> an :class:`EventOrder` over ``events``. Accepts a JSON array of 1-based numbers or of
    event texts, a bare "2, 4, 1, 3" line, or a bulleted list. Repairs duplicates, drops invented items and
    records missing events; raises ParseError when fewer than two events can be placed."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    items: list[Any] | None = None
    try:
        data = extract_json(text)
        if isinstance(data, dict):
            lists = [v for v in data.values() if isinstance(v, list)]
            data = lists[0] if len(lists) == 1 else None
        if isinstance(data, list):
            items = data
    except ParseError:
        items = None
    if items is None:
        body = text
        marker = re.search(r"order(?:ed events)?\s*:", text, re.I)
        if marker:
            body = text[marker.end():]
        first_line = body.strip().splitlines()[0] if body.strip() else ""
        if _NUMBERS_ONLY.match(first_line):
            items = [int(n) for n in re.findall(r"\d+", first_line)]
        else:
            items = parse_items_after_marker(body)
    outcome = EventOrder(order=[])
    for item in items:
        index = _match_event(item, events)
        if index is None:
            outcome.invented.append(str(item)[:200])
        elif index in outcome.order:
            outcome.duplicated.append(index)
        else:
            outcome.order.append(index)
    outcome.missing = [i for i in range(len(events)) if i not in outcome.order]
    if len(outcome.order) < 2 and len(events) >= 2:
        raise ParseError(f"the reply places {len(outcome.order)} of the {len(events)} events")
    return outcome


# --- scores --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DoveScores:
    score: float
    alpha: float
    s_e: float | None
    s_d: float | None
    s_eo: float | None
    shuffle_degree: float | None


def dove_score(n_events: int, n_events_correct: int, n_descriptive: int, n_descriptive_correct: int,
               shuffle_degree: float | None) -> DoveScores:
    """Eq. 5 of the paper. ``shuffle_degree`` is required when ``n_events > 0`` (pass 0.0 when fewer than two
    events were verified: no pair can be out of order). Raises ValueError when there is no fact at all."""
    if n_events < 0 or n_descriptive < 0 or not 0 <= n_events_correct <= n_events \
            or not 0 <= n_descriptive_correct <= n_descriptive:
        raise ValueError("fact counts out of range")
    if n_events + n_descriptive == 0:
        raise ValueError("no facts: DoveScore is undefined")
    alpha = n_events / (n_events + n_descriptive)
    s_e = n_events_correct / n_events if n_events else None
    s_d = n_descriptive_correct / n_descriptive if n_descriptive else None
    if n_events:
        if shuffle_degree is None or not 0.0 <= shuffle_degree <= 1.0:
            raise ValueError("a ShuffleD in [0, 1] is needed when there are event facts")
        s_eo: float | None = 1.0 - shuffle_degree
        event_part = alpha * s_e * s_eo  # type: ignore[operator]
    else:
        s_eo, shuffle_degree, event_part = None, None, 0.0
    score = event_part + ((1 - alpha) * s_d if s_d is not None else 0.0)
    return DoveScores(score=min(1.0, max(0.0, score)), alpha=alpha, s_e=s_e, s_d=s_d, s_eo=s_eo,
                      shuffle_degree=shuffle_degree)


def order_comparison(source_order: Sequence[int], target_order: Sequence[int]) -> tuple[list[int], list[int]]:
    """The events placed by both orderings, in target order, and their source ranks (the paper's pi)."""
    source_rank = {event: rank for rank, event in enumerate(source_order)}
    compared = [event for event in target_order if event in source_rank]
    return compared, [source_rank[event] for event in compared]


# --- stages --------------------------------------------------------------------------------------------------


def _sentence_spans(text: str) -> list[tuple[str, Span]]:
    return [(s.text, s.span) for s in split_sentences(text)]


def target_spans_for(fact: str, target: str, sentences: list[tuple[str, Span]]) -> list[Span]:
    """Where a (rewritten, pronoun-resolved) fact sits in the target: the exact/near-exact text when it is
    there, else the target sentence that shares the most words with it (an approximation), else nothing."""
    match = locate(fact, target, min_fuzzy=90)
    if match is not None:
        return [match.span]
    if not sentences:
        return []
    best = process.extractOne(fact, [s for s, _ in sentences], scorer=fuzz.token_set_ratio,
                              processor=lambda s: s.lower(), score_cutoff=60)
    return [sentences[best[2]][1]] if best is not None else []


CHECK_REPLY_TOKENS = 256  # a reason, a short quote and a verdict


def _json_params(llm: LLM, reply_tokens: int) -> GenerateParams:
    """JSON mode with a reply budget sized to the answer (never above the configured ``max_tokens``), so a
    model that rambles is cut off early instead of running to the global limit."""
    return llm.params(json_mode=True, max_tokens=min(reply_tokens, llm.default_params.max_tokens))


@dataclass
class Decomposed:
    events: list[Claim]
    descriptive: list[Claim]
    error: str | None
    calls: list[LLMCall]


@register_stage("dove.decompose")
class DoveDecomposer:
    """Target -> event claims (target chronological order, ``order`` set) and descriptive claims."""

    def __init__(self, llm: LLM, prompt: PromptTemplate = DECOMPOSE_PROMPT, params: GenerateParams | None = None):
        self.llm, self.prompt, self.params = llm, prompt, params

    async def __call__(self, target: str) -> Decomposed:
        parsed = await generate_parsed(
            self.llm, self.prompt.render(target=target), parse_decomposition,
            params=self.params or _json_params(self.llm, 128 + 2 * self.llm.count_tokens(target)),
            format_hint='one JSON object like {"event_facts": ["..."], "descriptive_facts": ["..."]}',
        )
        if parsed.value is None:
            return Decomposed([], [], f"decomposer: {parsed.error}", parsed.calls)
        sentences = _sentence_spans(target)
        events = [Claim(text=t, kind="event", id=f"E{i + 1}", order=i,
                        target_spans=target_spans_for(t, target, sentences))
                  for i, t in enumerate(parsed.value.events)]
        descriptive = [Claim(text=t, kind="descriptive", id=f"D{i + 1}",
                             target_spans=target_spans_for(t, target, sentences))
                       for i, t in enumerate(parsed.value.descriptive)]
        return Decomposed(events, descriptive, None, parsed.calls)


@register_stage("dove.sentences")
class SentenceDecomposer:
    """No-LLM decomposer: every target sentence is an event fact, in target order, no descriptive facts.
    A sentence-level DoveScore (an extension, not the paper's decomposer): no decomposition call, exact target
    spans, but no pronoun resolution and no event/descriptive split."""

    async def __call__(self, target: str) -> Decomposed:
        events = [Claim(text=s.text, kind="event", id=f"E{s.index + 1}", order=s.index, target_spans=[s.span])
                  for s in split_sentences(target)]
        return Decomposed(events, [], None, [])


def _evidence(judgment: FactJudgment, source: str) -> list[Evidence]:
    if not judgment.evidence.strip():
        return []
    relation = {"supported": "supports", "contradicted": "contradicts"}.get(judgment.label, "related")
    match = locate(judgment.evidence, source)
    text = match.span.of(source) if match else judgment.evidence.strip()
    return [Evidence(text=text, span=match.span if match else None, relation=relation)]  # type: ignore[arg-type]


def _verdict(claim: Claim, judgment: FactJudgment, source: str, calls: list[LLMCall]) -> Verdict:
    return Verdict(claim=claim, label=judgment.label, reason=judgment.reason,
                   score=1.0 if judgment.label == "supported" else 0.0,
                   evidence=_evidence(judgment, source), calls=calls)


@register_stage("dove.check")
class DoveFactChecker:
    """Facts x context -> verdicts. ``batch_size`` > 1 asks about several facts per call; facts a batch reply
    leaves unanswered (or an unusable batch reply) fall back to the one-fact path, which is the reference."""

    def __init__(self, llm: LLM, *, prompt: PromptTemplate = CHECK_PROMPT,
                 batch_prompt: PromptTemplate = CHECK_BATCH_PROMPT, batch_size: int = 1,
                 params: GenerateParams | None = None):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.llm, self.prompt, self.batch_prompt = llm, prompt, batch_prompt
        self.batch_size, self.params = batch_size, params

    async def one(self, claim: Claim, context: str, source: str) -> Verdict:
        parsed = await generate_parsed(
            self.llm, self.prompt.render(source=context, fact=claim.text), parse_fact_judgment,
            params=self.params or _json_params(self.llm, CHECK_REPLY_TOKENS),
            format_hint='one JSON object like {"reason": "...", "evidence": "...", "verdict": "supported"}',
        )
        if parsed.value is None:
            return Verdict.unscored(claim, f"fact checker: {parsed.error}", parsed.calls)
        return _verdict(claim, parsed.value, source, parsed.calls)

    async def batch(self, claims: list[Claim], context: str, source: str) -> list[Verdict]:
        listing = "\n".join(f"{i + 1}. {c.text}" for i, c in enumerate(claims))
        parsed = await generate_parsed(
            self.llm, self.batch_prompt.render(source=context, facts=listing),
            lambda reply: parse_batch_judgments(reply, len(claims)),
            params=self.params or _json_params(self.llm, 64 + CHECK_REPLY_TOKENS * len(claims)),
            format_hint='one JSON object like {"results": [{"id": 1, "reason": "...", "evidence": "...", '
                        '"verdict": "supported"}]}',
        )
        answers = parsed.value or {}
        verdicts: list[Verdict | None] = [
            _verdict(c, answers[i], source, parsed.calls) if i in answers else None for i, c in enumerate(claims)
        ]
        retry = [i for i, v in enumerate(verdicts) if v is None]
        redone = await asyncio.gather(*(self.one(claims[i], context, source) for i in retry))
        for i, verdict in zip(retry, redone):
            verdicts[i] = verdict.model_copy(update={"calls": parsed.calls + verdict.calls})
        return [v for v in verdicts if v is not None]

    async def __call__(self, claims: list[Claim], context: str, source: str | None = None) -> list[Verdict]:
        """Check ``claims`` against ``context`` (the source, or a retrieved part of it); evidence quotes are
        located in ``source`` (default: the context)."""
        source = context if source is None else source
        if self.batch_size == 1:
            return list(await asyncio.gather(*(self.one(c, context, source) for c in claims)))
        chunks = [claims[i:i + self.batch_size] for i in range(0, len(claims), self.batch_size)]
        results = await asyncio.gather(*(self.batch(chunk, context, source) for chunk in chunks))
        return [v for chunk in results for v in chunk]


@dataclass
class Sorted:
    order: EventOrder | None  # indices into the events given to the sorter
    error: str | None
    calls: list[LLMCall]
    details: dict[str, Any] = field(default_factory=dict)


@register_stage("dove.sort")
class DoveSorter:
    """Events x text -> their chronological order according to the text. The events are shown in a fixed
    pseudo-random order (seeded by their texts), never in target order, so that a model echoing its input
    cannot make every ordering agree with the target."""

    def __init__(self, llm: LLM, prompt: PromptTemplate = SORT_PROMPT, params: GenerateParams | None = None,
                 seed: int = 0):
        self.llm, self.prompt, self.params, self.seed = llm, prompt, params, seed

    def presentation(self, events: Sequence[str]) -> list[int]:
        digest = hashlib.sha256(("\x1f".join(events) + f"\x1e{self.seed}").encode("utf-8")).hexdigest()
        shown = list(range(len(events)))
        random.Random(digest).shuffle(shown)
        return shown

    async def __call__(self, events: Sequence[str], text: str) -> Sorted:
        shown = self.presentation(events)
        shown_texts = [events[i] for i in shown]
        listing = "\n".join(f"{n + 1}. {t}" for n, t in enumerate(shown_texts))
        parsed = await generate_parsed(
            self.llm, self.prompt.render(text=text, events=listing),
            lambda reply: parse_event_order(reply, shown_texts),
            params=self.params or _json_params(self.llm, 32 + 8 * len(events)),
            format_hint='one JSON object like {"order": [2, 1, 3]} (event numbers, earliest first)',
        )
        if parsed.value is None:
            return Sorted(None, f"sorter: {parsed.error}", parsed.calls)
        local = parsed.value
        back = EventOrder(order=[shown[i] for i in local.order], missing=sorted(shown[i] for i in local.missing),
                          duplicated=[shown[i] for i in local.duplicated], invented=local.invented)
        return Sorted(back, None, parsed.calls)


@register_stage("dove.position_sort")
class PositionSorter:
    """No-LLM source-side sorter: orders events by where the source tells them, i.e. by the source sentence
    each event retrieves best. Only valid for sources narrated in chronological order (most stories and news
    reports, not texts built on flashbacks); an extension, not the paper's sorter. Events anchored to the same
    sentence keep their given order (the source gives no evidence against it); an event with no positive
    retrieval score anywhere is left unplaced (``missing``)."""

    def __init__(self, index: SourceIndex):
        self.index = index

    async def __call__(self, events: Sequence[str]) -> Sorted:
        def anchors() -> list[int | None]:
            found: list[int | None] = []
            for text in events:
                scores = self.index.sentence_scores(text)
                best = int(scores.argmax()) if scores.size else -1
                found.append(best if best >= 0 and float(scores[best]) > 0 else None)
            return found

        anchor = await asyncio.to_thread(anchors)
        placed = sorted((i for i, a in enumerate(anchor) if a is not None), key=lambda i: (anchor[i], i))
        if len(placed) < 2 <= len(events):
            return Sorted(None, f"position sorter: only {len(placed)} of {len(events)} events match a source "
                                "sentence", [])
        order = EventOrder(order=placed, missing=[i for i, a in enumerate(anchor) if a is None])
        return Sorted(order, None, [], {"source_sentence_of_event": anchor})


def target_position_order(events: Sequence[Claim]) -> EventOrder:
    """Events ordered by where their target spans start (no LLM); events without a span are ``missing``."""
    placed = sorted((i for i, c in enumerate(events) if c.target_spans),
                    key=lambda i: (events[i].target_spans[0].start, i))
    return EventOrder(order=placed, missing=[i for i, c in enumerate(events) if not c.target_spans])


# --- the method ----------------------------------------------------------------------------------------------

TargetOrder = Literal["sorter", "decomposition"]


@register_method
class Dove(Method):
    name = "dove"
    description = ("DoveScore: event and descriptive facts checked against the source, plus the order of the "
                   "verified events (catches true facts told in a misleading order).")
    prompts = (DECOMPOSE_PROMPT, CHECK_PROMPT, CHECK_BATCH_PROMPT, SORT_PROMPT)

    def __init__(self, llm=None, config=None, *, decomposer: Literal["llm", "sentences"] = "llm",
                 batch_size: int = 1, target_order: TargetOrder = "sorter",
                 sorter: Literal["llm", "position"] = "llm",
                 retrieval: Literal["auto", "always", "never"] = "auto", top_k: int = 3, window: int = 1,
                 retriever: RetrieverName = "auto"):
        """
        Args:
            decomposer: "llm" (the paper: event and descriptive facts, pronouns resolved) or "sentences"
                (every target sentence is an event fact; no decomposition call).
            batch_size: facts per fact-checker call (1 = the paper's one call per fact).
            target_order: how the verified events are ordered by the target: "sorter" (the paper: an LLM
                sorter reads the target) or "decomposition" (the order the decomposer listed them, one call
                fewer).
            sorter: "llm" (the paper) or "position" (no LLM: source order = where each event's best-matching
                source sentence is, target order = where its target span starts; only for sources narrated
                chronologically).
            retrieval: "auto" checks facts against the whole source when it fits the model's context and
                against retrieved snippets otherwise (also after a ContextOverflowError from a backend with an
                unknown window); "always" forces retrieval; "never" always sends the whole source, so a source
                that does not fit gives an unscored report.
            top_k, window: retrieval settings (snippets per fact, sentences of context on each side).
            retriever: "embedding", "bm25", or "auto" (embeddings when installed, else BM25).
        """
        super().__init__(llm, config)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if decomposer not in ("llm", "sentences"):
            raise ValueError("decomposer must be 'llm' or 'sentences'")
        if sorter not in ("llm", "position"):
            raise ValueError("sorter must be 'llm' or 'position'")
        if target_order not in ("sorter", "decomposition"):
            raise ValueError("target_order must be 'sorter' or 'decomposition'")
        if retrieval not in ("auto", "always", "never"):
            raise ValueError("retrieval must be 'auto', 'always' or 'never'")
        if top_k < 1 or window < 0:
            raise ValueError("top_k must be >= 1 and window >= 0")
        self.decomposer, self.sorter = decomposer, sorter
        self.batch_size, self.target_order, self.retrieval = batch_size, target_order, retrieval
        self.top_k, self.window = top_k, window
        self.retrieval_config = RetrievalConfig(top_k=top_k, window=window, retriever=retriever)

    def options(self) -> dict[str, Any]:
        return {"decomposer": self.decomposer, "sorter": self.sorter, "batch_size": self.batch_size,
                "target_order": self.target_order,
                "retrieval": self.retrieval, "top_k": self.top_k, "window": self.window,
                "retriever": self.retrieval_config.retriever}

    def _prompt(self, template: PromptTemplate) -> PromptTemplate:
        return apply_overrides(template, self.config.prompts_dir)

    async def run(self, source: str, target: str) -> Report:
        decomposer = (DoveDecomposer(self.llm, self._prompt(DECOMPOSE_PROMPT)) if self.decomposer == "llm"
                      else SentenceDecomposer())
        checker = DoveFactChecker(self.llm, prompt=self._prompt(CHECK_PROMPT),
                                  batch_prompt=self._prompt(CHECK_BATCH_PROMPT), batch_size=self.batch_size)
        sorter = DoveSorter(self.llm, self._prompt(SORT_PROMPT), seed=self.config.seed or 0)
        calls: list[LLMCall] = []
        details: dict[str, Any] = {}

        decomposed = await decomposer(target)
        calls += decomposed.calls
        claims = decomposed.events + decomposed.descriptive
        details["decomposition"] = {"event_facts": [c.text for c in decomposed.events],
                                    "descriptive_facts": [c.text for c in decomposed.descriptive]}
        if decomposed.error:
            return Report(method=self.name, unscored_reason=decomposed.error, calls=calls, details=details)
        if not claims:
            return Report(method=self.name, unscored_reason="the decomposer found no facts in the target",
                          calls=calls, details=details)

        context = await self._context(source, claims, checker)
        try:
            verdicts = await context.check(claims)
        except ContextOverflowError as exc:
            if self.retrieval != "auto" or not isinstance(context, _FullSource):
                raise
            context = await self._context(source, claims, checker, f"the model reported a context overflow: {exc}")
            verdicts = await context.check(claims)
        calls += _unique(c for v in verdicts for c in v.calls)  # a batch call is shared by its facts
        by_id = {v.claim.id: v for v in verdicts}
        unscored = [v for v in verdicts if v.label == "unscored"]
        details["unscored_facts"] = [{"id": v.claim.id, "reason": v.reason} for v in unscored]
        scored_events = [c for c in decomposed.events if by_id[c.id].label != "unscored"]
        scored_descriptive = [c for c in decomposed.descriptive if by_id[c.id].label != "unscored"]
        verified_events = [c for c in scored_events if by_id[c.id].label == "supported"]
        n_desc_correct = sum(by_id[c.id].label == "supported" for c in scored_descriptive)
        findings = [self._fact_finding(v) for v in verdicts if v.label in ("unsupported", "contradicted")]

        def report(**kwargs: Any) -> Report:
            details["context"] = context.describe()
            return Report(method=self.name, claims=claims, verdicts=verdicts, calls=calls, details=details,
                          **kwargs)

        if not scored_events and not scored_descriptive:
            return report(unscored_reason=f"none of the {len(claims)} facts could be checked "
                                          f"({unscored[0].reason})", findings=findings)

        shuffle: float | None = None
        if scored_events:
            order = await self._order(verified_events, target, context, sorter, details)
            calls += order.calls
            if order.error is not None:
                n_scored = len(scored_events) + len(scored_descriptive)
                subscores = {"S_E": len(verified_events) / len(scored_events),
                             "S_D": n_desc_correct / len(scored_descriptive) if scored_descriptive else None,
                             "S_EO": None, "alpha": len(scored_events) / n_scored, "ShuffleD": None}
                return report(unscored_reason=order.error, subscores=subscores, findings=findings)
            shuffle = order.shuffle_degree
            findings += order.findings
        scores = dove_score(len(scored_events), len(verified_events), len(scored_descriptive), n_desc_correct,
                            shuffle)
        return report(score=scores.score, findings=findings,
                      subscores={"S_E": scores.s_e, "S_D": scores.s_d, "S_EO": scores.s_eo, "alpha": scores.alpha,
                                 "ShuffleD": scores.shuffle_degree})

    @staticmethod
    def _fact_finding(verdict: Verdict) -> Finding:
        claim = verdict.claim
        what = "contradicted by" if verdict.label == "contradicted" else "not supported by"
        description = f'"{claim.text}" is {what} the source.' + (f" {verdict.reason}" if verdict.reason else "")
        return Finding(description=description, kind=verdict.label,  # type: ignore[arg-type]
                       target_spans=claim.target_spans, evidence=verdict.evidence, claim_ids=[claim.id or ""])

    def _source_fits(self, source: str, claims: list[Claim]) -> bool:
        """Whether the biggest prompt that carries the whole source fits the model's context window."""
        batch = claims[: self.batch_size]
        listing = "\n".join(f"{i + 1}. {c.text}" for i, c in enumerate(batch))
        longest = max((c.text for c in claims), key=len, default="")
        prompts = [self._prompt(CHECK_PROMPT).render(source="", fact=longest),
                   self._prompt(SORT_PROMPT).render(text="", events="\n".join(c.text for c in claims))]
        if self.batch_size > 1:
            prompts.append(self._prompt(CHECK_BATCH_PROMPT).render(source="", facts=listing))
        replies = [CHECK_REPLY_TOKENS, 32 + 8 * len(claims)]
        if self.batch_size > 1:
            replies.append(64 + CHECK_REPLY_TOKENS * len(batch))
        overhead = max(sum(self.llm.count_tokens(m["content"]) + 8 for m in p) for p in prompts)
        return fits_in_context(self.llm, source, reserve_tokens=overhead + max(replies))

    async def _context(self, source: str, claims: list[Claim], checker: DoveFactChecker,
                       why: str | None = None) -> "_SourceContext":
        if why is None:
            if self.retrieval == "never":
                return _FullSource(source, checker, self.retrieval_config)
            if self.retrieval == "always":
                why = "requested (retrieval=always)"
            elif not self._source_fits(source, claims):
                why = "the source does not fit the model's context window"
            else:
                return _FullSource(source, checker, self.retrieval_config)
        index = await SourceIndex.abuild(source, self.retrieval_config)
        return _RetrievedSource(source, index, checker, self.llm, why, self._sort_reserve)

    def _sort_reserve(self, events: list[Claim]) -> int:
        """Tokens the source-side sorter prompt needs besides the source text, reply included."""
        messages = self._prompt(SORT_PROMPT).render(text="", events="\n".join(f"{i + 1}. {c.text}" for i, c in
                                                                            enumerate(events)))
        return sum(self.llm.count_tokens(m["content"]) + 8 for m in messages) + 32 + 8 * len(events)

    async def _order(self, events: list[Claim], target: str, context: "_SourceContext", sorter: DoveSorter,
                     details: dict[str, Any]) -> "_OrderResult":
        """Sort the verified events by the source and by the target and compare the two orderings."""
        info: dict[str, Any] = {"verified_events": [c.id for c in events]}
        details["order"] = info
        if len(events) < 2:
            info["note"] = "fewer than two verified events: no pair can be out of order (ShuffleD = 0)"
            return _OrderResult(shuffle_degree=0.0)
        texts = [c.text for c in events]
        if self.sorter == "position":
            by_source = await PositionSorter(await context.index())(texts)
        else:
            sorting_text = await context.sorting_text(events)
            if sorting_text is None:
                return _OrderResult(error="the source excerpts about the verified events do not fit the model's "
                                          "context window, so their order cannot be judged")
            by_source = await sorter(texts, sorting_text)
        info.update(by_source.details)
        calls = list(by_source.calls)
        if by_source.order is None:
            return _OrderResult(error=by_source.error, calls=calls)
        if self.target_order == "sorter":
            if self.sorter == "position":
                target_events: EventOrder = target_position_order(events)
            else:
                by_target = await sorter(texts, target)
                calls += by_target.calls
                if by_target.order is None:
                    return _OrderResult(error=by_target.error, calls=calls)
                target_events = by_target.order
            target_sequence = target_events.order
            info["target_sorter"] = _repairs(target_events, events)
        else:
            target_sequence = list(range(len(events)))  # decomposer listing order
        info["source_sorter"] = _repairs(by_source.order, events)
        compared, pi = order_comparison(by_source.order.order, target_sequence)
        info["source_order"] = [events[i].id for i in by_source.order.order]
        info["target_order"] = [events[i].id for i in target_sequence]
        info["compared_events"] = len(compared)
        if len(compared) < 2:
            return _OrderResult(error=f"the sorter placed only {len(compared)} of {len(events)} verified events in "
                                      "both orderings; event order cannot be judged", calls=calls)
        pairs = inverted_pairs(pi)
        findings = []
        for i, j in pairs:
            first, second = events[compared[i]], events[compared[j]]
            findings.append(Finding(
                description=(f'Event order: the text puts "{first.text}" before "{second.text}", but in the '
                             f'source "{second.text}" happens first.'),
                kind="event_order", target_spans=first.target_spans + second.target_spans,
                claim_ids=[first.id or "", second.id or ""],
            ))
        n = len(compared)
        return _OrderResult(shuffle_degree=len(pairs) / (n * (n - 1) / 2), findings=findings, calls=calls)


def _unique(calls: Iterable[LLMCall]) -> list[LLMCall]:
    seen: set[int] = set()
    out: list[LLMCall] = []
    for call in calls:
        if id(call) not in seen:
            seen.add(id(call))
            out.append(call)
    return out


def _repairs(order: EventOrder, events: list[Claim]) -> dict[str, Any]:
    return {"missing": [events[i].id for i in order.missing], "duplicated": [events[i].id for i in order.duplicated],
            "invented": order.invented}


@dataclass
class _OrderResult:
    shuffle_degree: float | None = None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    calls: list[LLMCall] = field(default_factory=list)


class _SourceContext:
    """How the source reaches the checker and the source-side sorter (whole, or through retrieval)."""

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError

    async def check(self, claims: list[Claim]) -> list[Verdict]:
        raise NotImplementedError

    async def sorting_text(self, events: list[Claim]) -> str | None:
        """The text the source-side sorter reads; None when no usable text fits the model."""
        raise NotImplementedError

    async def index(self) -> SourceIndex:
        """The source's retrieval index (for the position sorter)."""
        raise NotImplementedError


class _FullSource(_SourceContext):
    def __init__(self, source: str, checker: DoveFactChecker, retrieval_config: RetrievalConfig):
        self.source, self.checker, self.retrieval_config = source, checker, retrieval_config
        self._index: SourceIndex | None = None

    async def index(self) -> SourceIndex:
        if self._index is None:
            self._index = await SourceIndex.abuild(self.source, self.retrieval_config)
        return self._index

    def describe(self) -> dict[str, Any]:
        return {"mode": "full source"}

    async def check(self, claims: list[Claim]) -> list[Verdict]:
        return await self.checker(claims, self.source)

    async def sorting_text(self, events: list[Claim]) -> str:
        return self.source


class _RetrievedSource(_SourceContext):
    """Long sources (seed 003): each fact is judged against each of its retrieved snippets and keeps the best
    verdict (the shared :func:`score_with_retrieval` aggregator: max per fact). ``batch_size`` does not apply
    here, since every fact has its own snippets."""

    def __init__(self, source: str, index: SourceIndex, checker: DoveFactChecker, llm: LLM, why: str,
                 sort_reserve: Callable[[list[Claim]], int]):
        self.source, self._source_index, self.checker, self.llm = source, index, checker, llm
        self.why = why
        self.sort_reserve = sort_reserve
        self.sorter_excerpts: dict[str, Any] = {}

    def describe(self) -> dict[str, Any]:
        return {"mode": "retrieval", "why": self.why, **self._source_index.describe(), **self.sorter_excerpts}

    async def check(self, claims: list[Claim]) -> list[Verdict]:
        by_text = {c.text: c for c in claims}
        judged: dict[str, list[Verdict]] = {c.text: [] for c in claims}

        async def verify(text: str, snippet: Snippet) -> float | None:
            verdict = await self.checker.one(by_text[text], snippet.text, self.source)
            judged[text].append(verdict)
            return None if verdict.label == "unscored" else float(verdict.label == "supported")

        result = await score_with_retrieval(list(by_text), self._source_index, verify)
        snippets = {r.claim: r.snippets for r in result.claims}
        return [_best_verdict(c, judged[c.text], snippets.get(c.text, [])) for c in claims]

    async def index(self) -> SourceIndex:
        return self._source_index

    async def sorting_text(self, events: list[Claim]) -> str | None:
        """The snippets retrieved for the events, merged and in source order (so the sorter sees the source's
        chronology of exactly these events); narrower retrieval if that does not fit; None if nothing fits."""
        texts = [c.text for c in events]
        for top_k, window in ((self._source_index.config.top_k, self._source_index.config.window), (1, 0)):
            indices = sorted({i for snips in self._source_index.retrieve_many(texts, top_k, window)
                              for snip in snips for i in snip.sentence_indices})
            runs: list[list[int]] = []
            for i in indices:
                if runs and i == runs[-1][-1] + 1:
                    runs[-1].append(i)
                else:
                    runs.append([i])
            excerpt = "\n[...]\n".join(self._source_index.snippet(run[0], run[-1]).text for run in runs)
            if fits_in_context(self.llm, excerpt, reserve_tokens=self.sort_reserve(events)):
                self.sorter_excerpts = {"sorter_excerpts": len(runs), "sorter_top_k": top_k, "sorter_window": window}
                return excerpt
        return None


def _best_verdict(claim: Claim, verdicts: list[Verdict], snippets: list[Snippet]) -> Verdict:
    """A fact's verdict over its snippets: supported if any snippet supports it, else contradicted if any
    contradicts it, else unsupported; unscored only when no snippet could be judged. All calls are kept."""
    calls = [call for v in verdicts for call in v.calls]
    for label in ("supported", "contradicted", "unsupported"):
        chosen = next((v for v in verdicts if v.label == label), None)
        if chosen is not None:
            return chosen.model_copy(update={"calls": calls, "claim": claim})
    if not snippets:
        return Verdict.unscored(claim, "retrieval found no source snippet for this fact", calls)
    reasons = "; ".join(dict.fromkeys(v.reason for v in verdicts)) or "no verdict"
    return Verdict.unscored(claim, f"no snippet could be judged: {reasons}", calls)
