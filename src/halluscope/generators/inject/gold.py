"""Gold truthful claims and gold evidence by multi-judge consensus (opt-in; PROBE paper §3.3, described in the
package docstring), and carrying the truthful claims' spans into an injected target."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluscope.llm import LLM
from halluscope.methods.probe import consensus_judging  # PROBE's stages and vote rule, shared with detection
from halluscope.records import Claim, Example, LLMCall, Span
from halluscope.text import split_sentences


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
    """Gold truthful claims with gold evidence by multi-judge consensus (package docstring; PROBE paper §3.3),
    built from PROBE's own stages: its decomposer (the main model), its evidence finder (each judge model
    once; the union of their located passages) and its evidence evaluation prompt (every judge, ``samples``
    votes each). ``samples`` defaults to 1 vote per judge with several judge models and to 3 with one."""

    def __init__(
        self,
        llm: LLM,
        *,
        judges: Sequence[LLM] = (),
        samples: int | None = None,
        consensus: float = 0.75,
        max_evidence: int = 3,
        context_sentences: int = 2,
        prompts_dir: Path | None = None,
    ):
        from halluscope.config import Config
        from halluscope.prompts import PromptTemplate, apply_overrides

        if not 0 < consensus <= 1:
            raise ValueError("consensus must be in (0, 1]")
        judge_llms = list(judges) or [llm]
        samples = samples or (1 if len(judge_llms) > 1 else 3)
        config = Config().with_overrides(prompts_dir=prompts_dir) if prompts_dir is not None else Config()

        def prompts(template: PromptTemplate) -> PromptTemplate:
            return apply_overrides(template, config.prompts_dir)

        self.judging = consensus_judging(
            llm,
            judge_llms,
            samples=samples,
            consensus=consensus,  # PROBE's ranges
            max_evidence=max_evidence,
            context_sentences=context_sentences,
            prompts=prompts,
            purpose="the gold evidence builder",
        )
        self.decomposer, self.finders, self.evaluator = (
            self.judging.decomposer,
            self.judging.finders,
            self.judging.evaluator,
        )
        self.consensus, self.context_sentences = consensus, context_sentences
        self.description = {
            "decomposer": llm.name,
            "finders": [f.llm.name for f in self.finders],
            "judges": [j.name for j in self.evaluator.judges],
            "consensus": consensus,
            "votes_per_passage": len(self.evaluator.judges),
            "pass_votes_needed": self.judging.votes_needed(len(self.evaluator.judges)),
        }

    async def build(self, source: str, target: str) -> TruthfulGold:
        """The truthful gold of a faithful ``target`` (spans in ``target``)."""
        from halluscope.stages import Context

        step = await self.decomposer(target)
        calls = list(step.calls)
        if step.value is None:
            return TruthfulGold(
                error=f"gold decomposition failed: {step.error}", calls=calls, builder=dict(self.description)
            )
        sentences = split_sentences(source)
        whole = Context(text=source)

        async def one(number: int, claim: Claim) -> tuple[dict[str, Any], bool, list[LLMCall]]:
            entry: dict[str, Any] = {
                "text": claim.text,
                "hallucinated": False,
                "span": claim.target_spans[0].model_dump() if claim.target_spans else None,
            }
            if not claim.target_spans:
                return (
                    {"id": f"u{number}", **entry, "reason": "the decomposer could not place it in the target"},
                    False,
                    [],
                )
            searches = await asyncio.gather(*(f.search(claim, whole, source) for f in self.finders))
            my_calls = [c for s in searches for c in s.calls]
            candidates: dict[tuple[int, int], Any] = {}
            for search in searches:
                for ev in search.evidence:
                    if ev.span is not None:
                        candidates.setdefault((ev.span.start, ev.span.end), ev)
            agreement: dict[str, Any] = {
                "finders": len(searches),
                "finders_failed": sum(s.error is not None for s in searches),
                "candidates": len(candidates),
            }
            if not candidates:
                errors = "; ".join(dict.fromkeys(s.error for s in searches if s.error))
                reason = (
                    f"evidence finding failed for every finder: {errors}"
                    if all(s.error for s in searches)
                    else "no finder located a source passage for it"
                )
                return {"id": f"u{number}", **entry, "reason": reason, "agreement": agreement}, False, my_calls
            judgments = await asyncio.gather(
                *(
                    self.evaluator(claim, ev, self.judging.context(source, sentences, ev.span), source)
                    for ev in candidates.values()
                )
            )
            judged = []
            for (start, end), j in zip(candidates, judgments):
                my_calls += j.calls
                passes = sum(v.passed is True for v in j.votes)
                judged.append(
                    {"start": start, "end": end, "pass": passes, "votes": len(j.votes), "accepted": j.accepted is True}
                )
            accepted = [{k: e[k] for k in ("start", "end", "pass", "votes")} for e in judged if e["accepted"]]
            agreement["accepted"] = len(accepted)
            if accepted:
                return {"id": f"t{number}", **entry, "evidence": accepted, "agreement": agreement}, True, my_calls
            best = max(e["pass"] for e in judged)
            agreement["candidate_votes"] = [{k: e[k] for k in ("start", "end", "pass", "votes")} for e in judged]
            return (
                {
                    "id": f"u{number}",
                    **entry,
                    "agreement": agreement,
                    "reason": f"no passage reached consensus (best: {best} of {judged[0]['votes']} PASS votes, "
                    f"{self.judging.votes_needed(judged[0]['votes'])} needed)",
                },
                False,
                my_calls,
            )

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
        inside[s.start : s.end] = b"\x01" * (s.end - s.start)
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
