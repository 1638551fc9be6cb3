"""``dcr``: Divide-Conquer-Reasoning consistency evaluation (DCR paper, §3.1-3.2, App. G and I) on the claim
pipeline.

    target --decomposer "sentences" | "paragraph" (the paper's level=sentence|paragraph)--> units
           --RetrievalSelector--> whole source | K snippets per sentence
           --verifier "dcr" (DCE + AMC)--> one verdict per unit, marked +1/-1
           --DCR.aggregate--> Z = (sum z + alpha) / (k + beta), score (Z + 1) / 2

* **DCE** (divide-conquer evaluator, in the registered verifier ``dcr``): the target is split into
  sentences (by us, so every sentence keeps its exact character span) and one LLM call judges every sentence
  against the *whole* source, giving a reason per sentence and an overall ``is_consistent`` (recorded in
  ``details["dce_is_consistent"]``, never used in the score). ``level="paragraph"`` judges the whole target
  at once (the paper's paragraph-level variant). With retrieval, each sentence is judged against each of its
  snippets in a call of its own (the shared protocol of the long-document stress-test paper: best snippet first, max per
  sentence).
* **AMC** (auto-metric converter, also in the verifier): each reason is mapped to +1 (consistent) or -1
  (not), by an LLM call that only reads the reasons (``amc="llm"``, the paper's design) or by the verdict
  the reason states in words (``amc="rule"``, no extra call; see
  :func:`halluscope.text.verdict_words.verdict_mark`).
* **Score** (:meth:`DCR.aggregate`, DCR's own): ``Z = (sum z_i + alpha) / (k + beta)``, score ``(Z + 1) / 2``;
  a text is consistent when the score is 1 (``default_threshold = 1.0``). ``amc_weights`` sets alpha and beta:

  - ``paper`` (default; the paper's experiments, §4): alpha = beta = 0 and ``k`` is every mark AMC gave (one
    per sentence, plus any reason not about exactly one sentence). ``Z`` needs all of them: a sentence (or
    reason) without a mark is neither dropped nor guessed, so the Report is unscored, saying which; the
    judged sentences' verdicts and findings stay in it.
  - ``auto`` (App. I): alpha and beta remove the reasons that are not about exactly one sentence -- a reason
    not tied to a sentence (``"id": null``, e.g. "the two paragraphs are not consistent"), or a second reason
    about a sentence that already has one; for each, ``alpha -= z`` and ``beta -= 1``, so ``Z`` is the mean
    mark of the judged sentences (unmarked sentences are left out of ``k``).

  When a sentence has several reasons, its verdict is its negative one (a sentence is consistent only if
  nothing said about it is negative). The other reasons are listed in ``details["other_reasons"]``.
* **batch_size** (with retrieval only): sentences whose snippet is the same text share a DCE call and AMC
  marks several reasons per call (:meth:`DCR.judge_round`); with the whole source DCE and AMC are
  already one call each, as in the paper.
* With another verifier (``-o verifier=NAME``), its labels are the marks: supported -> +1, unsupported or
  contradicted -> -1; an unscored verdict stays unscored.

Strict replies: a DCE reply is ``{"sentences": [{"id": <n or null>, "reason": "..."}], "is_consistent":
<bool>}`` (an id naming no sentence makes the reply unusable; echoed placeholders are not reasons); an AMC
reply is exactly ``{"marks": [...]}`` holding exactly one JSON integer 1 or -1 per reason. Sentences the
model gave no usable reason for, or whose reason could not be marked (AMC reply unusable; under
``amc="rule"`` a reason that states no verdict), are ``unscored`` verdicts with the reason; under
``amc_weights=paper`` the Report is then unscored, under ``auto`` the score is over the judged ones
(``subscores["judged"]``) and only a text with no judged sentence gives an unscored Report.

Audit: ``Report.calls`` holds every exchange. Calls made for one sentence only (retrieval mode) are also on
that sentence's ``Verdict.calls``; the joint DCE call and its AMC call are on ``Report.calls`` only.

The reason-assisted improver (RAI) is the ``improve`` method (:mod:`halluscope.methods.improve`), which
builds on this one.

Modules: :mod:`.replies` (DCE's and AMC's declared replies, parsers), :mod:`.prompts`, :mod:`.amc` (reasons ->
marks), :mod:`.scoring` (Eq. 3), :mod:`.verifier` (the ``dcr`` verifier stage), :mod:`.decompose` (the
``paragraph`` decomposer), :mod:`.method` (``DCR`` and its options). Every name stays importable from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope._lazy import lazy_exports

if TYPE_CHECKING:  # the names importable from here, each loaded from its module when first read
    from halluscope.methods.dcr.amc import (
        AmcMarks,
        AmcMode,
        AutoMetricConverter,
    )
    from halluscope.methods.dcr.decompose import (
        ParagraphDecomposer,
    )
    from halluscope.methods.dcr.details import DcrDetails
    from halluscope.methods.dcr.localize import (
        DcrLocalizer,
        dcr_finding,
    )
    from halluscope.methods.dcr.method import (
        DCR,
        DcrOptions,
        Level,
    )
    from halluscope.methods.dcr.prompts import (
        AMC_PROMPT,
        DCE_EXCERPT_BATCH_PROMPT,
        DCE_EXCERPT_PROMPT,
        DCE_PARAGRAPH_PROMPT,
        DCE_REPLY_TOKENS,
        DCE_SENTENCE_PROMPT,
        DCR_PROMPTS,
    )
    from halluscope.methods.dcr.replies import (
        REASON_ECHOES,
        AmcReply,
        DceExcerptBatchReply,
        DceExcerptEntry,
        DceJudgment,
        DceReason,
        DceReply,
        DceSingleReply,
        Mark,
        SentenceReason,
        number_claims,
        parse_amc,
        parse_dce_sentences,
        parse_dce_single,
    )
    from halluscope.methods.dcr.scoring import (
        LABEL_MARKS,
        AmcScore,
        AmcWeights,
        DcrAggregator,
        amc_score,
    )
    from halluscope.methods.dcr.verifier import (
        NO_REASON,
        DceNotes,
        DcrVerifier,
        OtherReason,
        assign_reasons,
    )


__all__ = [
    "DcrDetails",
    "AMC_PROMPT",
    "AmcMarks",
    "AmcMode",
    "AmcReply",
    "AmcScore",
    "AmcWeights",
    "AutoMetricConverter",
    "DCE_EXCERPT_BATCH_PROMPT",
    "DCE_EXCERPT_PROMPT",
    "DCE_PARAGRAPH_PROMPT",
    "DCE_REPLY_TOKENS",
    "DCE_SENTENCE_PROMPT",
    "DCR",
    "DCR_PROMPTS",
    "DceExcerptBatchReply",
    "DceExcerptEntry",
    "DceJudgment",
    "DceNotes",
    "DceReason",
    "DceReply",
    "DceSingleReply",
    "DcrOptions",
    "DcrVerifier",
    "LABEL_MARKS",
    "Level",
    "Mark",
    "NO_REASON",
    "OtherReason",
    "ParagraphDecomposer",
    "REASON_ECHOES",
    "SentenceReason",
    "amc_score",
    "assign_reasons",
    "dcr_finding",
    "DcrAggregator",
    "DcrLocalizer",
    "number_claims",
    "parse_amc",
    "parse_dce_sentences",
    "parse_dce_single",
]

__getattr__ = lazy_exports(__name__, __file__)
