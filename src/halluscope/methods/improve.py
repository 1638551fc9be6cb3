"""``improve``: the reason-assisted improver (RAI) of DCR (DCR paper, §3.3, Algorithm 1, App. F-G).

The one way to run RAI. It composes an evaluator -- DCR (:mod:`halluscope.methods.dcr`, same options, same
verifier, also a swapped one) by default, or any method that yields findings (``evaluator=NAME``; see
docs/dcr.md) -- with up to ``rounds`` rounds of rewriting. Each round: the sentences DCR judged
inconsistent are rewritten by the LLM, using DCR's reason for each (another evaluator: the findings pointing
into it) and the source; sentences judged
consistent are never touched (their text is kept byte for byte). The rewritten text is then evaluated again
by the same DCR pipeline. Rounds stop when the text is consistent (the paper's score == 1 with a label score;
with a probability score every sentence judged supported at or above the threshold), after ``rounds`` rounds, or
when a rewrite cannot be used (unusable reply, empty, or unchanged).

Nothing is returned as a fix unless it was re-verified: ``details["improved_target"]`` is the best-scoring
re-evaluated text, and it differs from the original only if its verified score is strictly higher than the
original's (ties go to the earlier text). Scores are DCR's, with its ``amc_weights``: under the default
(``paper``, alpha = beta = 0 over all sentences) a text with a sentence DCR could not mark has no score, so the
rounds stop there (the original) or that rewrite is not a candidate (a later round), with the reason recorded;
``amc_weights=auto`` scores such texts on their judged sentences. The Report itself (score, verdicts, findings) is about
the target that was given; ``subscores["final_score"]`` is the score of ``improved_target``.

``details`` holds: ``rounds`` (one :class:`ImprovementRound` per evaluated text, round 0 = the original),
``improved_target``, ``improved`` (bool), ``best_round``, ``stop_reason`` and ``diff`` (a unified diff with
one sentence per line, original vs improved). With ``level="paragraph"`` the whole text is rewritten at once.

Strict replies: a sentence rewrite is ``{"rewrites": [{"id": <n>, "improved_sentence": "..."}]}`` (ids are
JSON integers; rewrites of sentences that were not flagged are ignored and listed; echoed placeholders are
not rewrites; ``""`` deletes the sentence); a paragraph rewrite is ``{"improved_text": "..."}``, not empty.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from halluscope.config import Config
from halluscope.llm import LLM
from halluscope.llm.structured import generate_reply
from halluscope.methods import method_class, register_method
from halluscope.methods.base import Method
from halluscope.methods.dcr import DCR, DCR_PROMPTS, DcrDetails, DcrOptions, Level
from halluscope.methods.details import MethodDetails
from halluscope.methods.pipeline import support_p
from halluscope.methods.rai import (
    RAI_PARAGRAPH_PROMPT,
    RAI_PROMPTS,
    RAI_SENTENCE_PROMPT,
    ImprovedTextReply,
    RewritesReply,
    parse_rai_paragraph,
    parse_rai_sentences,
    sentence_diff,
    splice,
)
from halluscope.options import MethodOptions
from halluscope.prompts import PromptTemplate
from halluscope.records import Report, Span, Verdict
from halluscope.text import split_sentences
from halluscope.text.markup import clean_report

# ------------------------------------------------------------------------------------------------ records


class SentenceChange(BaseModel):
    """One rewritten sentence. ``sentence`` is its 1-based number in the text the round started from."""

    model_config = ConfigDict(extra="forbid")

    sentence: int
    before: str
    after: str  # "" = deleted
    reason: str  # DCR's reason for flagging it


class ImprovementRound(BaseModel):
    """One evaluated text. Round 0 is the original target; round r > 0 is the rewrite made in round r."""

    model_config = ConfigDict(extra="forbid")

    round: int
    text: str
    score: float | None
    consistent: bool
    inconsistent_sentences: list[int] = Field(default_factory=list)  # 1-based, in this round's text
    unscored_reason: str | None = None
    changes: list[SentenceChange] = Field(default_factory=list)  # the edits that produced ``text``
    rewrite_error: str | None = None  # why the rewrite of this round's flagged sentences could not be used
    ignored_rewrites: list[int] = Field(default_factory=list)  # ids the model rewrote that were not flagged


# ------------------------------------------------------------------------------------------------ units


@dataclass(frozen=True)
class Unit:
    """One rewritable piece of an evaluated text: its words and where they are, and the evaluator's reason when
    it flagged them (None: not flagged, never touched)."""

    text: str
    span: Span
    reason: str | None = None


def judged_by_verdicts(report: Report) -> bool:
    """Whether the report's verdicts are its units: each about one stretch of the text, a sentence or the
    paragraph (dcr, and any claim method that judges sentences)."""
    return bool(report.verdicts) and all(
        v.claim.kind in ("sentence", "paragraph") and len(v.claim.target_spans) == 1 for v in report.verdicts
    )


def units_of(report: Report, text: str) -> list[Unit]:
    """The evaluator's units of ``text``: its verdicts when each is about one stretch of the text (a sentence or
    the paragraph: dcr, and any claim method that judges sentences), flagged when judged unsupported or
    contradicted, with the verdict's reason; else the text's sentences, flagged when a finding points into them,
    with those findings' descriptions as the reason."""
    verdicts = report.verdicts
    if judged_by_verdicts(report):
        return [
            Unit(
                v.claim.text, v.claim.target_spans[0], v.reason if v.label in ("unsupported", "contradicted") else None
            )
            for v in verdicts
        ]
    units = []
    for sentence in split_sentences(text):
        about = [f.description for f in report.findings if any(sp.overlaps(sentence.span) for sp in f.target_spans)]
        units.append(Unit(sentence.text, sentence.span, " ".join(dict.fromkeys(about)) or None))
    return units


