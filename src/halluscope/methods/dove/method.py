"""The ``dove`` method: the claim pipeline (decompose -> context -> verify) plus DoveScore's own part, the
event order (sorter, ShuffleD) and Eq. 5."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from pydantic import Field

from halluscope.methods import register_method
from halluscope.methods.details import MethodDetails
from halluscope.methods.dove.aggregate import OrderOutcome
from halluscope.methods.dove.details import DoveDetails
from halluscope.methods.dove.order import judge_order, target_position_order
from halluscope.methods.dove.prompts import (
    DOVE_CHECK_BATCH_PROMPT,
    DOVE_CHECK_PROMPT,
    DOVE_DECOMPOSE_PROMPT,
    DOVE_SORT_PROMPT,
)
from halluscope.methods.dove.stages import DoveSorter
from halluscope.methods.pipeline import ClaimPipeline, support_p
from halluscope.options import MAX_BATCH_SIZE, ClaimOptions, own_options
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, StepResult
from halluscope.retrieval import SourceIndex, fits_in_context
from halluscope.stages import Aggregate, Sorter, stage_spec
from halluscope.stages.context import shared_source_index  # the retrieval stage's index (cached)
from halluscope.stages.protocols import EventOrder, PipelineRun

if TYPE_CHECKING:
    from halluscope.config import Config
    from halluscope.llm import LLM


class DoveOptions(ClaimOptions):
    retired_spellings = {"decomposer=llm": "decomposer=dove (DoveScore's own decomposer, the default)"}

    decomposer: str | None = None
    """dove (the default, the paper's): event and descriptive facts, pronouns resolved; sentences: every target
    sentence is an event fact (no call); or any registered decomposer (`halluscope stages decomposer`), whose claims
    of kind descriptive are descriptive facts and every other claim an event fact."""

    batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
    """Facts per fact-checker call when the whole source is sent (1 = the paper's one call per fact)."""

    target_order: Literal["sorter", "decomposition"] = "sorter"
    """How the target orders the verified events: sorter (the paper: the sorter reads the target) or
    decomposition (the decomposer's listing; one call fewer)."""

    sorter: str = "llm"
    """llm (the paper) or position (no LLM: order of mention in the source; only for chronologically narrated
    sources), or any registered sorter (`halluscope stages sorter`), which then orders the events by the target
    too (unless target_order=decomposition)."""

    sorter_input: Literal["decomposition", "shuffled"] = "decomposition"
    """The order the LLM sorter is shown the events in: decomposition (the paper: the decomposer's listing, i.e. the
    target's order) or shuffled (a fixed pseudo-random order seeded by the events, so a model that echoes its
    input cannot make the source order agree with the target)."""


@register_method
class Dove(ClaimPipeline):
    """DoveScore. Claims of kind ``descriptive`` are descriptive facts; every other claim is an event fact, in
    the decomposer's order (so a swapped decomposer such as ``sentences`` gives a sentence-level DoveScore)."""

    Details: ClassVar[type[MethodDetails]] = DoveDetails
    name = "dove"
    description = (
        "DoveScore: event and descriptive facts checked against the source, plus the order of the "
        "verified events (catches true facts told in a misleading order)."
    )
    Options = DoveOptions
    opts: DoveOptions
    prompts = (DOVE_DECOMPOSE_PROMPT, DOVE_CHECK_PROMPT, DOVE_CHECK_BATCH_PROMPT, DOVE_SORT_PROMPT)
    default_verifier = "dove"
    default_aggregator = "dove"
    default_localizer = "dove"
    default_decomposer = "dove"
    default_sorter = "llm"
    extra_kinds = ("sorter",)

    def __init__(self, llm: LLM | None = None, config: Config | None = None, **options: Any):
        super().__init__(llm, config, **options)
        self._sorter: DoveSorter | None = None
        self._source_sorter: Sorter | None = None

    # -- stages -------------------------------------------------------------------------------------------
    def method_stage_options(self, kind: str, name: str) -> dict[str, Any]:
        """Every sentence an event fact (``decomposer=sentences``); DoveScore's two sorters (``llm``, ``position``)
        get the method's options they declare (the retrieval settings, ``sorter_input``) and the run's seed."""
        if kind == "decomposer":
            return {"claim_kind": "event"}
        if kind == "sorter" and name in ("llm", "position"):
            return {**own_options(stage_spec(kind, name).options_model, self.opts), "seed": self.config.seed or 0}
        return {}

    @property
    def own_sorter(self) -> bool:
        """Whether the paper's LLM sorter (``sorter=llm``) orders the events."""
        return self.chosen["sorter"][0] == "llm"

    @property
    def sorter(self) -> DoveSorter:
        """The LLM sorter (the paper's): the target side's, and the source side's with ``sorter=llm``."""
        if self._sorter is None:
            options = (
                self.chosen["sorter"][1]
                if self.own_sorter
                else {"sorter_input": self.opts.sorter_input, "seed": self.config.seed or 0}
            )
            self._sorter = cast(DoveSorter, self.build_stage("sorter", "llm", options))
        return self._sorter

    @property
    def source_sorter(self) -> Sorter:
        """The ``sorter`` stage that orders the verified events by the source (option ``sorter``)."""
        if self._source_sorter is None:
            self._source_sorter = self.sorter if self.own_sorter else cast(Sorter, self._build_own("sorter"))
        return self._source_sorter

    def llm_stages(self) -> dict[str, bool]:
        """The event order's sorters call the model only when the dove aggregator orders events: the LLM sorter
        for the source side (``sorter=llm``) and for the target side (unless ``target_order=decomposition``, or
        the chosen sorter orders both sides)."""
        out = super().llm_stages()
        if self.chosen["aggregator"][0] != "dove":
            out.pop("sorter", None)  # no event order: no sorter is built
        elif self.opts.target_order == "sorter" and self.own_sorter:
            out["sorter:target"] = True
        return out

    def stage_names(self) -> dict[str, str]:
        spec = stage_spec("sorter", self.chosen["sorter"][0])
        return {**super().stage_names(), "sorter": getattr(spec.factory, "label", spec.name)}

    def used_prompts(self) -> list[PromptTemplate]:
        used = [self.prompt(DOVE_DECOMPOSE_PROMPT)] if self.chosen["decomposer"][0] == "dove" else []
        used += self.verifier_prompts()
        if self.own_sorter:
            used.append(self.prompt(DOVE_SORT_PROMPT))
        return used

    def probability_aggregate(self, run: PipelineRun, aggregate: Aggregate) -> Aggregate | str:
        """Eq. 5 with S_E and S_D the mean P(supported) of the judged event and descriptive facts in place of the
        fractions supported; S_EO stays the one judged from the order of the event facts judged supported."""
        if self.aggregator.name != "dove":
            return super().probability_aggregate(run, aggregate)
        sub = aggregate.subscores
        alpha, s_eo = sub.get("alpha"), sub.get("S_EO")
        events = [support_p(v) for v in run.verdicts if v.label != "unscored" and v.claim.kind != "descriptive"]
        descriptive = [support_p(v) for v in run.verdicts if v.label != "unscored" and v.claim.kind == "descriptive"]
        if alpha is None:
            return "DoveScore's alpha is unknown"
        s_e = sum(events) / len(events) if events else None
        s_d = sum(descriptive) / len(descriptive) if descriptive else None
        if s_e is not None and s_eo is None:
            return "the event order (S_EO) was not judged"
        score = (alpha * s_e * s_eo if s_e is not None and s_eo is not None else 0.0) + (
            (1 - alpha) * s_d if s_d is not None else 0.0
        )
        return Aggregate(
            min(1.0, max(0.0, score)),
            {**sub, "S_E_probability": s_e, "S_D_probability": s_d, "label_score": aggregate.score},
        )

    def source_fits(self, source: str, claims: Sequence[Claim]) -> bool:
        """Whether the whole source fits next to the biggest prompt that carries it: the verifier's, and the
        source-side sorter's (which may list every fact)."""
        if not self.uses_llm:
            return True  # no model reads the source: no context window to fit
        reserve = self.verifier.reserve_tokens(claims) if self.chosen_uses_llm("verifier") else 0
        if self.own_sorter:
            reserve = max(reserve, self.sorter.reserve_tokens([c.text for c in claims]))
        return fits_in_context(self.llm, source, reserve_tokens=reserve)

    def stage_collaborators(self, kind: str) -> dict[str, Any]:
        """DoveScore's aggregator gets the event-order step (this method's sorters)."""
        return {"event_order": self.event_order} if kind == "aggregator" else {}

    # -- event order --------------------------------------------------------------------------------------
    async def event_order(self, events: list[Claim], run: PipelineRun) -> OrderOutcome:
        """Sort the verified events by the source and by the target and compare the two orderings; every
        sorter repair is recorded in ``details["order"]``."""
        info: dict[str, Any] = {"verified_events": [c.id for c in events]}
        run.details["order"] = info
        if len(events) < 2:
            info["note"] = "fewer than two verified events: no pair can be out of order (ShuffleD = 0)"
            return OrderOutcome(shuffle_degree=0.0)
        by_source = await self.sort_by_source(events, run)
        if by_source.value is None:
            return OrderOutcome(error=by_source.error)
        info.update(by_source.value.notes)
        if self.opts.target_order == "sorter":
            sorter_name = self.chosen["sorter"][0]
            if sorter_name == "position":
                by_target = StepResult.success(target_position_order(events))
            else:  # the paper's LLM sorter, or a chosen sorter on the target too
                by_target = await (self.sorter if self.own_sorter else self.source_sorter)(
                    [c.text for c in events], run.target, about=run.source
                )
            if by_target.value is None:
                return OrderOutcome(error=by_target.error)
            target_sequence = by_target.value.order
            info["target_sorter"] = by_target.value.repairs(events)
        else:
            target_sequence = list(range(len(events)))  # the decomposer's listing order
        source_order: EventOrder = by_source.value
        info["source_sorter"] = source_order.repairs(events)
        judged = judge_order(events, source_order.order, target_sequence)
        info["source_order"] = [events[i].id for i in source_order.order]
        info["target_order"] = [events[i].id for i in target_sequence]
        info["compared_events"] = placed = len(set(source_order.order) & set(target_sequence))
        if judged is None:
            return OrderOutcome(
                error=f"the sorter placed only {placed} of {len(events)} verified events in both "
                "orderings; event order cannot be judged"
            )
        return OrderOutcome(shuffle_degree=judged.shuffle_degree, findings=judged.findings)

    async def sort_by_source(self, events: list[Claim], run: PipelineRun) -> StepResult[EventOrder]:
        texts = [c.text for c in events]
        if not self.own_sorter:  # a sorter that reads the whole source itself (position, a plugin's)
            return await self.source_sorter(texts, run.source, about=run.source)
        text = await self.sorting_text(events, run)
        if text is None:
            return StepResult.failure(
                "the source excerpts about the verified events do not fit the model's "
                "context window, so their order cannot be judged"
            )
        return await self.sorter(texts, text, about=run.source)

    async def sorting_text(self, events: list[Claim], run: PipelineRun) -> str | None:
        """What the source-side sorter reads: the whole source, or with retrieval the snippets retrieved for the
        verified events, merged and in source order (so the sorter sees the source's chronology of exactly
        these events); narrower retrieval (top 1, no window) if that does not fit; None if nothing fits."""
        if run.selection.mode == "full":
            return run.source
        index = await self.source_index(run.source)
        texts = [c.text for c in events]
        reserve = self.sorter.reserve_tokens(texts)
        for wide in (True, False):
            top_k, window = (self.opts.top_k, self.opts.window) if wide else (1, 0)
            if wide:  # the snippets the facts were checked against
                indices = {
                    i for c in events for ctx in run.selection.contexts.get(c.id or "", []) for i in ctx.sentences
                }
            else:
                narrow = await asyncio.to_thread(index.retrieve_many, texts, top_k, window)
                indices = {i for snips in narrow for s in snips for i in s.sentence_indices}
            runs = _consecutive_runs(sorted(indices))
            excerpt = "\n[...]\n".join(index.snippet(r[0], r[-1]).text for r in runs)
            if excerpt and fits_in_context(self.llm, excerpt, reserve_tokens=reserve):
                run.details["context"].update(
                    {"sorter_excerpts": len(runs), "sorter_top_k": top_k, "sorter_window": window}
                )
                return excerpt
        return None

    async def source_index(self, source: str) -> SourceIndex:
        """The source's retrieval index (the one the retrieval stage uses; built once per source)."""
        return cast(SourceIndex, await shared_source_index(source, self.opts))


def _consecutive_runs(indices: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs
