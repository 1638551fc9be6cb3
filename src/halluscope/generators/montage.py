"""Montage lies (DoveScore paper, §3.1): texts made only of true statements, reordered to tell a false story.

For one correct target ``g`` (a summary of ``source``) the generator

1. splits ``g`` into its events, in chronological order: with an LLM (``level="event"``, the default and the
   paper's decomposition, pronouns resolved) or, with no LLM at all, as its sentences (``level="sentence"``,
   not the paper's construction: see below);
2. for each difficulty draws a permutation with an EXACT inversion count, sampled uniformly from the
   counts whose ShuffleD falls in the difficulty's bin, via a random Lehmer code (Algorithm 1);
3. writes the lie: sentence level joins the reordered sentences; event level builds it one event at a
   time, each step asking the LLM to append the next event as what happens next (incremental
   construction, because a model handed the whole shuffled list tends to restore the true order);
4. optionally paraphrases the truth and every lie with a different narrative technique.

Direction of ShuffleD (the paper's Eq. 2-3): ShuffleD = Inv(pi) / C(n, 2) is the fraction of event pairs
that the lie tells in the OPPOSITE of their true order, not the fraction kept. Bins: easy [0.80, 0.90]
(nearly reversed), medium [0.55, 0.65], hard [0.30, 0.40], extreme [0.05, 0.15] (a few pairs swapped,
hardest to spot). A target whose event count admits no integer inversion count in a bin (n <= 4 for
some bins) gets no lie at that difficulty; the skip and its reason are returned, never papered over.

``max_events`` keeps only the first N events of each target (a cost control for small models): at the
sentence level the truth is its first N sentences; at the event level the truth is then rebuilt from the
first N events incrementally, exactly like the lies, so truth and lies tell the same events.

The sentence level is a no-LLM stand-in, not the paper's construction: its lies are the target's own
sentences reordered, with no event decomposition and no incremental rewriting, so truth and lie differ only in
the order of verbatim sentences, which order-sensitive overlap (ROUGE-L) picks up. ROUGE separates them from
the truth far better than it separates real montage lies (avg AUC 0.659 on 100 sentence-level SQuALITY dev
groups against the paper's ~0.54; docs/dove.md). Each of its rows says so in ``meta["construction"]``.

Output: harness ``Example`` records sharing ``group``: the truth (label 1, difficulty "truth") and the
lies (label 0, difficulty easy/medium/hard/extreme); ``meta`` holds the permutation (lie position i tells
original event ``permutation[i]``), the inversion count, ShuffleD, the events, the seed and ``construction``
(:data:`CONSTRUCTION`). Sentence-level
truths are re-rendered from their sentences exactly like the lies (joined by single spaces), so the
layout (line breaks) never tells a truth from a lie. Paraphrases go to the group ``<group>:paraphrase``
with ``meta["variant"] == "paraphrase"`` so that AUC-per-difficulty compares like with like.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from rapidfuzz import fuzz

from halluscope.config import Config
from halluscope.llm import LLM, get_llm
from halluscope.llm.structured import generate_parsed
from halluscope.permutations import (
    DIFFICULTY_BINS,
    count_inversions,
    inversion_range,
    permutation_with_inversions,
    shuffle_degree,
)
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import Example, LLMCall
from halluscope.text import ParseError, extract_json, parse_items_after_marker, split_sentences
from halluscope.text.fence import strip_fence_tags

Level = Literal["sentence", "event"]
DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard", "extreme")
NARRATIVE_TECHNIQUES = ("chronological order", "flashback", "interjection", "supplementary narration")
CONSTRUCTION: dict[str, str] = {
    "event": "event-level (the paper's: chronological events, exact-inversion shuffle, incremental lie)",
    "sentence": "sentence-level (not the paper's): original sentences reordered, no event decomposition, "
    "no incremental rewriting",
}
"""``meta["construction"]`` of every row, by level."""

EVENTS_PROMPT = PromptTemplate(
    name="montage_events",
    version="1",
    system="You turn narrative text into a timeline of events.",
    user=(
        "List every distinct event narrated in the paragraph below, in the order in which the events happen "
        "(their chronological order, which may differ from the order the paragraph mentions them).\n"
        "Write each event as one short, self-contained sentence: replace pronouns and other references with "
        "the names of the people or things they refer to, so that each event can be understood on its own. "
        "Do not add anything the paragraph does not say and do not merge separate events.\n\n"
        "PARAGRAPH:\n$target\n\n"
        "Reply with a JSON array of strings, earliest event first, and nothing else."
    ),
)

APPEND_PROMPT = PromptTemplate(
    name="montage_append",
    version="1",
    system="You are continuing a story one event at a time, exactly as instructed.",
    user=(
        "STORY SO FAR:\n$paragraph\n\n"
        "NEXT EVENT (it happens after everything in the story so far):\n$event\n\n"
        "Add the next event to the end of the story as its newest development. Keep the story so far as it "
        "is; change at most a few words where the new sentence would otherwise read awkwardly. Do not add "
        'details, explanations or transition words such as "next", "then" or "after that".\n'
        "Reply with the complete updated story and nothing else."
    ),
)

PARAPHRASE_PROMPT = PromptTemplate(
    name="montage_paraphrase",
    version="1",
    system="You are a careful editor who retells a text without changing what it says.",
    user=(
        "Narrative techniques:\n"
        "- chronological order: events are told strictly in the order they happened;\n"
        "- flashback: the text opens with a later or climactic moment, then goes back to earlier events;\n"
        "- interjection: the main line of events is interrupted by a related insert (a memory, a reflection, "
        "a side story);\n"
        "- supplementary narration: background context is added around the events to help the reader.\n\n"
        "First decide which technique the TEXT below uses. Then retell it with a DIFFERENT technique from the "
        "list. Reuse the original wording as much as possible, keep every event and fact, add no new events "
        "or details, and keep it unambiguous which event happened when.\n\n"
        "TEXT:\n$text\n\n"
        "Answer in exactly this format:\n"
        "Original technique: <technique>\n"
        "Chosen technique: <technique>\n"
        "Rewritten: <the retold text>"
    ),
)


@dataclass(frozen=True)
class LiePlan:
    """One lie to write: lie position ``i`` tells original event ``permutation[i]``."""

    difficulty: str
    permutation: tuple[int, ...]
    inversions: int
    shuffle_degree: float


@dataclass
class MontageResult:
    """What one target produced: examples (truth first), skipped lies with reasons, and the LLM audit trail."""

    examples: list[Example] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    calls: list[LLMCall] = field(default_factory=list)


def plan_lies(n_events: int, difficulties: Sequence[str], rng: random.Random) -> tuple[list[LiePlan], dict[str, str]]:
    """A permutation per difficulty with an inversion count drawn uniformly from the bin's integer counts.
    Returns the plans and ``{difficulty: reason}`` for bins no count of this ``n_events`` can hit."""
    plans: list[LiePlan] = []
    skipped: dict[str, str] = {}
    for difficulty in difficulties:
        if difficulty not in DIFFICULTY_BINS:
            raise ValueError(f"unknown difficulty {difficulty!r}; choose from {', '.join(DIFFICULTY_BINS)}")
        low, high = DIFFICULTY_BINS[difficulty]
        bounds = inversion_range(n_events, low, high)
        if bounds is None:
            skipped[difficulty] = f"{n_events} events: no integer inversion count gives ShuffleD in [{low}, {high}]"
            continue
        k = rng.randint(*bounds)
        perm = permutation_with_inversions(n_events, k, rng)
        plans.append(LiePlan(difficulty, tuple(perm), k, shuffle_degree(perm)))
    return plans, skipped


def group_rng(seed: int, group: str) -> random.Random:
    """A generator per group, so a group's lies do not depend on which other groups were generated."""
    return random.Random(f"montage:{seed}:{group}")