# ------------------------------------------------------------------------------------------------ loop


@dataclass(frozen=True)
class Evaluated:
    """One text and the evaluator's Report on it (the given target, or a rewrite)."""

    text: str
    report: Report
    threshold: float = 1.0
    """The evaluator's threshold: with findings-only units, a text is consistent when it has no finding and a
    score at or above it."""

    @property
    def verdicts(self) -> list[Verdict]:
        return self.report.verdicts

    @property
    def units(self) -> list[Unit]:
        return units_of(self.report, self.text)

    @property
    def score(self) -> float | None:
        return self.report.score

    @property
    def by_probability(self) -> bool:
        """Whether the evaluator scored this text from its verdicts' probabilities (``score=auto|probability``
        with a backend that gives token log-probabilities), not from their labels."""
        return (self.report.details.get("score") or {}).get("kind") == "probability"

    @property
    def consistent(self) -> bool:
        """Every unit judged, and judged consistent: with a label score the paper's score == 1; with a probability
        score every unit judged supported with P(supported) at or above the threshold (a probability score stays
        below 1). For an evaluator judged by findings only: no finding, and a score at or above its threshold."""
        if judged_by_verdicts(self.report):
            if self.by_probability:
                return self.score is not None and all(
                    v.label == "supported" and support_p(v) >= self.threshold for v in self.verdicts
                )
            return self.score == 1.0 and all(v.label == "supported" for v in self.verdicts)
        return self.score is not None and self.score >= self.threshold and not self.report.findings

    @property
    def flagged(self) -> list[int]:
        """Indices of the units judged inconsistent."""
        return [i for i, u in enumerate(self.units) if u.reason is not None]

    def round(
        self, number: int, changes: Sequence[SentenceChange] = (), ignored: Sequence[int] = ()
    ) -> ImprovementRound:
        return ImprovementRound(
            round=number,
            text=self.text,
            score=self.score,
            consistent=self.consistent,
            inconsistent_sentences=[i + 1 for i in self.flagged],
            unscored_reason=self.report.unscored_reason,
            changes=list(changes),
            ignored_rewrites=list(ignored),
        )


@dataclass
class Rewrite:
    """A rewrite of one round: the new text, or the reason there is none."""

    text: str | None = None
    changes: list[SentenceChange] = field(default_factory=list)
    ignored: list[int] = field(default_factory=list)
    error: str | None = None


DEFAULT_EVALUATOR = "dcr"


