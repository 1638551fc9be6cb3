"""PROBE's multi-judge consensus as one public piece, for code outside the method that judges claims the same way
(the inject generator's gold evidence builder, PROBE paper §3.3): PROBE's decomposer, one evidence finder per
judge model (each judge model finds evidence once), the evidence evaluator (every judge, ``samples`` votes each),
all built with PROBE's own option ranges, and the vote rule and passage context the judges use."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from halluscope.llm import LLM
from halluscope.methods.probe.evidence import context_around
from halluscope.methods.probe.judge import EvidenceEvaluator, votes_needed
from halluscope.methods.probe.options import ProbeVerifierOptions
from halluscope.methods.probe.replies import EVALUATE_PROMPT
from halluscope.methods.probe.verifier import build_judges
from halluscope.records import Span
from halluscope.stages import PromptResolver, build_stage, same_prompt
from halluscope.text import Sentence


@dataclass
class ConsensusJudging:
    """PROBE's stages for consensus judging: ``decomposer`` (target -> claims with spans), ``finders`` (one
    evidence finder per distinct judge model) and ``evaluator`` (PASS/FAIL votes and their consensus)."""

    decomposer: Any
    finders: list[Any]
    evaluator: EvidenceEvaluator
    consensus: float
    context_sentences: int

    def votes_needed(self, votes: int) -> int:
        """PASS votes needed out of ``votes`` for this consensus (PROBE's one vote rule)."""
        return votes_needed(self.consensus, votes)

    def context(self, source: str, sentences: list[Sentence], span: Span) -> str:
        """What the judges read around a passage: its sentences plus ``context_sentences`` on each side."""
        return context_around(source, sentences, span, self.context_sentences)


def consensus_judging(
    llm: LLM,
    judges: Sequence[LLM] = (),
    *,
    samples: int,
    consensus: float,
    max_evidence: int,
    context_sentences: int,
    prompts: PromptResolver = same_prompt,
    purpose: str = "consensus judging",
) -> ConsensusJudging:
    """PROBE's decomposer on ``llm``, an evidence finder per distinct judge model and the evaluator over every
    judge (``llm`` alone when ``judges`` is empty), ``samples`` votes each; the values are checked against PROBE's
    verifier option ranges (an :class:`~halluscope.options.OptionsError` naming ``purpose``)."""
    judge_llms = list(judges) or [llm]
    opts = ProbeVerifierOptions.parse(
        purpose,
        {
            "samples": samples,
            "consensus": consensus,
            "max_evidence": max_evidence,
            "context_sentences": context_sentences,
        },
    )
    decomposer = build_stage("decomposer", "probe", llm, {"on_decompose_error": "unscored"}, prompts=prompts)
    finder_llms = list({j.name: j for j in judge_llms}.values())  # each judge model finds evidence once
    finders = [
        build_stage("evidence_finder", "probe", j, {"max_evidence": opts.max_evidence}, prompts=prompts)
        for j in finder_llms
    ]
    evaluator = EvidenceEvaluator(
        build_judges(judge_llms, opts.samples, opts.sample_temperature), prompts(EVALUATE_PROMPT), consensus=consensus
    )
    return ConsensusJudging(decomposer, finders, evaluator, consensus, context_sentences)
