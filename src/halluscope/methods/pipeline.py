"""The claim pipeline: the composition that ``dove``, ``dcr``, ``factscore`` and ``probe`` share.

    target --decomposer--> claims --context selector--> whole source | K snippets per claim
           --verifier--> verdicts --aggregator--> score --localizer--> findings

:class:`ClaimPipeline` runs it. A method supplies its decomposer and its own verifier (registered as a
stage, so another method's verifier can be swapped in with ``-o verifier=NAME``), and overrides
:meth:`ClaimPipeline.aggregate` / :meth:`ClaimPipeline.localize` / :meth:`ClaimPipeline.finish` only for what
is its own (DoveScore's event order, DCR's AMC, FActScore's de-duplication, PROBE's step record). What the stages
record during a check travels in one :class:`~halluscope.stages.trace.RunTrace` that the pipeline passes along.

The one retrieval protocol (long-document stress-test paper §3.2, Eq. 1-2), shared by every claim method through
:class:`~halluscope.stages.context.RetrievalSelector` and :func:`~halluscope.stages.snippets.max_over_snippets`: with
``retrieval=auto`` the whole source is used when the verifier's prompt fits the model's context window (else
retrieval, also after a :class:`ContextOverflowError`); per claim the top-K source sentences each widened to 2w+1
sentences; the claim is verified against each snippet, best first, and keeps its best verdict (supported >
contradicted > unsupported; stopping at the first supporting snippet, since the max cannot rise); the score averages
over claims. The Report's ``details["context"]`` says which path ran, why, and the snippets each claim was checked
against.

The stages the pipeline composes by default are the shared ones of :mod:`halluscope.stages`, one module per kind:
``decomposers``, ``context``, ``verifiers`` (the base of the LLM verifiers), ``snippets`` (the max over snippets),
``verdicts`` (the default aggregator and localizer).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any, ClassVar, cast

from halluscope.config import Config
from halluscope.llm import LLM, ContextOverflowError
from halluscope.methods.base import Method
from halluscope.methods.details import MethodDetails, PipelineDetails
from halluscope.methods.gate import gate_verdict
from halluscope.options import ClaimOptions, OptionsError, StageOptions, own_options
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Finding, Report, Verdict
from halluscope.retrieval.stage import fits_in_context
from halluscope.stages import (
    Aggregate,
    Aggregator,
    Context,
    ContextSelector,
    Decomposer,
    Gate,
    GateDecision,
    Localizer,
    Selection,
    Verifier,
    build_stage,
    stage_options,
    stage_spec,
)
from halluscope.stages.context import claim_id
from halluscope.stages.protocols import PipelineRun
from halluscope.stages.snippets import max_over_snippets
from halluscope.stages.trace import RunTrace, bind_trace
from halluscope.tracing import stage_span

SHARED_KINDS = ("decomposer", "context_selector", "verifier", "aggregator", "localizer")
"""The stage kinds every claim method builds one of, each chosen by the option of its kind's name."""
SWAPPABLE = (*SHARED_KINDS, "gate")  # the stage kinds every claim method lets the user choose
SHARED_OPTION_STAGES = ("verdict_first", "fused")
"""Stages whose options every claim method declares as its own (``explain_below``, ``explain``, ``explain_max``):
they get the method's values however they are chosen (``order=verdict_first`` or ``verifier=verdict_first``)."""
METHOD_KINDS = ("sorter", "evidence_finder", "deduplicator")
"""Kinds only some claim methods build (DoveScore's sorter, PROBE's evidence finder, FActScore's de-duplicator):
a method lists those it builds in ``extra_kinds``."""


def stage_uses_llm(kind: str, name: str, options: Any = None) -> bool:
    """Whether the named stage calls an LLM with these options: its class's ``needs_llm(options)`` when it has one
    (a stage whose options decide, e.g. FActScore's localizer and its de-duplicator), else its ``uses_llm``
    (True when it declares none: a stage is assumed to call the model unless it says otherwise)."""
    spec = stage_spec(kind, name)
    decide = getattr(spec.factory, "needs_llm", None)
    if callable(decide):
        return bool(decide(stage_options(kind, name, options)))
    return bool(getattr(spec.factory, "uses_llm", True))


