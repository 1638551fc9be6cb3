"""Eq. 3 of the DCR paper (Z from AMC's marks, with App. I's alpha and beta) and DCR's aggregator stage
(``amc_weights=paper`` or ``auto``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from halluscope.methods.dcr.verifier import NO_REASON, DceNotes, OtherReason
from halluscope.options import StageOptions
from halluscope.records import Verdict
from halluscope.stages import Aggregate, register_stage
from halluscope.stages.verdicts import RunStage

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.stages.protocols import PipelineRun

AmcWeights = Literal["paper", "auto"]


@dataclass(frozen=True)
class AmcScore:
    """Eq. 3 of the DCR paper. ``marks`` are all k marked reasons; ``sentence_level[i]`` says whether reason i
    counts (is the one reason kept for exactly one sentence)."""

    marks: tuple[int, ...]
    sentence_level: tuple[bool, ...]
    alpha: float
    beta: float
    z: float | None  # Z in [-1, 1]; None when no reason is sentence-level (k + beta = 0)
    score: float | None  # (Z + 1) / 2

    @property
    def k(self) -> int:
        return len(self.marks)


def amc_score(marks: list[int] | tuple[int, ...], sentence_level: list[bool] | tuple[bool, ...]) -> AmcScore:
    """``Z = (sum z + alpha) / (k + beta)`` with ``alpha = -sum(z of excluded)``, ``beta = -#excluded``.

    The DCR paper's App. I: marks [-1, +1, -1] where the first reason is paragraph-level -> alpha = 1, beta = -1,
    Z = (-1 + 1) / 2 = 0, score 0.5."""
    if len(marks) != len(sentence_level):
        raise ValueError(f"{len(marks)} marks but {len(sentence_level)} sentence-level flags")
    if any(m not in (1, -1) for m in marks):
        raise ValueError("marks must be +1 or -1")
    alpha = float(-sum(m for m, s in zip(marks, sentence_level) if not s))
    beta = float(-sum(1 for s in sentence_level if not s))
    denominator = len(marks) + beta
    if denominator == 0:
        return AmcScore(tuple(marks), tuple(sentence_level), alpha, beta, None, None)
    z = (sum(marks) + alpha) / denominator
    return AmcScore(tuple(marks), tuple(sentence_level), alpha, beta, z, (z + 1) / 2)


LABEL_MARKS: dict[str, int] = {"supported": 1, "unsupported": -1, "contradicted": -1}
"""A verdict's mark in Z (any verifier's labels); unscored verdicts have none."""


def _paper_aggregate(
    verdicts: Sequence[Verdict],
    judged: Sequence[Verdict],
    others: Sequence[OtherReason],
    unmarked: Sequence[str],
    subscores: dict[str, float | None],
) -> Aggregate:
    """Eq. 3 as the paper's experiments ran it: alpha = beta = 0, so Z is the mean of every mark AMC gave --
    one per sentence, plus any reason not about exactly one sentence. Z needs every one of them: a sentence
    (or reason) without a mark is neither dropped (which would shrink k) nor guessed, so the Report is
    unscored, saying which."""
    missing = [(i, v) for i, v in enumerate(verdicts) if v.label not in LABEL_MARKS]
    subscores["unscored_units"] = float(len(missing))
    if missing or unmarked:
        if missing:
            i, first = missing[0]
            what = f"{len(missing)} of {len(verdicts)} sentences have no mark (sentence {i + 1}: {first.reason})"
        else:
            what = f"{len(unmarked)} DCE reason(s) could not be marked ({unmarked[0][:80]!r})"
        return Aggregate(
            None,
            subscores,
            f"{what}; with alpha = beta = 0 (amc_weights=paper) Z averages over all "
            "sentences, so none can be left out or guessed; amc_weights=auto scores "
            "the judged sentences only"[:1000],
        )
    marks = [LABEL_MARKS[v.label] for v in judged] + [o.mark for o in others]
    amc = amc_score(marks, [True] * len(marks))
    subscores.update({"Z": amc.z, "alpha": amc.alpha, "beta": amc.beta, "k": float(amc.k)})
    if amc.score is None:
        return Aggregate(None, subscores, "no sentence received a usable judgment (no units)")
    return Aggregate(amc.score, subscores)


def _why_none(verdicts: Sequence[Verdict], others: Sequence[OtherReason]) -> str:
    specific = [v.reason for v in verdicts if v.label == "unscored" and v.reason != NO_REASON]
    if specific:
        return specific[0]
    if others:
        return "only reasons not about a single sentence"
    return verdicts[0].reason if verdicts else "no units"


@register_stage("dcr", "aggregator")
class DcrAggregator(RunStage):
    """DCR's Eq. 3: Z from AMC's marks (one per judged sentence, plus DCE's other reasons), score (Z + 1) / 2."""

    class Options(StageOptions):
        amc_weights: AmcWeights = "paper"
        """alpha and beta of Eq. 3: paper (alpha = beta = 0, Z over every marked reason) or auto (App. I: reasons not
        about exactly one sentence taken out, unmarked sentences left out)."""

    options: DcrAggregator.Options

    async def __call__(self, run: PipelineRun) -> Aggregate:
        """Eq. 3 with ``amc_weights``: ``paper`` (alpha = beta = 0 over every marked reason; any sentence or reason
        without a mark leaves the Report unscored) or ``auto`` (App. I: only the judged sentences' kept reasons
        count, the other reasons are taken out by alpha and beta). DCE's other reasons come from the run's trace
        (:class:`DceNotes`, recorded by DCR's verifier; none with another verifier)."""
        notes = run.trace.get(DceNotes) or DceNotes()
        judged = [v for v in run.verdicts if v.label in LABEL_MARKS]
        others = notes.other_reasons
        run.details["other_reasons"] = [o.record() for o in others]
        run.details["amc_weights"] = self.options.amc_weights
        if notes.is_consistent is not None:
            run.details["dce_is_consistent"] = notes.is_consistent
        subscores: dict[str, float | None] = {"units": float(len(run.verdicts)), "judged": float(len(judged))}
        if self.options.amc_weights == "paper":
            return _paper_aggregate(run.verdicts, judged, others, notes.unmarked_reasons, subscores)
        marks = [LABEL_MARKS[v.label] for v in judged] + [o.mark for o in others]
        amc = amc_score(marks, [True] * len(judged) + [False] * len(others)) if marks else None
        if amc is not None:
            subscores.update({"Z": amc.z, "alpha": amc.alpha, "beta": amc.beta, "k": float(amc.k)})
        if amc is None or amc.score is None:
            return Aggregate(
                None, subscores, f"no sentence received a usable judgment ({_why_none(run.verdicts, others)})"
            )
        return Aggregate(amc.score, subscores)
