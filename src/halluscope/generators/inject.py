"""Hallucination injection (seed 004 §3.2, App. B.2): weave invented, plausible facts into a faithful target
and record exactly where they went.

Complexity levels (ours, after the paper's three levels; level ``c`` injects ``c`` facts):

1. **plain mention** — one invented fact, stated plainly as a statement of its own in an otherwise
   faithful text.
2. **attached support** — two invented facts, fastened to true statements of the text: told as a detail,
   reason, or consequence of the true statement they sit next to (a clause or a follow-up sentence), so
   they borrow its credibility.
3. **false premise** — three invented facts woven in as in level 2, at least one of them presented as the
   background or cause from which a true statement of the text appears to follow, so a reader takes the
   invention as the premise of something correct.

Two steps, each swappable:

- **invent** (LLM, or facts given by the caller, or *donor* facts): ``k`` statements about the subject that the
  source does not state and does not imply. Facts that can be located in the source or the target are
  dropped. Donor facts need no LLM: sentences from the targets of other sources in the same dataset, on the
  closest topic available (:func:`donor_facts`; easier to detect than invented ones, and labelled as such in
  ``meta["facts_from"]``).
- **weave**: ``llm`` — the model returns the whole edited text with each insertion wrapped in
  ``<ins>…</ins>``; the text outside the tags must equal the original target (whitespace aside), otherwise
  the model rewrote other parts, the spans cannot be trusted, and the item is dropped and counted.
  ``boundary`` — no LLM: each fact is inserted as its own sentence at a sentence boundary (level 1: a seeded
  random boundary; levels 2-3: right after the target sentence most similar to the fact, the closest we can
  get to "attached" without rewriting).

Either way, every gold span is checked against the new target (``new_target[span] == inserted text``)
before an Example is written. Output: ``label=0``, ``descriptions`` = the injected facts, ``gold_spans`` =
the inserted text, ``difficulty="complexity-<c>"``, ``group`` = the original item, and ``meta`` with the
complexity, the injected claims (fact, inserted text, span), the original target and the **gold claims**
(``meta.gold_claims``, format in ``docs/datasets.md``): every injected fact is a gold hallucinated claim (its
text, its span in the target). With ``include_truth`` the original target is also written (``label=1``, no
spans, ``difficulty="truth"``, no hallucinated gold claim), so the set has the paper's hallucination-free
baseline and the MontageLie AUC-per-difficulty suite applies to it.

**Gold truthful claims and gold evidence** (opt-in, :class:`GoldEvidenceBuilder`, seed 004 §3.3): the
original, faithful target is decomposed into claims (PROBE's decomposer); every judge model quotes source
passages for each claim (PROBE's evidence finder; the union of the located passages is the candidate set);
every candidate is judged PASS/FAIL by every judge vote (PROBE's evidence evaluation prompt), and accepted
when at least ``consensus`` of ALL the votes (an unusable vote counts against) say PASS (the paper: 3 of 4
models). A claim with an accepted passage is a gold truthful claim with those passages as its gold evidence
(and how many votes agreed on each); the others are recorded as *uncertain* (``meta.gold_claims_uncertain``,
with the reason), so the gold claim set is complete (``meta.gold_claims_complete``). The truthful claims'
spans are carried into each injected target through its insertions (the text outside them is the original).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from halluscope.llm import LLM
from halluscope.llm.structured import generate_parsed, json_parser
from halluscope.methods.probe.judge import votes_needed  # the one vote rule, shared with detection
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import Claim, Example, LLMCall, Span
from halluscope.retrieval import fits_in_context
from halluscope.text import ParseError, locate, split_sentences
from halluscope.text.tags import tag_blocks

Weave = Literal["llm", "boundary"]
COMPLEXITIES = (1, 2, 3)
TRUTH = "truth"

COMPLEXITY_INSTRUCTIONS = {
    1: "Insert the single new fact as a plain statement of its own, at a place in the TEXT where it fits.",
    2: ("Fasten each new fact to something the TEXT already says: present it as a detail, a reason or a "
        "consequence of the true statement it sits next to (as a clause of that sentence or as the sentence "
        "right after it)."),
    3: ("Fasten the new facts to what the TEXT already says, as details, reasons or consequences of the true "
        "statements next to them; and present at least one new fact as the background or cause from which a "
        "statement of the TEXT follows, so that the invented fact reads as the premise of something the TEXT "
        "says."),
}

# ``${source_block}`` is a slot, not a value: the code fills it with SOURCE_BLOCK (a heading and the fenced
# ``$source``) when the source fits the model's context and with nothing when it does not (see ``invent``).
SOURCE_BLOCK = "SOURCE (the material the TEXT was written from):\n$source\n\n"
_SOURCE_SLOT = re.compile(r"\$(?:\{source_block\}|source_block(?![_A-Za-z0-9]))")

INVENT_PROMPT = PromptTemplate(
    name="inject_invent",
    version="2",
    system="You write believable but unsupported statements, used to test hallucination detectors.",
    user=(
        "Invent $k new statements about the subject of the TEXT below. Each statement must:\n"
        "- be one declarative sentence that can be judged true or false, with something concrete in it "
        "(a name, number, date, place, cause or event);\n"
        "- be believable next to the TEXT, and not simply negate or contradict what it says;\n"
        "- NOT be stated in the source material, and NOT follow logically from anything in it.\n\n"
        'Reply with one JSON object: {"facts": ["<statement>", ...]}\n\n'
        "${source_block}"
        "TEXT:\n$target"
    ),
    literal=("k",),
)

WEAVE_PROMPT = PromptTemplate(
    name="inject_weave",
    version="2",
    system="You are a careful editor who inserts given sentences into a text without changing anything else.",
    user=(
        "Edit the TEXT so that it also states the NEW FACTS.\n\n"
        "Rules:\n"
        "- Leave every existing word and punctuation mark of the TEXT exactly as it is: do not reword, "
        "reorder, shorten or delete anything. You may only insert.\n"
        "- Wrap every piece you insert in <ins> and </ins>, including any linking words or punctuation you "
        'add, e.g. "The bridge<ins>, finished in 1820,</ins> crosses the river."\n'
        "- $instructions\n"
        "- The insertions must read naturally and be spread through the text, not all put at the end.\n"
        "- Add no information beyond the NEW FACTS.\n\n"
        "Reply with the complete edited text and nothing else.\n\n"
        "TEXT:\n$target\n\n"
        "NEW FACTS:\n$facts"
    ),
    shared=("target",),
    literal=("instructions",),  # one of COMPLEXITY_INSTRUCTIONS, written by the code
)


def with_source_block(template: PromptTemplate, block: str) -> PromptTemplate:
    """``template`` with its ``${source_block}`` slot replaced by ``block`` (SOURCE_BLOCK or "")."""
    return template.model_copy(update={"user": _SOURCE_SLOT.sub(lambda _: block, template.user)})


class _Facts(BaseModel):
    facts: list[str]


@dataclass(frozen=True)
class InjectedClaim:
    fact: str  # the invented statement (a gold description)
    inserted_text: str  # what was inserted into the target (``new_target[span]``)
    span: Span

    def as_meta(self) -> dict[str, Any]:
        return {"fact": self.fact, "inserted_text": self.inserted_text, "span": self.span.model_dump()}

    def as_gold(self, number: int) -> dict[str, Any]:
        """This injection as a gold hallucinated claim (``meta.gold_claims``)."""
        return {"id": f"h{number}", "text": self.fact, "span": self.span.model_dump(), "hallucinated": True,
                "inserted_text": self.inserted_text}


@dataclass
class InjectionResult:
    example: Example | None
    dropped: str | None = None  # why no example was written
    drop_kind: str | None = None  # short reason category, for counting
    calls: list[LLMCall] = field(default_factory=list)


# --- weaving -------------------------------------------------------------------------------------------------

_STRAY_TAG = re.compile(r"</?ins>", re.I)


def parse_marked_text(reply: str) -> tuple[str, list[tuple[int, int]]]:
    """Strip ``<ins>…</ins>`` from a reply: the new text and the (start, end) of each inserted piece in it
    (surrounding whitespace excluded). Raises ParseError without any well-formed insertion."""
    if not isinstance(reply, str) or not reply.strip():
        raise ParseError("empty reply")
    text = reply.strip()
    if text.startswith("```"):
        text = re.sub(r"^```[a-zA-Z]*\n?|\n?```$", "", text).strip()
    out: list[str] = []
    pieces: list[tuple[int, int]] = []
    length = pos = 0
    for block in tag_blocks(text, "ins"):  # one pass: a regex here was quadratic on unclosed <ins> tags
        before = text[pos : block.start]
        out.append(before)
        length += len(before)
        inner = text[block.inner_start : block.inner_end]
        if _STRAY_TAG.search(inner):
            raise ParseError("nested <ins> tags")
        lead = len(inner) - len(inner.lstrip())
        core = inner.strip()
        if core:
            pieces.append((length + lead, length + lead + len(core)))
        out.append(inner)
        length += len(inner)
        pos = block.end
    rest = text[pos:]
    if _STRAY_TAG.search(rest) or any(_STRAY_TAG.search(t) for t in out[::2]):
        raise ParseError("unbalanced <ins> tags")
    out.append(rest)
    if not pieces:
        raise ParseError("no <ins>…</ins> insertion in the reply")
    return "".join(out), pieces


def _normalize(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r"\s+([.,;:!?)])", r"\1", text)


def outside_matches_original(new_text: str, pieces: Sequence[tuple[int, int]], original: str) -> bool:
    """Whether deleting the inserted pieces gives back the original text (whitespace aside)."""
    kept, pos = [], 0
    for start, end in sorted(pieces):
        kept.append(new_text[pos:start])
        pos = end
    kept.append(new_text[pos:])
    return _normalize(" ".join(kept)) == _normalize(original)


def _as_sentence(fact: str) -> str:
    fact = fact.strip()
    return fact if fact[-1:] in ".!?\"'" else fact + "."


def weave_at_boundaries(target: str, facts: Sequence[str], complexity: int, rng: random.Random
                        ) -> tuple[str, list[InjectedClaim]]:
    """Insert each fact as its own sentence after a target sentence (see module docstring); exact spans."""
    sentences = split_sentences(target)
    if not sentences:
        raise ValueError("the target has no sentences to insert after")
    placements: list[tuple[int, int, str]] = []  # (insert position, order, fact)
    for order, fact in enumerate(facts):
        if complexity == 1:
            after = rng.choice(sentences)
        else:
            after = max(sentences, key=lambda s: (fuzz.token_set_ratio(fact, s.text), -s.index))
        placements.append((after.span.end, order, fact))
    pieces: list[str] = []
    claims: list[InjectedClaim] = []
    cursor = length = 0
    for position, _, fact in sorted(placements):
        chunk = target[cursor:position]
        pieces.append(chunk)
        length += len(chunk)
        inserted = _as_sentence(fact)
        pieces.append(" " + inserted)
        claims.append(InjectedClaim(fact=fact.strip(), inserted_text=inserted,
                                    span=Span(start=length + 1, end=length + 1 + len(inserted))))
        length += 1 + len(inserted)
        cursor = position
    pieces.append(target[cursor:])
    return "".join(pieces), claims


def verify_spans(new_target: str, claims: Sequence[InjectedClaim]) -> str | None:
    """None when every span holds exactly its inserted text (and is found there by ``locate``), else why not."""
    for c in claims:
        if c.span.end > len(new_target) or c.span.of(new_target) != c.inserted_text or not c.inserted_text:
            return f"span {c.span.start}-{c.span.end} does not hold the inserted text {c.inserted_text[:60]!r}"
        match = locate(c.inserted_text, new_target, start=c.span.start)
        if match is None or match.how != "exact" or match.span != c.span:
            return f"inserted text {c.inserted_text[:60]!r} not found at its span"
    return None


# --- donor facts (no LLM) ------------------------------------------------------------------------------------


def donor_facts(example: Example, pool: Sequence[Example], k: int, rng: random.Random, *, shortlist: int = 12,
                min_words: int = 6, max_words: int = 35) -> list[str]:
    """``k`` unsupported statements without an LLM: sentences taken from the targets of OTHER sources in
    ``pool`` (never one that shares this example's source), preferring those closest in wording to this
    target so they stay on a similar topic, and rejecting any that resembles a sentence of this source
    (rapidfuzz token-sort ratio >= 75, token-set ratio >= 90 against a source sentence of 5+ words, or
    locatable in it). Easier to spot than invented facts (they come
    from another document), but fluent, in-domain, and certainly not entailed by this source."""
    source_sentences = [s.text for s in split_sentences(example.source)]
    seen: set[str] = set()
    candidates: list[tuple[float, str, str]] = []  # (closeness to this target, sentence, its source)
    for other in pool:
        if other.source == example.source or other.id == example.id:
            continue
        for s in split_sentences(other.target):
            text = s.text.strip()
            if text in seen or not min_words <= len(text.split()) <= max_words:
                continue
            seen.add(text)
            candidates.append((fuzz.token_set_ratio(text, example.target), text, other.source))
    candidates.sort(key=lambda c: -c[0])
    shortlisted = candidates[: max(shortlist, k)]
    rng.shuffle(shortlisted)
    chosen: list[str] = []
    used_sources: set[str] = set()
    for _, text, donor_source in shortlisted + candidates[max(shortlist, k):]:
        if len(chosen) == k:
            break
        # one sentence per donor source, and no two near-duplicates (datasets hold edited variants of a summary)
        if donor_source in used_sources or any(fuzz.token_sort_ratio(text, c) >= 60 for c in chosen):
            continue
        if locate(text, example.source, min_fuzzy=80) is not None:
            continue
        if any(fuzz.token_sort_ratio(text, src, processor=default_process) >= 75
               or (len(src.split()) >= 5 and fuzz.token_set_ratio(text, src, processor=default_process) >= 90)
               for src in source_sentences):
            continue
        chosen.append(text)
        used_sources.add(donor_source)
    return chosen


# --- gold truthful claims and gold evidence (opt-in) --------------------------------------------------------


@dataclass
class TruthfulGold:
    """Gold claims of a faithful target, spans in THAT target: ``claims`` (truthful, with consensus evidence)
    and ``uncertain`` (no consensus); ``error`` when the target could not be decomposed."""

    claims: list[dict[str, Any]] = field(default_factory=list)
    uncertain: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    calls: list[LLMCall] = field(default_factory=list)
    builder: dict[str, Any] = field(default_factory=dict)




class GoldEvidenceBuilder:
    """Gold truthful claims with gold evidence by multi-judge consensus (module docstring; seed 004 §3.3),
    built from PROBE's own stages: its decomposer (the main model), its evidence finder (each judge model
    once; the union of their located passages) and its evidence evaluation prompt (every judge, ``samples``
    votes each). ``samples`` defaults to 1 vote per judge with several judge models and to 3 with one."""

    def __init__(self, llm: LLM, *, judges: Sequence[LLM] = (), samples: int | None = None,
                 consensus: float = 0.75, max_evidence: int = 3, context_sentences: int = 2,
                 prompts_dir: Path | None = None):
        from halluscope.config import Config
        from halluscope.methods.probe import EVALUATE_PROMPT, EvidenceEvaluator
        from halluscope.methods.probe.options import ProbeVerifierOptions
        from halluscope.methods.probe.verifier import build_judges
        from halluscope.prompts import PromptTemplate, apply_overrides
        from halluscope.stages import build_stage

        if not 0 < consensus <= 1:
            raise ValueError("consensus must be in (0, 1]")
        judge_llms = list(judges) or [llm]
        samples = samples or (1 if len(judge_llms) > 1 else 3)
        config = Config().with_overrides(prompts_dir=prompts_dir) if prompts_dir is not None else Config()
        opts = ProbeVerifierOptions.parse("the gold evidence builder", {  # PROBE's ranges
            "samples": samples, "consensus": consensus, "max_evidence": max_evidence,
            "context_sentences": context_sentences})

        def prompts(template: PromptTemplate) -> PromptTemplate:
            return apply_overrides(template, config.prompts_dir)

        self.decomposer = build_stage("decomposer", "probe", llm, {"on_decompose_error": "unscored"}, prompts=prompts)
        finder_llms = list({j.name: j for j in judge_llms}.values())  # each judge model finds evidence once
        self.finders = [build_stage("evidence_finder", "probe", j, {"max_evidence": opts.max_evidence},
                                    prompts=prompts) for j in finder_llms]
        self.evaluator = EvidenceEvaluator(build_judges(judge_llms, opts.samples, opts.sample_temperature),
                                           prompts(EVALUATE_PROMPT), consensus=consensus)
        self.consensus, self.context_sentences = consensus, context_sentences
        self.description = {"decomposer": llm.name, "finders": [f.llm.name for f in self.finders],
                            "judges": [j.name for j in self.evaluator.judges], "consensus": consensus,
                            "votes_per_passage": len(self.evaluator.judges),
                            "pass_votes_needed": votes_needed(consensus, len(self.evaluator.judges))}

    async def build(self, source: str, target: str) -> TruthfulGold:
        """The truthful gold of a faithful ``target`` (spans in ``target``)."""
        from halluscope.methods.probe.evidence import context_around
        from halluscope.stages import Context

        step = await self.decomposer(target)
        calls = list(step.calls)
        if step.value is None:
            return TruthfulGold(error=f"gold decomposition failed: {step.error}", calls=calls,
                                builder=dict(self.description))
        sentences = split_sentences(source)
        whole = Context(text=source)

        async def one(number: int, claim: Claim) -> tuple[dict[str, Any], bool, list[LLMCall]]:
            entry: dict[str, Any] = {"text": claim.text, "hallucinated": False,
                                     "span": claim.target_spans[0].model_dump() if claim.target_spans else None}
            if not claim.target_spans:
                return {"id": f"u{number}", **entry, "reason": "the decomposer could not place it in the target"}, \
                    False, []
            searches = await asyncio.gather(*(f.search(claim, whole, source) for f in self.finders))
            my_calls = [c for s in searches for c in s.calls]
            candidates: dict[tuple[int, int], Any] = {}
            for search in searches:
                for ev in search.evidence:
                    if ev.span is not None:
                        candidates.setdefault((ev.span.start, ev.span.end), ev)
            agreement: dict[str, Any] = {"finders": len(searches),
                                         "finders_failed": sum(s.error is not None for s in searches),
                                         "candidates": len(candidates)}
            if not candidates:
                errors = "; ".join(dict.fromkeys(s.error for s in searches if s.error))
                reason = (f"evidence finding failed for every finder: {errors}" if all(s.error for s in searches)
                          else "no finder located a source passage for it")
                return {"id": f"u{number}", **entry, "reason": reason, "agreement": agreement}, False, my_calls
            judgments = await asyncio.gather(*(
                self.evaluator(claim, ev, context_around(source, sentences, ev.span, self.context_sentences), source)
                for ev in candidates.values()))
            judged = []
            for (start, end), j in zip(candidates, judgments):
                my_calls += j.calls
                passes = sum(v.passed is True for v in j.votes)
                judged.append({"start": start, "end": end, "pass": passes, "votes": len(j.votes),
                               "accepted": j.accepted is True})
            accepted = [{k: e[k] for k in ("start", "end", "pass", "votes")} for e in judged if e["accepted"]]
            agreement["accepted"] = len(accepted)
            if accepted:
                return {"id": f"t{number}", **entry, "evidence": accepted, "agreement": agreement}, True, my_calls
            best = max(e["pass"] for e in judged)
            agreement["candidate_votes"] = [{k: e[k] for k in ("start", "end", "pass", "votes")} for e in judged]
            return {"id": f"u{number}", **entry, "agreement": agreement,
                    "reason": f"no passage reached consensus (best: {best} of {judged[0]['votes']} PASS votes, "
                              f"{votes_needed(self.consensus, judged[0]['votes'])} needed)"}, False, my_calls

        results = await asyncio.gather(*(one(i + 1, c) for i, c in enumerate(step.value)))
        gold = TruthfulGold(calls=calls + [c for _, _, cs in results for c in cs], builder=dict(self.description))
        for entry, truthful, _ in results:
            (gold.claims if truthful else gold.uncertain).append(entry)
        return gold


def align_original(original: str, new_text: str, inserted: Sequence[Span]) -> list[int] | None:
    """For each character of ``original``, its position in ``new_text`` (-1 for whitespace that has none), given
    that ``new_text`` is ``original`` with the ``inserted`` pieces added (whitespace aside); None if it is not."""
    inside = bytearray(len(new_text))
    for s in inserted:
        inside[s.start:s.end] = b"\x01" * (s.end - s.start)
    positions = [-1] * len(original)
    i = j = 0
    while i < len(original):
        while j < len(new_text) and inside[j]:
            j += 1
        if j < len(new_text) and original[i] == new_text[j]:
            positions[i] = j
            i, j = i + 1, j + 1
        elif original[i].isspace():
            i += 1
        elif j < len(new_text) and new_text[j].isspace():
            j += 1
        else:
            return None
    rest = [new_text[k] for k in range(j, len(new_text)) if not inside[k]]
    return positions if all(ch.isspace() for ch in rest) else None


def map_span(span: dict[str, int], positions: list[int]) -> dict[str, int] | None:
    """A span of the original target carried into the new one (its first to last mapped character)."""
    mapped = [positions[k] for k in range(span["start"], min(span["end"], len(positions))) if positions[k] >= 0]
    return {"start": mapped[0], "end": mapped[-1] + 1} if mapped else None


def with_truthful_gold(example: Example, original: str, gold: TruthfulGold) -> Example:
    """``example`` with the truthful gold of its ``original`` target added to ``meta.gold_claims`` (spans carried
    through the insertions), ``meta.gold_claims_uncertain`` and ``gold_claims_complete``."""
    meta = dict(example.meta)
    meta["gold_builder"] = gold.builder
    if gold.error is not None:
        meta["gold_claims_error"] = gold.error
        return example.model_copy(update={"meta": meta})
    positions = align_original(original, example.target, example.gold_spans or [])
    if positions is None:
        meta["gold_claims_error"] = "the target is not the original with insertions: truthful spans not carried"
        return example.model_copy(update={"meta": meta})

    def carried(entries: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        out = []
        for e in entries:
            span = map_span(e["span"], positions) if e.get("span") else None
            if e.get("span") and span is None:
                return None
            out.append({**e, "span": span})
        return out

    truthful, uncertain = carried(gold.claims), carried(gold.uncertain)
    if truthful is None or uncertain is None:
        meta["gold_claims_error"] = "a truthful claim's span could not be carried into the target"
        return example.model_copy(update={"meta": meta})
    claims = list(meta.get("gold_claims", [])) + truthful
    meta["gold_claims"] = sorted(claims, key=lambda c: (c["span"]["start"] if c.get("span") else -1, c["id"]))
    meta["gold_claims_uncertain"] = uncertain
    meta["gold_claims_complete"] = True
    return example.model_copy(update={"meta": meta})


# --- the generator -------------------------------------------------------------------------------------------


class InjectionGenerator:
    """Builds injected Examples from faithful ones. ``llm`` may be None with ``weave="boundary"`` and facts
    given by the caller (the deterministic, model-free mode). With ``gold_evidence`` (a
    :class:`GoldEvidenceBuilder`) every written Example also gets the truthful gold claims and their evidence."""

    def __init__(self, llm: LLM | None = None, *, weave: Weave = "llm", seed: int = 0,
                 prompts_dir: Path | None = None, include_truth: bool = True,
                 gold_evidence: GoldEvidenceBuilder | None = None):
        if weave not in ("llm", "boundary"):
            raise ValueError("weave must be 'llm' or 'boundary'")
        self.llm, self.weave, self.seed, self.include_truth = llm, weave, seed, include_truth
        self.gold_evidence = gold_evidence
        self.invent_prompt = apply_overrides(INVENT_PROMPT, prompts_dir)
        self.weave_prompt = apply_overrides(WEAVE_PROMPT, prompts_dir)

    def _need_llm(self, what: str) -> LLM:
        if self.llm is None:
            raise ValueError(f"{what} needs an LLM (or give facts and use weave='boundary')")
        return self.llm

    def _rng(self, example_id: str, complexity: int) -> random.Random:
        return random.Random(f"{self.seed}:{example_id}:{complexity}")

    async def invent(self, source: str, target: str, k: int) -> tuple[list[str], str | None, list[LLMCall]]:
        """``k`` invented facts (fewer when some had to be dropped), an error when the reply was unusable."""
        llm = self._need_llm("inventing facts")
        budget = min(512, llm.default_params.max_tokens)
        messages = with_source_block(self.invent_prompt, SOURCE_BLOCK).render(k=k, source=source, target=target)
        if not fits_in_context(llm, "\n".join(m["content"] for m in messages), reserve_tokens=budget):
            # a long source does not fit: invent from the TEXT alone, then drop facts found in the source
            messages = with_source_block(self.invent_prompt, "").render(k=k, source=source, target=target)
        parsed = await generate_parsed(llm, messages,
                                       json_parser(_Facts), params=llm.params(json_mode=True, max_tokens=budget),
                                       format_hint='one JSON object like {"facts": ["...", "..."]}')
        if parsed.value is None:
            return [], f"fact invention failed: {parsed.error}", parsed.calls
        facts: list[str] = []
        for fact in parsed.value.facts:
            fact = fact.strip() if isinstance(fact, str) else ""
            if len(fact.split()) < 3 or not re.search(r"[A-Za-z]", fact):
                continue
            if locate(fact, source, min_fuzzy=90) or locate(fact, target, min_fuzzy=90):
                continue  # not invented: it is in the source or already in the text
            if fact not in facts:
                facts.append(fact)
        return facts[:k], None, parsed.calls

    async def weave_llm(self, target: str, facts: Sequence[str], complexity: int
                        ) -> tuple[str | None, list[InjectedClaim], str | None, str | None, list[LLMCall]]:
        """(new target, claims, error, error kind, calls)."""
        llm = self._need_llm("weave='llm'")
        messages = self.weave_prompt.render(target=target, facts="\n".join(f"- {f}" for f in facts),
                                            instructions=COMPLEXITY_INSTRUCTIONS[complexity])
        budget = min(llm.default_params.max_tokens, 2 * llm.count_tokens(target) + 400)
        parsed = await generate_parsed(llm, messages, parse_marked_text, params=llm.params(max_tokens=budget),
                                       format_hint="the complete edited text with each insertion wrapped in <ins>…</ins>")
        if parsed.value is None:
            return None, [], f"weaving failed: {parsed.error}", "weave_unparseable", parsed.calls
        new_target, pieces = parsed.value
        if not outside_matches_original(new_target, pieces, target):
            return None, [], "the model changed text outside its <ins> insertions, so the spans cannot be trusted", \
                "rewrote_outside_insertions", parsed.calls
        claims = []
        for start, end in pieces:
            inserted = new_target[start:end]
            best = max(facts, key=lambda f: fuzz.token_set_ratio(f, inserted))
            claims.append(InjectedClaim(fact=best, inserted_text=inserted, span=Span(start=start, end=end)))
        return new_target, claims, None, None, parsed.calls

    async def inject(self, example: Example, complexity: int, facts: Sequence[str] | None = None,
                     donors: Sequence[Example] | None = None, *, facts_from: str | None = None) -> InjectionResult:
        """One injected Example at ``complexity`` (1-3) from a faithful ``example``. Facts: ``facts`` when
        given, else donor sentences from ``donors`` when given, else invented by the LLM."""
        if complexity not in COMPLEXITIES:
            raise ValueError(f"complexity must be one of {COMPLEXITIES}")
        calls: list[LLMCall] = []
        facts_from = facts_from or ("given" if facts is not None else "donor" if donors is not None else "llm")
        if facts is None and donors is not None:
            facts = donor_facts(example, donors, complexity, self._rng(example.id, complexity))
        if facts is None:
            invented, error, calls = await self.invent(example.source, example.target, complexity)
            if error:
                return InjectionResult(None, error, "invent_failed", calls)
            facts = invented
        facts = [f.strip() for f in facts if f and f.strip()][:complexity]
        if len(facts) < complexity:
            return InjectionResult(None, f"only {len(facts)} usable fact(s) for complexity {complexity}",
                                   "too_few_facts", calls)
        new_target: str | None
        if self.weave == "boundary":
            try:
                new_target, claims = weave_at_boundaries(example.target, facts, complexity,
                                                         self._rng(example.id, complexity))
            except ValueError as exc:
                return InjectionResult(None, str(exc), "no_sentence_boundary", calls)
        else:
            new_target, claims, error, kind, weave_calls = await self.weave_llm(example.target, facts, complexity)
            calls += weave_calls
            if error or new_target is None:
                return InjectionResult(None, error, kind, calls)
        problem = verify_spans(new_target, claims)
        if problem:
            return InjectionResult(None, problem, "span_mismatch", calls)
        meta = {"generator": "inject", "complexity": complexity, "weave": self.weave, "facts_from": facts_from,
                "injected_claims": [c.as_meta() for c in claims], "facts": list(facts),
                "gold_claims": [c.as_gold(i + 1) for i, c in enumerate(claims)], "gold_claims_complete": False,
                "original_id": example.id, "original_target": example.target,
                "model": self.llm.name if self.llm is not None and "llm" in (facts_from, self.weave) else None}
        injected = Example(id=f"{example.id}-inject-c{complexity}", source=example.source, target=new_target,
                           label=0, descriptions=list(facts), gold_spans=[c.span for c in claims],
                           group=example.id, difficulty=f"complexity-{complexity}", split=example.split, meta=meta)
        return InjectionResult(injected, calls=calls)

    def truth(self, example: Example) -> Example:
        """The original, faithful target in the same format (the hallucination-free baseline)."""
        return Example(id=f"{example.id}-inject-truth", source=example.source, target=example.target, label=1,
                       descriptions=[], gold_spans=[], group=example.id, difficulty=TRUTH, split=example.split,
                       meta={"generator": "inject", "complexity": 0, "original_id": example.id, "gold_claims": [],
                             "gold_claims_complete": False})

    async def generate(self, example: Example, complexities: Sequence[int] = COMPLEXITIES,
                       facts: Sequence[str] | None = None, donors: Sequence[Example] | None = None
                       ) -> tuple[list[Example], list[InjectionResult]]:
        """The truth (if ``include_truth``) and one injected Example per complexity; failures are returned.
        With ``gold_evidence``, the truthful gold is built once (on the original target) and added to each.
        Invented facts are asked for once per example (as many as the highest complexity needs) and shared by
        the levels, so level c's facts are the first c of them."""
        if facts is None and donors is None and complexities:
            invented, error, calls = await self.invent(example.source, example.target, max(complexities))
            if error:
                failures = [InjectionResult(None, error, "invent_failed", calls if i == 0 else [])
                            for i, _ in enumerate(complexities)]
                return [], failures
            results = [await self.inject(example, c, invented, facts_from="llm") for c in complexities]
            results[0].calls[:0] = calls  # the invention call is audited once, on the first level
        else:
            results = [await self.inject(example, c, facts, donors) for c in complexities]
        out = [self.truth(example)] if self.include_truth and any(r.example for r in results) else []
        out += [r.example for r in results if r.example is not None]
        if self.gold_evidence is not None and out:
            gold = await self.gold_evidence.build(example.source, example.target)
            out = [with_truthful_gold(e, example.target, gold) for e in out]
        return out, [r for r in results if r.example is None]