def split_namespaced(
    method: str, options: dict[str, Any], kinds: Sequence[str] = SWAPPABLE
) -> dict[str, dict[str, Any]]:
    """Take the namespaced options (``verifier.judges``, ``gate.top_k``) out of ``options``, grouped by stage
    kind; a namespace that is not one of ``kinds`` (the method's stage kinds) is an :class:`OptionsError`."""
    out: dict[str, dict[str, Any]] = {}
    for key in [k for k in options if "." in k]:
        kind, _, option = key.partition(".")
        if kind in METHOD_KINDS and kind not in kinds:
            raise OptionsError(_not_built(method, kind, kinds))
        if kind not in kinds or not option:
            raise OptionsError(
                f"unknown option {key!r} for {method}: a stage's options are named "
                f"{' or '.join(f'{k}.OPTION' for k in kinds)}"
            )
        out.setdefault(kind, {})[option] = options.pop(key)
    return out


def _not_built(method: str, kind: str, kinds: Sequence[str]) -> str:
    return (
        f"{method} builds no {kind} stage, so it cannot take one; its stage kinds: {', '.join(kinds)} (each "
        f"chosen with -o KIND=NAME)"
    )


class ClaimPipeline(Method):
    """Base of the claim methods. Subclasses set ``default_verifier`` (a registered verifier name), may set
    ``default_decomposer`` / ``default_aggregator`` / ``default_localizer`` (registered names; or override
    :meth:`default_stage`), or implement :meth:`make_decomposer` themselves; they may override :meth:`finish`.

    Every stage kind is chosen by the option of its kind's name (``decomposer=NAME``, ``context_selector=NAME``,
    ``verifier=NAME``, ``aggregator=NAME``, ``localizer=NAME``, ``gate=NAME``, and those of ``extra_kinds``:
    DoveScore's ``sorter``, PROBE's ``evidence_finder``, FActScore's ``deduplicator``) and takes its own options
    namespaced (``verifier.batch_size=3``), validated by the chosen stage's ``Options``. A stage chosen in place of
    the method's own gets only those; the method's own stage also gets the method's values of the options it
    declares (``-o batch_size=4``), the namespaced ones winning.

    Whether the method needs a model follows from the stages it builds (:attr:`uses_llm`, per instance): a
    composition in which no stage calls an LLM runs with no model configured."""

    Options: ClassVar[type[ClaimOptions]] = ClaimOptions
    Details: ClassVar[type[MethodDetails]] = PipelineDetails
    default_verifier: ClassVar[str]
    default_context_selector: ClassVar[str] = "retrieval"
    default_aggregator: ClassVar[str] = "supported_fraction"
    default_localizer: ClassVar[str] = "claims"
    extra_kinds: ClassVar[tuple[str, ...]] = ()
    """The method's own stage kinds beyond the shared ones (from :data:`METHOD_KINDS`)."""
    probability_threshold: ClassVar[float | None] = 0.5
    """P(supported) = 0.5 is where a claim turns from supported to flagged (``explain_below``'s default), so a
    probability score under 0.5 means the claims lean unsupported on average; ``score=label`` keeps the paper's
    ``default_threshold`` (:meth:`Method.default_threshold_for`)."""

    def __init__(self, llm: LLM | None = None, config: Config | None = None, **options: Any):
        kinds = self.stage_kinds()
        for kind in METHOD_KINDS:
            if kind not in kinds and kind in options and kind not in self.Options.model_fields:
                raise OptionsError(_not_built(self.name, kind, kinds))
        namespaced = split_namespaced(self.name, options, kinds)
        self._refuse_misplaced(options)
        super().__init__(llm, config, **options)
        self.stage_given = {kind: dict(values) for kind, values in namespaced.items()}
        for kind, values in namespaced.items():
            if not getattr(self.opts, kind, None):
                raise OptionsError(
                    f"{', '.join(f'{kind}.{k}' for k in values)} given for {self.name}, but no {kind} "
                    f"is chosen: add -o {kind}=NAME (see `halluscope stages {kind}`)"
                )
        self.chosen: dict[str, tuple[str, StageOptions]] = {}  # kind -> (stage name, its validated options)
        for kind in kinds:
            if kind == "gate":
                continue
            name = self.chosen_name(kind)
            if name is None:  # a subclass that builds this stage itself (its own make_decomposer)
                continue
            fields = stage_spec(kind, name).options_model.model_fields  # fails early on a bad name
            shared = name == self.default_stage(kind) or name.partition(":")[0] in SHARED_OPTION_STAGES
            own = self.own_stage_options(kind, name) if shared else {}
            own.update({k: v for k, v in self.method_stage_options(kind, name).items() if k in fields})
            self.chosen[kind] = (
                name,
                stage_options(kind, name, {**own, **namespaced.get(kind, {})}),
            )  # bad options fail here
        self.verifier_name, self.verifier_options = self.chosen["verifier"]
        self._verifier: Verifier | None = None
        self._aggregator: Aggregator | None = None
        self._localizer: Localizer | None = None
        self._selector: ContextSelector | None = None
        self._decomposer: Decomposer | None = None
        gate_name = getattr(self.opts, "gate", None)
        self.gate_options = stage_options("gate", gate_name, namespaced.get("gate", {})) if gate_name else None
        self.uses_llm = any(self.llm_stages().values())  # type: ignore[misc]  # per instance: its composition's
        self.gate: Gate | None = self.build_stage("gate", gate_name, self.gate_options) if gate_name else None

    @classmethod
    def stage_kinds(cls) -> tuple[str, ...]:
        """The stage kinds this method builds, each chosen by the option of its name."""
        return (*SWAPPABLE, *cls.extra_kinds)

    def default_stage(self, kind: str) -> str | None:
        """The name of the method's own stage of ``kind`` (the paper's), given its options; None when the method
        names none (a subclass that builds that stage itself). ``order=verdict_first`` makes the verdict-first
        verifier the method's own (``-o verifier=NAME`` still replaces it, as it replaces the paper's)."""
        if kind == "verifier" and getattr(self.opts, "order", None) == "verdict_first":
            return "verdict_first"
        return getattr(self, f"default_{kind}", None)

    def chosen_name(self, kind: str) -> str | None:
        """The stage of ``kind`` this instance builds: the one its option names, else the method's own. (A paper's
        own name for the choice, DCR's ``level``, was translated into the kind's option when the options were
        parsed: :class:`~halluscope.options.StageAlias`.)"""
        given = getattr(self.opts, kind, None) if kind in self.Options.model_fields else None
        return str(given) if given else self.default_stage(kind)

    def own_stage_options(self, kind: str, name: str) -> dict[str, Any]:
        """The options the method gives its own stage of ``kind``: its values of the options the stage declares."""
        return own_options(stage_spec(kind, name).options_model, self.opts)

    def method_stage_options(self, kind: str, name: str) -> dict[str, Any]:
        """Options the method sets on whichever stage of ``kind`` it builds, under the namespaced ones (none by
        default; DoveScore's ``sentences`` decomposer makes event facts, its sorter gets the run's seed). Only those
        the chosen stage declares are given."""
        return {}

    def llm_stages(self) -> dict[str, bool]:
        """Per stage this instance builds (``kind`` or ``kind:name``), whether it calls an LLM. A stage the
        method builds itself (a subclass's own ``make_decomposer``) is assumed to."""
        out = {kind: stage_uses_llm(kind, name, options) for kind, (name, options) in self.chosen.items()}
        if "decomposer" not in self.chosen:
            out["decomposer"] = True
        if self.gate_options is not None:
            out["gate"] = stage_uses_llm("gate", self.opts.gate, self.gate_options)  # type: ignore[attr-defined]
        return out

    def chosen_uses_llm(self, kind: str) -> bool:
        """Whether the chosen stage of ``kind`` calls an LLM."""
        name, options = self.chosen[kind]
        return stage_uses_llm(kind, name, options)

    def _refuse_misplaced(self, options: dict[str, Any]) -> None:
        """A flat option the method lacks but its chosen verifier or gate has: say how to give it (namespaced)."""
        for kind in self.stage_kinds():
            chosen = options.get(kind)
            if not isinstance(chosen, str) or not chosen:
                continue
            try:
                fields = stage_spec(kind, chosen).options_model.model_fields
            except OptionsError:
                continue  # a bad name: refused where it is resolved
            misplaced = [k for k in options if k not in self.Options.model_fields and k in fields]
            if misplaced:
                raise OptionsError(
                    f"{', '.join(misplaced)}: an option of the {kind} {chosen!r}, not of {self.name}; "
                    f"give it as {', '.join(f'{kind}.{k}' for k in misplaced)}"
                )

    def options(self) -> dict[str, Any]:
        """The method's options, and the namespaced stage options given (``verifier.judges``), as validated."""
        chosen = {**{kind: opts for kind, (_, opts) in self.chosen.items()}, "gate": self.gate_options}
        own = super().options()
        for kind in ("aggregator", "localizer", "decomposer", "context_selector", *METHOD_KINDS):
            if own.get(kind) is None:  # recorded only when chosen: default records (and the identity of bench
                own.pop(kind, None)  # folders measured before) stay what they were
        fields = self.Options.model_fields
        for key in (
            "order",
            "explain_below",
            "explain",
            "explain_max",
            "min_label_mass",
            "verify_fix",
            "relation_candidates",
            "fact_max",
            "fact_decomposer",
            "reason_from_evidence",
            "score",
        ):
            if key in own and own[key] == fields[key].default:  # the default: recorded only when changed
                own.pop(key)
        return {
            **own,
            **{
                f"{kind}.{k}": chosen[kind].model_dump(mode="json")[k]  # type: ignore[union-attr]
                for kind, values in self.stage_given.items()
                for k in values
            },
        }

    def build_stage(self, kind: str, name: str, options: Any = None, **collaborators: Any) -> Any:
        """The named stage built for this method: with its LLM (when the stage calls one: ``uses_llm``), its
        prompt overrides, ``named_llm`` and ``fits``, and this method's ``verifier`` when its constructor names
        one (a localizer that words findings from its own verifier's reasons); ``options`` None gives the stage
        the method's values of the options it declares too (the method's flat options serve its own stages).
        ``collaborators`` add to (or replace) those."""
        spec = stage_spec(kind, name)
        if options is None:
            options = own_options(spec.options_model, self.opts)
        model = self.llm if stage_uses_llm(kind, name, options) else None
        given: dict[str, Any] = {"prompts": self.prompt, "named_llm": self.named_llm, "fits": self.source_fits}
        factory = getattr(spec.factory, "from_options", spec.factory)
        if kind != "verifier" and "verifier" in inspect.signature(factory).parameters:
            given["verifier"] = self.verifier
        return build_stage(kind, name, model, options, **{**given, **collaborators})

    def stage_collaborators(self, kind: str) -> dict[str, Any]:
        """The collaborators this method gives its own ``kind`` stage besides the usual ones (none by default;
        DoveScore's aggregator gets the event-order step, FActScore's localizer its de-duplicator)."""
        return {}

    # -- stages -------------------------------------------------------------------------------------------
    def make_decomposer(self) -> Decomposer:
        """The chosen decomposer (the method's own unless ``-o decomposer=NAME``), built once."""
        if "decomposer" not in self.chosen:
            raise NotImplementedError(f"{type(self).__name__} names no default_decomposer and builds none")
        if self._decomposer is None:
            self._decomposer = self._build_own("decomposer")
        return self._decomposer

    @property
    def verifier(self) -> Verifier:
        if self._verifier is None:
            self._verifier = self._build_own("verifier")
        return self._verifier

    @property
    def aggregator(self) -> Aggregator:
        if self._aggregator is None:
            self._aggregator = self._build_own("aggregator")
        return self._aggregator

    @property
    def localizer(self) -> Localizer:
        if self._localizer is None:
            self._localizer = self._build_own("localizer")
        return self._localizer

    def _build_own(self, kind: str) -> Any:
        """The chosen stage of ``kind`` (the method's own unless ``-o KIND=NAME``), with its options."""
        name, options = self.chosen[kind]
        extra = self.stage_collaborators(kind) if name == self.default_stage(kind) else {}
        return self.build_stage(kind, name, options, **extra)

    @property
    def selector(self) -> ContextSelector:
        if self._selector is None:
            self._selector = self._build_own("context_selector")
        return self._selector

    def used_prompts(self) -> list[PromptTemplate]:
        prompts = super().used_prompts()
        prompts += [p for p in self.verifier_prompts() if p.name not in {q.name for q in prompts}]
        return prompts

    def verifier_prompts(self) -> list[PromptTemplate]:
        """The prompts the chosen verifier says it sends (none when it lists none, e.g. an encoder checker)."""
        listed = getattr(self.verifier, "used_prompts", None)
        return list(listed()) if callable(listed) else []

    def stage_names(self) -> dict[str, str]:
        return {
            "decomposer": self.make_decomposer().name,
            "context_selector": self.selector.name,
            "verifier": self.verifier.name,
        }

    def source_fits(self, source: str, claims: Sequence[Claim]) -> bool:
        """Whether the verifier's prompt with the whole source fits the model's context window (True when the
        window is unknown: a ContextOverflowError then switches to retrieval)."""
        own = getattr(self.verifier, "source_fits", None)
        if callable(own):  # a verifier that windows the source itself (the encoder checkers)
            return bool(own(source, claims))
        if not self.chosen_uses_llm("verifier"):
            return True  # no model reads the source: no context window to fit
        return fits_in_context(self.llm, source, reserve_tokens=lambda: self.verifier.reserve_tokens(claims))

    # -- steps --------------------------------------------------------------------------------------------
    async def verify(
        self,
        claims: list[Claim],
        selection: Selection,
        source: str,
    ) -> tuple[list[Verdict], dict[str, Any]]:
        """Verdicts in claim order; in retrieval mode also the labels per tried snippet (for details). A verifier
        that takes the whole selection (``verify_selection``, e.g. verdict first) is given it."""
        whole = getattr(self.verifier, "verify_selection", None)
        if callable(whole):
            return cast(tuple[list[Verdict], dict[str, Any]], await whole(claims, selection, source))
        if selection.mode == "full":
            context = next(iter(selection.contexts.values()))[0]
            return list(await self.verifier(claims, context, source)), {}
        return await max_over_snippets(claims, selection.contexts, lambda pairs: self.judge_round(pairs, source))

    async def judge_round(self, pairs: Sequence[tuple[Claim, Context]], source: str) -> list[Verdict]:
        """One round of the retrieval protocol: each (claim, snippet) pair judged, one verifier call per pair.
        A method whose verifier can share calls across the pairs of a round overrides this (DCR)."""

        async def one(claim: Claim, ctx: Context) -> Verdict:
            (verdict,) = await self.verifier([claim], ctx, source)
            return verdict

        return list(await asyncio.gather(*(one(c, ctx) for c, ctx in pairs)))

    async def evaluate(self, source: str, target: str, trace: RunTrace | None = None) -> PipelineRun | Report:
        """Decompose, select contexts, verify. Returns an unscored Report when there is nothing to verify.
        ``trace`` (a new one when None) goes to the stages: the decomposer through ``with_trace``, the verifier on
        each context."""
        trace = trace if trace is not None else RunTrace()
        details: dict[str, Any] = PipelineDetails.build(stages=self.stage_names())
        decomposer = bind_trace(self.make_decomposer(), trace)
        with stage_span("decomposer", decomposer.name):
            decomposed = await decomposer(target)
        if not decomposed.ok:
            return Report(
                method=self.name, unscored_reason=f"decomposition failed: {decomposed.error}", details=details
            )
        claims = _with_ids(decomposed.value or [])
        if not claims:
            return Report(
                method=self.name, unscored_reason="the decomposer found no claims in the target", details=details
            )
        settled: dict[str, Verdict] = {}
        if self.gate is not None:  # cascade: the claims the gate settles skip the verifier
            with stage_span("gate", self.gate.name):
                decisions = await self.gate(claims, source, target)
            settled = {claim_id(d.claim): gate_verdict(d, self.gate.name) for d in decisions if d.settled}
            details.update(PipelineDetails.build(gate=gate_details(self.gate.name, decisions)))
        rest = [c for c in claims if claim_id(c) not in settled]
        with stage_span("context_selector", self.selector.name):
            selection = (await self.selector(source, claims)).with_trace(trace)
        tried: dict[str, Any] = {}  # per claim, the label on each snippet tried
        verdicts: list[Verdict] = []
        if rest:
            try:
                with stage_span("verifier", self.verifier.name):
                    verdicts, tried = await self.verify(rest, selection, source)
            except ContextOverflowError as exc:
                retrieval = self.opts.retrieval  # type: ignore[attr-defined]
                if selection.mode != "full" or retrieval != "auto" or not hasattr(self.selector, "retrieve"):
                    raise  # a context selector of a plugin's has no retrieval to fall back on
                with stage_span("context_selector", self.selector.name):
                    selection = (
                        await self.selector.retrieve(source, claims, f"the model reported a context overflow: {exc}")
                    ).with_trace(trace)
                with stage_span("verifier", self.verifier.name):
                    verdicts, tried = await self.verify(rest, selection, source)
        decided_by = f"verifier:{self.verifier.name}"
        verified = {
            claim_id(v.claim): v if v.decided_by else v.model_copy(update={"decided_by": decided_by}) for v in verdicts
        }
        verdicts = [settled.get(claim_id(c)) or verified[claim_id(c)] for c in claims]
        verdict_first = tried.pop("verdict_first", None)
        details.update(PipelineDetails.build(context={**selection.describe(), **tried}))
        if verdict_first is not None:
            details.update(PipelineDetails.build(verdict_first=verdict_first))
        return PipelineRun(source, target, claims, selection, verdicts, details, trace)

    async def aggregate(self, run: PipelineRun) -> Aggregate:
        """The chosen aggregator's score of the run (default: the fraction of judged claims supported)."""
        with stage_span("aggregator", self.aggregator.name):
            return await self.aggregator(run)

    async def localize(self, run: PipelineRun) -> list[Finding]:
        """The chosen localizer's findings (default: one per unsupported or contradicted claim)."""
        with stage_span("localizer", self.localizer.name):
            return await self.localizer(run)

    async def run(self, source: str, target: str) -> Report:
        trace = RunTrace()
        run = await self.evaluate(source, target, trace)
        if isinstance(run, Report):
            return self.finish(run, trace)
        aggregate = self.choose_score(run, await self.aggregate(run))
        findings = await self.localize(run)
        return self.finish(
            Report(
                method=self.name,
                score=aggregate.score,
                unscored_reason=aggregate.unscored_reason,
                subscores=aggregate.subscores,
                claims=run.claims,
                verdicts=run.verdicts,
                findings=findings,
                details=run.details,
            ),
            trace,
        )

    def choose_score(self, run: PipelineRun, aggregate: Aggregate) -> Aggregate:
        """The score the Report carries, by option ``score``: the label aggregate as it is, or its probability
        variant (:meth:`probability_aggregate`), recorded in ``details["score"]``."""
        mode = self.opts.score  # type: ignore[attr-defined]
        judged = [v for v in run.verdicts if v.label != "unscored"]
        with_p = [v for v in judged if v.support_probability is not None]
        info: dict[str, Any] = {
            "kind": "label",
            "requested": mode,
            "judged": len(judged),
            "with_probability": len(with_p),
            "label_score": aggregate.score,
        }
        run.details["score"] = info
        if aggregate.score is None or mode == "label":
            if mode == "label":
                info["why"] = "score=label: the paper's score from the verdicts' labels"
            return aggregate
        if not with_p:
            info["why"] = (
                "no verdict carries a probability: the backend returned no token log-probabilities"
                if judged
                else "no judged verdict"
            )
            if mode == "probability":
                return Aggregate(None, aggregate.subscores, f"score=probability, but {info['why']}")
            return aggregate
        if mode == "auto" and len(with_p) < len(judged):
            info["why"] = (
                f"{len(judged) - len(with_p)} of {len(judged)} judged verdicts carry no probability: the "
                "label score (score=probability counts their labels as 0/1)"
            )
            return aggregate
        variant = self.probability_aggregate(run, aggregate)
        if isinstance(variant, str):
            info["why"] = variant
            if mode == "probability":
                return Aggregate(None, aggregate.subscores, f"score=probability, but {variant}")
            return aggregate
        info.update(kind="probability", probability_score=variant.score)
        if len(with_p) < len(judged):
            info["why"] = f"{len(judged) - len(with_p)} judged verdicts without a probability count their label as 0/1"
        return variant

    def probability_aggregate(self, run: PipelineRun, aggregate: Aggregate) -> Aggregate | str:
        """The probability variant of the score (the aggregator's formula with P(supported) in place of 0/1
        labels), or why there is none. Default: the mean P(supported) of the judged claims, for the aggregators
        that average labels (``supported_fraction``, ``probe``); a method with its own formula overrides this."""
        name = self.aggregator.name
        if name not in ("supported_fraction", "probe"):
            return f"the aggregator {name!r} has no probability variant"
        probs = [support_p(v) for v in run.verdicts if v.label != "unscored"]
        return Aggregate(sum(probs) / len(probs), {**aggregate.subscores, "label_score": aggregate.score})

    def finish(self, report: Report, trace: RunTrace) -> Report:
        """The check's Report with what the method adds from the check's trace (also to an early, unscored
        Report). Default: the Report as it is."""
        return report


def support_p(verdict: Verdict) -> float:
    """A judged verdict's P(supported): its probability, else its label as 0/1 (for score=probability with a
    verdict no model gave a probability for, e.g. one a gate settled)."""
    if verdict.support_probability is not None:
        return verdict.support_probability
    return 1.0 if verdict.label == "supported" else 0.0


def gate_details(gate_name: str, decisions: Sequence[GateDecision]) -> dict[str, Any]:
    """``details["gate"]``: how many claims the gate settled (and how), and which went on to the verifier."""
    outcomes = {claim_id(d.claim): d.outcome for d in decisions}
    counts = {k: sum(o == k for o in outcomes.values()) for k in ("supported", "unsupported", "contradicted")}
    return {
        "stage": gate_name,
        "settled": sum(counts.values()),
        **counts,
        "sent_to_verifier": [cid for cid, o in outcomes.items() if o == "uncertain"],
        "outcomes": outcomes,
    }


def _with_ids(claims: list[Claim]) -> list[Claim]:
    seen: set[str] = set()
    out = []
    for i, claim in enumerate(claims):
        cid = claim.id if claim.id and claim.id not in seen else f"c{i + 1}"
        while cid in seen:
            cid += "_"
        seen.add(cid)
        out.append(claim if cid == claim.id else claim.model_copy(update={"id": cid}))
    return out
