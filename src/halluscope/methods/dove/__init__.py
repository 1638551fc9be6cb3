"""``dove``: DoveScore (DoveScore paper, §5) — fact accuracy AND event order.

A :class:`~halluscope.methods.pipeline.ClaimPipeline` (decompose -> whole source or retrieved snippets ->
verify) with DoveScore's own part on top:

- **decomposer** ``dove`` (:mod:`.stages`): the target's *event facts* (tied to a moment, listed in the
  target's chronological order) and *descriptive facts* (lasting properties), pronouns resolved;
  ``decomposer="sentences"`` makes every target sentence an event fact instead (no call; an extension);
- **fact checker** = verifier ``dove`` (:mod:`.stages`): supported / contradicted / unsupported per fact,
  ``batch_size`` facts per call with the whole source; any registered verifier can replace it
  (``verifier="factscore"``, ``"probe"``, ...);
- **sorter** (:mod:`.stages`, DoveScore's own): orders the *verified* event facts by the source's chronology
  and by the target's; ``sorter="position"`` uses the order of mention in the source instead (no LLM);
- **order score** (:mod:`.order`): ``ShuffleD = Inv(pi) / C(m, 2)``, ``S_EO = 1 - ShuffleD`` and Eq. 5,
  ``DoveScore = alpha * S_E * S_EO + (1 - alpha) * S_D``.

Replies are parsed strictly against the schemas in :mod:`.replies`; edge cases are in docs/dove.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope._lazy import lazy_exports

if TYPE_CHECKING:  # the names importable from here, each loaded from its module when first read
    from halluscope.methods.dove.aggregate import DoveAggregator, DoveLocalizer
    from halluscope.methods.dove.details import DoveDetails
    from halluscope.methods.dove.method import Dove, DoveOptions
    from halluscope.methods.dove.order import (
        DoveScores,
        dove_score,
        event_order_finding,
        judge_order,
        order_comparison,
        target_position_order,
    )
    from halluscope.methods.dove.prompts import (
        DOVE_CHECK_BATCH_PROMPT,
        DOVE_CHECK_PROMPT,
        DOVE_DECOMPOSE_PROMPT,
        DOVE_SORT_PROMPT,
    )
    from halluscope.methods.dove.replies import (
        DoveBatchAnswers,
        DoveBatchJudgment,
        DoveBatchReply,
        DoveCheckReply,
        DoveFacts,
        DoveFactsReply,
        DoveOrderReply,
        match_event,
        parse_batch_judgments,
        parse_decomposition,
        parse_event_order,
        parse_fact_judgment,
    )
    from halluscope.methods.dove.stages import (
        DoveDecomposer,
        DoveFactChecker,
        DoveSorter,
        PositionSorter,
    )


__all__ = [
    "DoveDetails",
    "DOVE_CHECK_BATCH_PROMPT",
    "DOVE_CHECK_PROMPT",
    "DOVE_DECOMPOSE_PROMPT",
    "DOVE_SORT_PROMPT",
    "Dove",
    "DoveBatchAnswers",
    "DoveBatchJudgment",
    "DoveBatchReply",
    "DoveCheckReply",
    "DoveDecomposer",
    "DoveFactChecker",
    "DoveFacts",
    "DoveFactsReply",
    "DoveOptions",
    "DoveOrderReply",
    "DoveScores",
    "DoveSorter",
    "PositionSorter",
    "dove_score",
    "event_order_finding",
    "judge_order",
    "match_event",
    "order_comparison",
    "parse_batch_judgments",
    "parse_decomposition",
    "parse_event_order",
    "parse_fact_judgment",
    "target_position_order",
    "DoveAggregator",
    "DoveLocalizer",
]

__getattr__ = lazy_exports(__name__, __file__)
