"""``probe``: process-based hallucination detection (PROBE paper §3.3, §4).

Four steps, each a registered stage whose output lands in ``Report.details["steps"]`` so it can be inspected
and scored on its own (see :mod:`halluscope.bench.suite_probe`):

1. **claim decomposition** (decomposer ``probe``, :mod:`.decompose`): the target becomes atomic claims, each
   with the target segment it came from, mapped to a character span of the target.
2. **evidence finding** (evidence finder ``probe``, :mod:`.evidence`): the model quotes the passages of the
   context (the whole source, or a retrieved snippet) that bear on a claim; every quote is located in the
   source with exact offsets, invented quotes are rejected and recorded. ``evidence_finder=top_sentences`` uses
   the retriever's top sentences instead (finder ``top_sentences``, no LLM call).
3. **evidence evaluation** (:mod:`.judge`): does each passage ALONE support the claim? PASS/FAIL per judge;
   a passage is accepted when the PASS votes reach ``consensus`` of ALL the votes, an unusable vote counting
   against (the paper: at least 3 of 4 models, 0.75); with fewer than half of the votes usable it is undecided
   (not in the paper: docs/paper_defaults.md).
4. **localization** (:mod:`.method`): a claim with no supporting passage is hallucinated; its target span
   becomes a Finding. The score is the fraction of judged claims that are supported.

Steps 2 and 3 form the verifier ``probe`` (:mod:`.verifier`), which any claim method can use
(``-o verifier=probe``). Long sources go through the shared retrieval protocol (``retrieval``, ``top_k``,
``window``, ``retriever``). A claim is ``unscored`` (left out of the score, with the reason) when its evidence
reply was unusable, when every passage it quoted was invented, or when its passages could not be judged;
it is ``unsupported`` only after a valid evidence reply that lists nothing, or the judges' FAIL on every
passage. ``details["steps"]["localization"]["outcomes"]`` says which, per claim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope._lazy import lazy_exports

if TYPE_CHECKING:  # the names importable from here, each loaded from its module when first read
    from halluscope.methods.probe.consensus import ConsensusJudging, consensus_judging
    from halluscope.methods.probe.decompose import ProbeDecomposer, parse_claims, place_claims, sentence_claims
    from halluscope.methods.probe.details import ProbeDetails
    from halluscope.methods.probe.evidence import ProbeEvidenceFinder, QuoteSearch, TopSentencesFinder, locate_quote
    from halluscope.methods.probe.judge import EvidenceEvaluator, EvidenceJudgment, Judge, Vote
    from halluscope.methods.probe.method import Probe
    from halluscope.methods.probe.options import ProbeOptions
    from halluscope.methods.probe.outcome import ProbeAggregator, ProbeLocalizer, probe_finding
    from halluscope.methods.probe.replies import (
        DECOMPOSE_PROMPT,
        EVALUATE_PROMPT,
        FIND_EVIDENCE_PROMPT,
        ClaimEntry,
        ClaimsReply,
        EvaluationReply,
        EvidenceReply,
        is_template_echo,
    )
    from halluscope.methods.probe.verifier import ProbeVerifier, decide


__all__ = [
    "ConsensusJudging",
    "consensus_judging",
    "ProbeDetails",
    "DECOMPOSE_PROMPT",
    "EVALUATE_PROMPT",
    "FIND_EVIDENCE_PROMPT",
    "ClaimEntry",
    "ClaimsReply",
    "EvaluationReply",
    "EvidenceEvaluator",
    "EvidenceJudgment",
    "EvidenceReply",
    "Judge",
    "Probe",
    "ProbeDecomposer",
    "ProbeEvidenceFinder",
    "ProbeOptions",
    "ProbeVerifier",
    "QuoteSearch",
    "TopSentencesFinder",
    "Vote",
    "decide",
    "is_template_echo",
    "locate_quote",
    "parse_claims",
    "place_claims",
    "probe_finding",
    "ProbeAggregator",
    "ProbeLocalizer",
    "sentence_claims",
]

__getattr__ = lazy_exports(__name__, __file__)