# --- reply parsers (raise ParseError; fuzzed with tests/garble.py) ---------------------------------------


def parse_event_list(text: str) -> list[str]:
    """A JSON array of event strings, or a bulleted/numbered list. At least one non-empty event."""
    try:
        value = extract_json(text, expect=(list, dict))
    except ParseError:
        value = None
    if isinstance(value, dict):  # {"events": [...]} or similar single-list wrapper
        lists = [v for v in value.values() if isinstance(v, list)]
        value = lists[0] if len(lists) == 1 else None
    if isinstance(value, list):
        events = [v.strip() for v in value if isinstance(v, str) and v.strip()]
        if events and len(events) == len(value):
            return events
    items = parse_items_after_marker(text)
    events = [i for i in items if _looks_like_sentence(i)]
    if not events:
        raise ParseError("no events found in reply")
    return events


def _looks_like_sentence(item: str) -> bool:
    """Drops JSON debris and lead-ins such as "Here are the events:"."""
    item = item.strip()
    return sum(ch.isalpha() for ch in item) >= 3 and not item.startswith(("{", "[", "```")) and not item.endswith(":")


_LEADING_LABEL = re.compile(r"^\s*(?:updated (?:story|paragraph)|story|paragraph)\s*:\s*", re.I)


def parse_appended_story(reply: str, previous: str, event: str) -> str:
    """The updated story: non-empty, keeps most of the story so far, and has grown (copied data fence tags
    are dropped)."""
    if not isinstance(reply, str) or not reply.strip():
        raise ParseError("empty reply")
    story = _LEADING_LABEL.sub("", strip_fence_tags(reply).strip().strip("`").strip())
    if not story:
        raise ParseError("empty story after removing the label")
    if len(story) <= len(previous):
        raise ParseError("the updated story is not longer than the story so far")
    if fuzz.partial_ratio(previous, story) < 70:
        raise ParseError("the updated story does not keep the story so far")
    return story


class Paraphrase(BaseModel):
    text: str
    original_technique: str
    chosen_technique: str


def parse_paraphrase(reply: str) -> Paraphrase:
    if not isinstance(reply, str) or not reply.strip():
        raise ParseError("empty reply")
    marker = re.search(r"rewritten\s*:", reply, re.I)
    if marker is None:
        raise ParseError("no 'Rewritten:' line in reply")
    text = strip_fence_tags(reply[marker.end() :]).strip()
    if sum(ch.isalpha() for ch in text) < 10:
        raise ParseError("the rewritten text is empty")

    def field_value(label: str) -> str:
        m = re.search(label + r"\s*:\s*(.+)", reply[: marker.start()], re.I)
        return m.group(1).strip() if m else "unknown"

    return Paraphrase(
        text=text,
        original_technique=field_value("original technique"),
        chosen_technique=field_value("chosen technique"),
    )


# --- the generator ------------------------------------------------------------------------------------------


class MontageGenerator:
    """Builds montage-lie groups. The default ``level="event"`` is the paper's construction (an LLM decomposes
    and rewrites); ``level="sentence"`` needs no LLM (unless ``paraphrase``) and is labelled as not the paper's."""

    def __init__(
        self,
        llm: LLM | None = None,
        config: Config | None = None,
        *,
        level: Level = "event",
        difficulties: Sequence[str] = DIFFICULTIES,
        paraphrase: bool = False,
        seed: int = 0,
        max_events: int | None = None,
    ):
        if level not in ("sentence", "event"):
            raise ValueError(f"unknown level {level!r}; use 'sentence' or 'event'")
        unknown = [d for d in difficulties if d not in DIFFICULTY_BINS]
        if unknown:
            raise ValueError(f"unknown difficulties {unknown}; choose from {', '.join(DIFFICULTY_BINS)}")
        self.config = config or Config()
        self._llm = llm
        self.level = level
        self.difficulties = tuple(difficulties)
        self.paraphrase = paraphrase
        self.seed = seed
        if max_events is not None and max_events < 2:
            raise ValueError("max_events must be >= 2")
        self.max_events = max_events

    @property
    def needs_llm(self) -> bool:
        return self.level == "event" or self.paraphrase

    @property
    def llm(self) -> LLM:
        if self._llm is None:
            self._llm = get_llm(self.config)
        return self._llm

    def _prompt(self, template: PromptTemplate) -> PromptTemplate:
        return apply_overrides(template, self.config.prompts_dir)

    async def generate(
        self, source: str, target: str, group: str, *, split: str | None = None, meta: dict[str, Any] | None = None
    ) -> MontageResult:
        """The truth and its lies for one (source, correct target) pair."""
        result = MontageResult()
        rng = group_rng(self.seed, group)
        base_meta = {
            "level": self.level,
            "construction": CONSTRUCTION[self.level],
            "seed": self.seed,
            "variant": "original",
            **(meta or {}),
        }
        if self.max_events is not None:
            base_meta["max_events"] = self.max_events
        if self.level == "sentence":
            events = [s.text for s in split_sentences(target)][: self.max_events]
            truth_text = " ".join(events)
        else:
            parsed = await generate_parsed(
                self.llm,
                self._prompt(EVENTS_PROMPT).render(target=target),
                parse_event_list,
                format_hint="a JSON array of event strings",
            )
            result.calls += parsed.calls
            if parsed.value is None:
                result.skipped.append({"group": group, "difficulty": "all", "reason": f"decomposition: {parsed.error}"})
                return result
            events = parsed.value
            truth_text = target  # the paper's truth is the original summary
            if self.max_events is not None and len(events) > self.max_events:
                # The truth must tell the same events as its lies, so it is rebuilt from the kept ones.
                events = events[: self.max_events]
                truth_text = await self._write_lie(  # type: ignore[assignment]  # None: returned just below
                    events, LiePlan("truth", tuple(range(len(events))), 0, 0.0), group, result
                )
                if truth_text is None:
                    return result
        plans, impossible = plan_lies(len(events), self.difficulties, rng)
        result.skipped += [{"group": group, "difficulty": d, "reason": r} for d, r in impossible.items()]
        if not plans:
            return result

        def example(difficulty: str, text: str, label: int, perm: Sequence[int], extra: dict[str, Any]) -> Example:
            return Example(
                id=f"{group}-{difficulty}",
                source=source,
                target=text,
                label=label,
                group=group,
                difficulty=difficulty,
                split=split,
                meta={
                    **base_meta,
                    "permutation": list(perm),
                    "inversions": count_inversions(perm),
                    "shuffle_degree": shuffle_degree(perm) if len(perm) > 1 else 0.0,
                    "n_events": len(perm),
                    **extra,
                },
            )

        lies: list[Example] = []
        for plan in plans:
            if self.level == "sentence":
                text: str | None = " ".join(events[i] for i in plan.permutation)
            else:
                text = await self._write_lie(events, plan, group, result)
            if text is not None:
                lies.append(example(plan.difficulty, text, 0, plan.permutation, {}))
        if not lies:
            return result
        truth = example("truth", truth_text, 1, range(len(events)), {"events": events})
        result.examples += [truth, *lies]
        if self.paraphrase:
            result.examples += await self._paraphrases([truth, *lies], result)
        return result

    async def _write_lie(self, events: list[str], plan: LiePlan, group: str, result: MontageResult) -> str | None:
        """Incremental construction: start from the first event, append the rest one call at a time."""
        story = events[plan.permutation[0]]
        template = self._prompt(APPEND_PROMPT)
        for index in plan.permutation[1:]:
            event = events[index]
            previous = story
            parsed = await generate_parsed(
                self.llm,
                template.render(paragraph=previous, event=event),
                lambda reply, prev=previous, ev=event: parse_appended_story(reply, prev, ev),  # type: ignore[misc]
                format_hint="the complete updated story as plain text",
            )
            result.calls += parsed.calls
            if parsed.value is None:
                result.skipped.append(
                    {
                        "group": group,
                        "difficulty": plan.difficulty,
                        "reason": f"appending event {index}: {parsed.error}",
                    }
                )
                return None
            story = parsed.value
        return story

    async def _paraphrases(self, originals: list[Example], result: MontageResult) -> list[Example]:
        out: list[Example] = []
        template = self._prompt(PARAPHRASE_PROMPT)
        for ex in originals:
            parsed = await generate_parsed(
                self.llm,
                template.render(text=ex.target),
                parse_paraphrase,
                format_hint="the three lines 'Original technique:', 'Chosen technique:', 'Rewritten:'",
            )
            result.calls += parsed.calls
            if parsed.value is None:
                result.skipped.append(
                    {
                        "group": ex.group or "",
                        "difficulty": f"{ex.difficulty} (paraphrase)",
                        "reason": f"paraphrase: {parsed.error}",
                    }
                )
                continue
            out.append(
                ex.model_copy(
                    update={
                        "id": f"{ex.id}-paraphrase",
                        "target": parsed.value.text,
                        "group": f"{ex.group}:paraphrase",
                        "meta": {
                            **ex.meta,
                            "variant": "paraphrase",
                            "paraphrase_of": ex.id,
                            "original_technique": parsed.value.original_technique,
                            "chosen_technique": parsed.value.chosen_technique,
                        },
                    }
                )
            )
        return out
