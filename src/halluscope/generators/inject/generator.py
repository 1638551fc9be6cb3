"""The injection generator: invents (or takes) facts, weaves them into a faithful target, checks the spans and
writes the injected Examples (and the faithful truth)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rapidfuzz import fuzz

from halluscope.generators.inject.donors import donor_facts
from halluscope.generators.inject.gold import GoldEvidenceBuilder, with_truthful_gold
from halluscope.generators.inject.prompts import (
    COMPLEXITY_INSTRUCTIONS,
    INVENT_PROMPT,
    SOURCE_BLOCK,
    WEAVE_PROMPT,
    _Facts,
    with_source_block,
)
from halluscope.generators.inject.weaving import (
    InjectedClaim,
    outside_matches_original,
    parse_marked_text,
    verify_spans,
    weave_at_boundaries,
)
from halluscope.llm import LLM
from halluscope.llm.structured import generate_parsed, json_parser
from halluscope.prompts import apply_overrides
from halluscope.records import Example, LLMCall, Span
from halluscope.retrieval import fits_in_context
from halluscope.text import locate

Weave = Literal["llm", "boundary"]
COMPLEXITIES = (1, 2, 3)
TRUTH = "truth"


@dataclass
class InjectionResult:
    example: Example | None
    dropped: str | None = None  # why no example was written
    drop_kind: str | None = None  # short reason category, for counting
    calls: list[LLMCall] = field(default_factory=list)


class InjectionGenerator:
    """Builds injected Examples from faithful ones. ``llm`` may be None with ``weave="boundary"`` and facts
    given by the caller (the deterministic, model-free mode). With ``gold_evidence`` (a
    :class:`GoldEvidenceBuilder`) every written Example also gets the truthful gold claims and their evidence."""

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        weave: Weave = "llm",
        seed: int = 0,
        prompts_dir: Path | None = None,
        include_truth: bool = True,
        gold_evidence: GoldEvidenceBuilder | None = None,
    ):
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
        parsed = await generate_parsed(
            llm,
            messages,
            json_parser(_Facts),
            params=llm.params(json_mode=True, max_tokens=budget),
            format_hint='one JSON object like {"facts": ["...", "..."]}',
        )
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

    async def weave_llm(
        self, target: str, facts: Sequence[str], complexity: int
    ) -> tuple[str | None, list[InjectedClaim], str | None, str | None, list[LLMCall]]:
        """(new target, claims, error, error kind, calls)."""
        llm = self._need_llm("weave='llm'")
        messages = self.weave_prompt.render(
            target=target, facts="\n".join(f"- {f}" for f in facts), instructions=COMPLEXITY_INSTRUCTIONS[complexity]
        )
        budget = min(llm.default_params.max_tokens, 2 * llm.count_tokens(target) + 400)
        parsed = await generate_parsed(
            llm,
            messages,
            parse_marked_text,
            params=llm.params(max_tokens=budget),
            format_hint="the complete edited text with each insertion wrapped in <ins>…</ins>",
        )
        if parsed.value is None:
            return None, [], f"weaving failed: {parsed.error}", "weave_unparseable", parsed.calls
        new_target, pieces = parsed.value
        if not outside_matches_original(new_target, pieces, target):
            return (
                None,
                [],
                "the model changed text outside its <ins> insertions, so the spans cannot be trusted",
                "rewrote_outside_insertions",
                parsed.calls,
            )
        claims = []
        for start, end in pieces:
            inserted = new_target[start:end]
            best = max(facts, key=lambda f: fuzz.token_set_ratio(f, inserted))
            claims.append(InjectedClaim(fact=best, inserted_text=inserted, span=Span(start=start, end=end)))
        return new_target, claims, None, None, parsed.calls

    async def inject(
        self,
        example: Example,
        complexity: int,
        facts: Sequence[str] | None = None,
        donors: Sequence[Example] | None = None,
        *,
        facts_from: str | None = None,
    ) -> InjectionResult:
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
            return InjectionResult(
                None, f"only {len(facts)} usable fact(s) for complexity {complexity}", "too_few_facts", calls
            )
        new_target: str | None
        if self.weave == "boundary":
            try:
                new_target, claims = weave_at_boundaries(
                    example.target, facts, complexity, self._rng(example.id, complexity)
                )
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
        meta = {
            "generator": "inject",
            "complexity": complexity,
            "weave": self.weave,
            "facts_from": facts_from,
            "injected_claims": [c.as_meta() for c in claims],
            "facts": list(facts),
            "gold_claims": [c.as_gold(i + 1) for i, c in enumerate(claims)],
            "gold_claims_complete": False,
            "original_id": example.id,
            "original_target": example.target,
            "model": self.llm.name if self.llm is not None and "llm" in (facts_from, self.weave) else None,
        }
        injected = Example(
            id=f"{example.id}-inject-c{complexity}",
            source=example.source,
            target=new_target,
            label=0,
            descriptions=list(facts),
            gold_spans=[c.span for c in claims],
            group=example.id,
            difficulty=f"complexity-{complexity}",
            split=example.split,
            meta=meta,
        )
        return InjectionResult(injected, calls=calls)

    def truth(self, example: Example) -> Example:
        """The original, faithful target in the same format (the hallucination-free baseline)."""
        return Example(
            id=f"{example.id}-inject-truth",
            source=example.source,
            target=example.target,
            label=1,
            descriptions=[],
            gold_spans=[],
            group=example.id,
            difficulty=TRUTH,
            split=example.split,
            meta={
                "generator": "inject",
                "complexity": 0,
                "original_id": example.id,
                "gold_claims": [],
                "gold_claims_complete": False,
            },
        )

    async def generate(
        self,
        example: Example,
        complexities: Sequence[int] = COMPLEXITIES,
        facts: Sequence[str] | None = None,
        donors: Sequence[Example] | None = None,
    ) -> tuple[list[Example], list[InjectionResult]]:
        """The truth (if ``include_truth``) and one injected Example per complexity; failures are returned.
        With ``gold_evidence``, the truthful gold is built once (on the original target) and added to each.
        Invented facts are asked for once per example (as many as the highest complexity needs) and shared by
        the levels, so level c's facts are the first c of them."""
        if facts is None and donors is None and complexities:
            invented, error, calls = await self.invent(example.source, example.target, max(complexities))
            if error:
                failures = [
                    InjectionResult(None, error, "invent_failed", calls if i == 0 else [])
                    for i, _ in enumerate(complexities)
                ]
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