class ImproveOptions(DcrOptions):
    """RAI's rounds and its evaluator. With ``evaluator=dcr`` (the default, the paper) every DCR option applies to
    the evaluation, as listed here; with another evaluator the options other than ``rounds``, ``level``,
    ``evaluator`` and ``evaluator_options`` are that evaluator's (they end up in ``evaluator_options``)."""

    stage_aliases = {}  # level is improve's own option here (below), not an alias of DCR's decomposer

    level: Level = "sentence"
    """sentence: the flagged sentences are rewritten, each judged with its own reason (the paper's DCE); paragraph: the
    whole text at once (needs the whole source). With evaluator=dcr it also chooses DCR's decomposer, as DCR's own
    level does (sentences or paragraph)."""

    rounds: int = Field(default=2, ge=1, le=10)
    """Most rewrite rounds; each rewrite is re-evaluated by the same evaluator (the paper converges within about 2)."""

    evaluator: str = DEFAULT_EVALUATOR
    """The method that finds what to rewrite and re-verifies each rewrite: dcr (the paper's) or any method that yields
    findings (probe, factscore, dove, localize, ...)."""

    evaluator_options: dict[str, Any] = Field(default_factory=dict)
    """evaluator other than dcr: that method's options (also given as plain options: -o evaluator=probe
    -o judges=a,b)."""

    @field_validator("evaluator")
    @classmethod
    def _known_evaluator(cls, value: str) -> str:
        if value == "improve":
            raise ValueError("improve cannot be its own evaluator")
        try:
            method_class(value)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
        return value

    @model_validator(mode="after")
    def _dcr_options_only_for_dcr(self) -> ImproveOptions:
        if self.evaluator == DEFAULT_EVALUATOR and self.evaluator_options:
            raise ValueError("evaluator_options are for an evaluator other than dcr; give DCR's options directly")
        return self


_OWN_OPTIONS = ("rounds", "level", "evaluator", "evaluator_options")


class ImproveRoundsDetails(MethodDetails):
    """The keys ``improve`` adds to its evaluator's details."""

    rounds: list[dict[str, Any]] | None = None
    """One :class:`ImprovementRound` (dumped) per evaluated text; round 0 is the original."""
    max_rounds: int | None = None
    """The ``rounds`` option."""
    improved_target: str | None = None
    """The best-scoring verified text (the original when no rewrite scored higher)."""
    improved: bool | None = None
    """Whether a rewrite scored higher than the original."""
    best_round: int | None = None
    """The round of ``improved_target`` (0 when not improved)."""
    stop_reason: str | None = None
    """Why the rounds stopped."""
    diff: str | None = None
    """A unified diff, one sentence per line, original vs improved (empty when not improved)."""


class ImproveDetails(ImproveRoundsDetails, DcrDetails):
    """``Report.details`` of ``improve`` with its default evaluator: DCR's keys, then the rounds'."""


@functools.cache
def improve_details(evaluator: type[MethodDetails]) -> type[MethodDetails]:
    """``improve``'s details model over another evaluator: that evaluator's keys plus :class:`ImproveRoundsDetails`."""
    if evaluator is DcrDetails:
        return ImproveDetails
    return type(
        f"Improve{evaluator.__name__}",
        (ImproveRoundsDetails, evaluator),
        {"__doc__": f"``improve`` over an evaluator whose details are {evaluator.__name__}.", "__module__": __name__},
    )


@register_method
class Improve(Method):
    """An evaluator (DCR by default) followed by up to ``rounds`` rounds of reason-assisted rewriting."""

    name = "improve"
    description = (
        "DCR + RAI: rewrite the sentences DCR (or -o evaluator=METHOD) flags, re-verify, repeat up to "
        "`rounds` times; the report scores the given target and carries the verified improved text and a diff."
    )
    Options: ClassVar[type[ImproveOptions]] = ImproveOptions
    Details: ClassVar[type[MethodDetails]] = ImproveDetails  # with evaluator=dcr; see details_model
    opts: ImproveOptions
    prompts = DCR_PROMPTS + RAI_PROMPTS
    default_threshold = 1.0  # DCR's label score's; a check is labelled at its evaluator's threshold (``threshold``)

    def __init__(self, llm: LLM | None = None, config: Config | None = None, **options: Any):
        evaluator = options.get("evaluator", DEFAULT_EVALUATOR)
        if evaluator != DEFAULT_EVALUATOR:  # the options that are not improve's own are the evaluator's
            extra = {k: options.pop(k) for k in list(options) if k not in _OWN_OPTIONS}
            options["evaluator_options"] = {**extra, **dict(options.get("evaluator_options") or {})}
        super().__init__(llm, config, **options)
        self._evaluator: Method | None = None
        if self.opts.evaluator != DEFAULT_EVALUATOR:
            cls = method_class(self.opts.evaluator)
            cls.Options.parse(self.opts.evaluator, self.opts.evaluator_options)  # a bad option fails here

    @classmethod
    def default_threshold_for(cls, opts: MethodOptions) -> float:
        """The evaluator's default threshold for its options (DCR's for improve's own DCR options)."""
        name = getattr(opts, "evaluator", DEFAULT_EVALUATOR)
        if name == DEFAULT_EVALUATOR:
            return DCR.default_threshold_for(opts)
        evaluator = method_class(name)
        return evaluator.default_threshold_for(evaluator.Options.parse(name, dict(opts.evaluator_options)))  # type: ignore[attr-defined]

    @property
    def evaluator(self) -> Method:
        """The evaluating method, built on first use with this method's LLM and config."""
        if self._evaluator is None:
            if self.opts.evaluator == DEFAULT_EVALUATOR:
                options = {k: v for k, v in self.opts.model_dump().items() if k in DcrOptions.model_fields}
                options["level"] = self.opts.level  # DCR's paper option: its decomposer, translated when parsed
            else:
                options = dict(self.opts.evaluator_options)
            cls = method_class(self.opts.evaluator)
            self._evaluator = cls(llm=self.llm if cls.uses_llm else None, config=self.config, **options)
        return self._evaluator

    def options(self) -> dict[str, Any]:
        """With dcr: DCR's options and ``rounds`` (as before the evaluator was an option); else ``rounds``,
        ``level``, ``evaluator`` and the evaluator's options."""
        if self.opts.evaluator == DEFAULT_EVALUATOR:
            unset = {
                k
                for k in ("aggregator", "localizer", "decomposer", "context_selector")
                if getattr(self.opts, k, None) is None
            }
            return self._with_max_calls(
                self.opts.model_dump(mode="json", exclude={"evaluator", "evaluator_options", *unset})
            )
        return self._with_max_calls(
            {
                "rounds": self.opts.rounds,
                "level": self.opts.level,
                "evaluator": self.opts.evaluator,
                "evaluator_options": self.evaluator.options(),
            }
        )

    def details_model(self) -> type[MethodDetails]:
        """The evaluator's details model plus the rounds' keys."""
        if self.opts.evaluator == DEFAULT_EVALUATOR:
            return ImproveDetails
        return improve_details(self.evaluator.details_model())

    def close(self) -> None:
        if self._evaluator is not None:
            self._evaluator.close()
        super().close()

    def used_prompts(self) -> list[PromptTemplate]:
        rai = RAI_PARAGRAPH_PROMPT if self.opts.level == "paragraph" else RAI_SENTENCE_PROMPT
        return self.evaluator.used_prompts() + [self.prompt(rai)]

    async def evaluate(self, source: str, text: str) -> Evaluated:
        """The evaluator on ``text``; ``run`` (not ``acheck``), so its calls land in this check's call log. Its
        reasons are taken without prompt markup (:func:`~halluscope.text.markup.clean_report`), as a finished
        report shows them: they are shown with each change and sent to the rewrite."""
        report = clean_report(await self.evaluator.run(source, text))
        return Evaluated(text, report.model_copy(update={"method": self.name}), self.threshold)

    async def run(self, source: str, target: str) -> Report:
        original = await self.evaluate(source, target)
        rounds = [original.round(0)]
        current = original
        max_rounds = self.opts.rounds
        stop_reason = f"reached the maximum of {max_rounds} round(s)"
        for number in range(1, max_rounds + 1):
            if current.consistent:
                stop_reason = "consistent"
                break
            if current.score is None:
                stop_reason = f"could not evaluate the text of round {number - 1}: {current.report.unscored_reason}"
                break
            if not current.flagged:
                stop_reason = (
                    "no sentence was judged inconsistent (the others could not be judged)"
                    if judged_by_verdicts(current.report)
                    else "the evaluator's findings point into no sentence of the text"
                )
                break
            rewrite = await self.rewrite(source, current)
            if rewrite.text is None:
                problem = rewrite.error or "no rewrite"
                stop = f"could not be used: {problem}"
            elif not rewrite.text.strip():
                stop = "deleted the whole text"
                problem = f"the rewrite {stop}"
            elif rewrite.text == current.text:
                stop = "changed nothing"
                problem = f"the rewrite {stop}"
            else:
                current = await self.evaluate(source, rewrite.text)
                rounds.append(current.round(number, rewrite.changes, rewrite.ignored))
                continue
            rounds[-1].rewrite_error = problem
            stop_reason = f"the rewrite of round {number} {stop}"
            break
        else:
            if current.consistent:
                stop_reason = "consistent"
        return self.result(original.report, rounds, stop_reason)

    async def rewrite(self, source: str, evaluated: Evaluated) -> Rewrite:
        """RAI on the units ``evaluated`` flags: the whole text (paragraph level) or the flagged sentences."""
        units = evaluated.units
        flagged = evaluated.flagged
        if self.opts.level == "paragraph":
            reason = units[0].reason if len(units) == 1 else " ".join(units[i].reason or "" for i in flagged)
            step = await generate_reply(
                self.llm,
                self.prompt(RAI_PARAGRAPH_PROMPT).render(source=source, target=evaluated.text, reason=reason),
                ImprovedTextReply,
                parse=parse_rai_paragraph,
            )  # type: ignore[arg-type]
            if step.value is None:
                return Rewrite(error=step.error)
            new: str = step.value  # type: ignore[assignment]
            return Rewrite(
                text=new,
                changes=[SentenceChange(sentence=1, before=evaluated.text.strip(), after=new, reason=reason or "")],
            )
        texts = [u.text for u in units]
        listing = "\n".join(
            f"[{i + 1}] {' '.join(texts[i].split())}\n    reason: {' '.join((units[i].reason or '').split())}"
            for i in flagged
        )
        n = len(units)
        step = await generate_reply(
            self.llm,
            self.prompt(RAI_SENTENCE_PROMPT).render(source=source, target=evaluated.text, flagged=listing),
            RewritesReply,
            parse=lambda text: parse_rai_sentences(text, set(flagged), n),
        )  # type: ignore[arg-type, return-value]
        if step.value is None:
            return Rewrite(error=step.error)
        rewrites, ignored = step.value  # type: ignore[misc]
        rewrites = {i: new for i, new in rewrites.items() if new != texts[i]}
        changes = [
            SentenceChange(sentence=i + 1, before=texts[i], after=new, reason=units[i].reason or "")
            for i, new in sorted(rewrites.items())
        ]
        spans = [u.span for u in units]
        return Rewrite(text=splice(evaluated.text, spans, rewrites), changes=changes, ignored=ignored)

    def result(self, report: Report, rounds: list[ImprovementRound], stop_reason: str) -> Report:
        """``report`` (about the given target) with the rounds, the verified improved text and the diff."""
        original = best = rounds[0]
        for r in rounds[1:]:
            if r.score is not None and (best.score is None or r.score > best.score):
                best = r
        improved = best.round > 0 and original.score is not None
        improved_target = best.text if improved else original.text
        details: dict[str, Any] = {
            **report.details,
            **ImproveRoundsDetails.build(
                rounds=[r.model_dump() for r in rounds],
                max_rounds=self.opts.rounds,
                improved_target=improved_target,
                improved=improved,
                best_round=best.round if improved else 0,
                stop_reason=stop_reason,
                diff=sentence_diff(original.text, improved_target) if improved else "",
            ),
        }
        subscores = {
            **report.subscores,
            "initial_score": original.score,
            "final_score": best.score if improved else original.score,
            "rounds_run": float(len(rounds) - 1),
        }
        return report.model_copy(update={"details": details, "subscores": subscores})
