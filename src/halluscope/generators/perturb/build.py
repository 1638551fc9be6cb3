"""The set builder: for each original Example, the original plus its kept perturbations (one group each)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from halluscope.config import Config
from halluscope.generators.perturb.insert import INSERT_PROMPT, InsertSourceSentence
from halluscope.generators.perturb.rewrite import REWRITE_PROMPTS, RewritePerturbation
from halluscope.generators.perturb.rows import (
    PERTURBATIONS,
    GroupResult,
    InsertWith,
    PerturbationSkip,
    Unit,
    original_row,
)
from halluscope.llm import LLM, get_llm, track_calls
from halluscope.prompts import apply_overrides
from halluscope.records import Example, Usage


def _retrieval_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("halluscope.retrieval") is not None


class PerturbGenerator:
    """Builds a stress-test set: for each original Example, the original plus its kept perturbations.

    ``perturbations``: which of :data:`PERTURBATIONS` to produce (all by default). ``unit``: rewrite the
    whole target (as the paper) or each sentence separately. ``insert_with``: how ``added_source_sentence``
    chooses and inserts its sentence (``auto`` = the shared retrieval stage when present, else TF-IDF;
    never the LLM unless asked). ``require_tags``: reject replies without ``<rewritten>`` tags instead of
    taking an untagged reply whole. Originals labelled inconsistent (label 0) are skipped: a meaning-preserving
    edit of a wrong target is still wrong, so it cannot serve as a consistent stress item.
    """

    def __init__(
        self,
        llm: LLM | None = None,
        config: Config | None = None,
        *,
        perturbations: Sequence[str] = PERTURBATIONS,
        unit: Unit = "target",
        insert_with: InsertWith = "auto",
        seed: int = 0,
        concurrency: int | None = None,
        require_tags: bool = False,
    ):
        unknown = [p for p in perturbations if p not in PERTURBATIONS]
        if unknown:
            raise ValueError(f"unknown perturbation(s) {unknown}; available: {', '.join(PERTURBATIONS)}")
        if not perturbations:
            raise ValueError("no perturbation selected")
        if unit not in ("target", "sentence"):
            raise ValueError(f"unit must be 'target' or 'sentence', got {unit!r}")
        if insert_with not in ("auto", "tfidf", "retrieval", "llm"):
            raise ValueError(f"unknown insert_with {insert_with!r}")
        self.config = config or Config()
        self._llm = llm
        self.perturbations = tuple(dict.fromkeys(perturbations))
        self.unit = unit
        self.insert_with = insert_with
        self.seed = seed
        self.concurrency = concurrency or self.config.max_concurrency
        self.require_tags = require_tags

    @property
    def needs_llm(self) -> bool:
        return any(p in REWRITE_PROMPTS for p in self.perturbations) or (
            "added_source_sentence" in self.perturbations and self.insert_with == "llm"
        )

    @property
    def llm(self) -> LLM:
        if self._llm is None:
            self._llm = get_llm(self.config)
        return self._llm

    def stages(self) -> list[RewritePerturbation | InsertSourceSentence]:
        out: list[RewritePerturbation | InsertSourceSentence] = []
        for name in self.perturbations:
            if name in REWRITE_PROMPTS:
                prompt = apply_overrides(REWRITE_PROMPTS[name], self.config.prompts_dir)
                out.append(RewritePerturbation(name, self.llm, prompt, unit=self.unit, require_tags=self.require_tags))
            else:
                how = self.insert_with
                if how == "auto":
                    how = "retrieval" if _retrieval_available() else "tfidf"
                out.append(
                    InsertSourceSentence(
                        how,
                        llm=self.llm if how == "llm" else None,
                        prompt=apply_overrides(INSERT_PROMPT, self.config.prompts_dir),
                        seed=self.seed,
                    )
                )
        return out

    async def perturb_one(
        self, original: Example, stages: list[RewritePerturbation | InsertSourceSentence] | None = None
    ) -> GroupResult:
        stages = stages if stages is not None else self.stages()
        if original.label == 0:
            skips = [
                PerturbationSkip(
                    example_id=original.id,
                    perturbation=s.perturbation,
                    reason="the original is labelled inconsistent (label 0)",
                )
                for s in stages
            ]
            return GroupResult(original, [], skips, Usage())
        with track_calls():  # keeps these calls out of any caller's per-report log
            outcomes = await asyncio.gather(*(stage(original) for stage in stages))
        kept = [o.example for o in outcomes if o.example is not None]
        skips = [o.skip for o in outcomes if o.skip is not None]
        usage = Usage()
        for o in outcomes:
            usage = usage + o.usage
        rows = [original_row(original), *kept] if kept else []
        return GroupResult(original, rows, skips, usage)

    async def run(self, originals: Sequence[Example]) -> AsyncIterator[GroupResult]:
        """Yield one GroupResult per original as each finishes (bounded concurrency)."""
        stages = self.stages()
        sem = asyncio.Semaphore(max(1, self.concurrency))

        async def one(example: Example) -> GroupResult:
            async with sem:
                return await self.perturb_one(example, stages)

        tasks = [asyncio.ensure_future(one(e)) for e in originals]
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:
            for t in tasks:
                t.cancel()
