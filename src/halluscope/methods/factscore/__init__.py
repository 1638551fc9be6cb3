"""``factscore``: atomic facts, each verified -> fraction supported; descriptions de-duplicated (FActScore as
the "Pipeline" baseline of FINAL, FINAL paper §4.1, App. C.2, H.2.5).

A :class:`~halluscope.methods.pipeline.ClaimPipeline` with registered stages of its own (modules:
``replies`` the reply schemas, ``prompts``, ``decompose`` the decomposer, ``verifier``, ``dedup`` the
``deduplicator`` stages ``llm`` / ``fuzzy`` / ``none``, ``localize`` the localizer that composes one of them,
``method`` the method and its options):

1. **Decompose** (decomposer ``factscore``): one call splits the target (given as numbered sentences) into
   atomic facts, each declared with the number of the sentence it came from (that sentence's span becomes
   the fact's target span). Echoed placeholders (``<atomic fact>``, ``[fact]``, ``{fact}``, ``...``, ``…``,
   ``N/A``) and the prompt's own example fact are never facts: a reply with nothing else is an unusable
   decomposition, so the target is *unscored* (never 0.0 with findings pinned on real sentences).
2. **Verify** (verifier ``factscore``, usable by any claim method): one call per fact against the whole
   source or a retrieved snippet (the shared retrieval protocol: ``retrieval``, ``top_k``, ``window``, ...).
   The reply states ``"supported": true|false`` as a JSON boolean; with ``describe=True`` (default) it also
   lists each inconsistency of an unsupported fact separately. Anything else ("No problem!", "Yes, I can
   help...", ``{"supported": "yes"}``) is no verdict: the fact is ``unscored`` with the reason. With the whole
   source and ``batch_size`` > 1, up to ``batch_size`` facts are judged per call, each on its own, in a reply
   listing one entry per fact number (:mod:`halluscope.methods.batching`: a fact the reply leaves out, repeats
   or gives malformed is asked again on its own; never guessed). With retrieval every fact has its own
   snippets, so each keeps its own calls.

What is FActScore's own (the rest is the pipeline's):

* **Score**: the fraction of judged facts that are supported; unscored facts are left out and counted; no
  judged fact gives an unscored Report.
* **Describe + de-duplicate** (``describe=True``): the same error often shows up in several facts, so the
  descriptions of all unsupported facts are de-duplicated into one list of Findings.
  ``deduplicator="llm"`` (default, the paper's approach): the model picks, by number, which description to keep from
  each group of duplicates (selecting by number guarantees it cannot reword them); if its reply is unusable
  the fuzzy de-duplication is used and ``details["dedup_error"]`` says why. ``deduplicator="fuzzy"`` (no LLM call):
  descriptions whose word-order-insensitive similarity is >= ``dedup_threshold`` or that quote the same
  target words are merged (conservative: near-identical wordings only); more than 2,000 descriptions are not
  compared pairwise (only identical wordings and spans merge; ``details["dedup_note"]`` says so).
  ``deduplicator="none"`` keeps every description. A fact judged unsupported without any description gets one
  saying so. A Finding's spans are the target words its description quotes, else the sentences of the facts it
  came from.

With another verifier (``-o verifier=probe``) its verdicts are used as they are; each unsupported fact then
contributes one description (the fact and the verifier's reason), de-duplicated the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope._lazy import lazy_exports

if TYPE_CHECKING:  # the names importable from here, each loaded from its module when first read
    from halluscope.methods.factscore.decompose import AtomicFact, FactScoreDecomposer, parse_facts
    from halluscope.methods.factscore.dedup import (
        DedupMode,
        DescriptionDeduplicator,
        FuzzyDeduplicator,
        LlmDeduplicator,
        NoDeduplication,
        parse_keep,
    )
    from halluscope.methods.factscore.details import FactScoreDetails
    from halluscope.methods.factscore.localize import FactScoreLocalizer
    from halluscope.methods.factscore.method import FactScore, FactScoreOptions
    from halluscope.methods.factscore.prompts import (
        FACTSCORE_DECOMPOSE_PROMPT,
        FACTSCORE_DEDUP_PROMPT,
        FACTSCORE_DESCRIBE_BATCH_PROMPT,
        FACTSCORE_DESCRIBE_PROMPT,
        FACTSCORE_VERIFY_BATCH_PROMPT,
        FACTSCORE_VERIFY_PROMPT,
        VERIFY_REPLY_TOKENS,
    )
    from halluscope.methods.factscore.replies import (
        DESCRIPTION_ECHOES,
        DESCRIPTION_EXAMPLES,
        FACT_ECHOES,
        FACT_EXAMPLES,
        FactCheckBatchEntry,
        FactCheckBatchReply,
        FactCheckReply,
        FactEntry,
        FactJudgmentBatchEntry,
        FactJudgmentBatchReply,
        FactJudgmentReply,
        FactsReply,
        KeepReply,
    )
    from halluscope.methods.factscore.verifier import FactScoreVerifier


__all__ = [
    "FactScoreDetails",
    "DESCRIPTION_ECHOES",
    "DESCRIPTION_EXAMPLES",
    "FACTSCORE_DECOMPOSE_PROMPT",
    "FACTSCORE_DEDUP_PROMPT",
    "FACTSCORE_DESCRIBE_BATCH_PROMPT",
    "FACTSCORE_DESCRIBE_PROMPT",
    "FACTSCORE_VERIFY_BATCH_PROMPT",
    "FACTSCORE_VERIFY_PROMPT",
    "FACT_ECHOES",
    "FACT_EXAMPLES",
    "VERIFY_REPLY_TOKENS",
    "AtomicFact",
    "DedupMode",
    "DescriptionDeduplicator",
    "FactCheckBatchEntry",
    "FactCheckBatchReply",
    "FactCheckReply",
    "FactEntry",
    "FactJudgmentBatchEntry",
    "FactJudgmentBatchReply",
    "FactJudgmentReply",
    "FactScore",
    "FactScoreDecomposer",
    "FactScoreLocalizer",
    "FactScoreOptions",
    "FactScoreVerifier",
    "FactsReply",
    "FuzzyDeduplicator",
    "KeepReply",
    "LlmDeduplicator",
    "NoDeduplication",
    "parse_facts",
    "parse_keep",
]

__getattr__ = lazy_exports(__name__, __file__)
