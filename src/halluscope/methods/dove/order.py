"""DoveScore's own arithmetic (DoveScore paper, §5, Eq. 5): event orderings, ``pi``, ShuffleD, the score, and the
findings for event pairs told out of order. No LLM here; the sorters that produce the orderings live in
:mod:`halluscope.methods.dove.stages`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from halluscope.permutations import inverted_pairs
from halluscope.records import Claim, Finding
from halluscope.stages.protocols import EventOrder


@dataclass(frozen=True)
class DoveScores:
    score: float
    alpha: float
    s_e: float | None
    s_d: float | None
    s_eo: float | None
    shuffle_degree: float | None

    def subscores(self) -> dict[str, float | None]:
        return {
            "S_E": self.s_e,
            "S_D": self.s_d,
            "S_EO": self.s_eo,
            "alpha": self.alpha,
            "ShuffleD": self.shuffle_degree,
        }


def dove_score(
    n_events: int, n_events_correct: int, n_descriptive: int, n_descriptive_correct: int, shuffle_degree: float | None
) -> DoveScores:
    """Eq. 5 of the paper. ``shuffle_degree`` is required when ``n_events > 0`` (pass 0.0 when fewer than two
    events were verified: no pair can be out of order). Raises ValueError when there is no fact at all."""
    if (
        n_events < 0
        or n_descriptive < 0
        or not 0 <= n_events_correct <= n_events
        or not 0 <= n_descriptive_correct <= n_descriptive
    ):
        raise ValueError("fact counts out of range")
    if n_events + n_descriptive == 0:
        raise ValueError("no facts: DoveScore is undefined")
    alpha = n_events / (n_events + n_descriptive)
    s_e = n_events_correct / n_events if n_events else None
    s_d = n_descriptive_correct / n_descriptive if n_descriptive else None
    if n_events:
        if shuffle_degree is None or not 0.0 <= shuffle_degree <= 1.0:
            raise ValueError("a ShuffleD in [0, 1] is needed when there are event facts")
        s_eo: float | None = 1.0 - shuffle_degree
        event_part = alpha * s_e * s_eo  # type: ignore[operator]
    else:
        s_eo, shuffle_degree, event_part = None, None, 0.0
    score = event_part + ((1 - alpha) * s_d if s_d is not None else 0.0)
    return DoveScores(
        score=min(1.0, max(0.0, score)), alpha=alpha, s_e=s_e, s_d=s_d, s_eo=s_eo, shuffle_degree=shuffle_degree
    )


def partial_subscores(
    n_events: int, n_events_correct: int, n_descriptive: int, n_descriptive_correct: int
) -> dict[str, float | None]:
    """The sub-scores that do not need the event order (reported when the order could not be judged)."""
    n = n_events + n_descriptive
    return {
        "S_E": n_events_correct / n_events if n_events else None,
        "S_D": n_descriptive_correct / n_descriptive if n_descriptive else None,
        "S_EO": None,
        "alpha": n_events / n if n else None,
        "ShuffleD": None,
    }


def order_comparison(source_order: Sequence[int], target_order: Sequence[int]) -> tuple[list[int], list[int]]:
    """The events placed by both orderings, in target order, and their source ranks (the paper's pi)."""
    source_rank = {event: rank for rank, event in enumerate(source_order)}
    compared = [event for event in target_order if event in source_rank]
    return compared, [source_rank[event] for event in compared]


@dataclass
class OrderJudgment:
    """The event-order comparison: ShuffleD over the compared events and one finding per inverted pair."""

    shuffle_degree: float
    compared: list[int]
    findings: list[Finding]


def judge_order(
    events: Sequence[Claim], source_order: Sequence[int], target_order: Sequence[int]
) -> OrderJudgment | None:
    """ShuffleD = Inv(pi) / C(m, 2) over the m events both orderings placed, and an ``event_order`` finding
    per inverted pair; None when fewer than two events can be compared."""
    compared, pi = order_comparison(source_order, target_order)
    n = len(compared)
    if n < 2:
        return None
    pairs = inverted_pairs(pi)
    findings = [event_order_finding(events[compared[i]], events[compared[j]]) for i, j in pairs]
    return OrderJudgment(shuffle_degree=len(pairs) / (n * (n - 1) / 2), compared=compared, findings=findings)


def event_order_finding(first: Claim, second: Claim) -> Finding:
    """The target tells ``first`` before ``second``; the source has ``second`` happen first."""
    return Finding(
        description=(
            f'Event order: the text puts "{first.text}" before "{second.text}", but in the source '
            f'"{second.text}" happens first.'
        ),
        kind="event_order",
        target_spans=list(first.target_spans) + list(second.target_spans),
        claim_ids=[first.id or "", second.id or ""],
    )


def target_position_order(events: Sequence[Claim]) -> EventOrder:
    """Events ordered by where their target spans start (no LLM); events without a span are ``missing``."""
    placed = sorted(
        (i for i, c in enumerate(events) if c.target_spans), key=lambda i: (events[i].target_spans[0].start, i)
    )
    return EventOrder(order=placed, missing=[i for i, c in enumerate(events) if not c.target_spans])
