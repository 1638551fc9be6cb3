"""Reading an item's gold claims (``meta.gold_claims``, ``gold_claims_uncertain``, older ``injected_claims``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from halluscope.records import Example, Span


@dataclass(frozen=True)
class GoldClaim:
    id: str
    text: str
    span: Span | None
    hallucinated: bool
    evidence: tuple[Span, ...] = ()
    uncertain: bool = False  # a claim of the text the gold could not confirm (no consensus evidence)


@dataclass(frozen=True)
class Gold:
    claims: tuple[GoldClaim, ...]  # certain and uncertain
    complete: bool  # every claim of the target is listed

    @property
    def certain(self) -> list[GoldClaim]:
        return [g for g in self.claims if not g.uncertain]

    @property
    def hallucinated(self) -> list[GoldClaim]:
        return [g for g in self.claims if g.hallucinated and not g.uncertain]

    @property
    def has_evidence(self) -> bool:
        return any(g.evidence for g in self.certain if not g.hallucinated)


def _span(value: Any, where: str) -> Span:
    try:
        return Span(start=value["start"], end=value["end"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: not a span {{start, end}}: {value!r}") from exc


def _gold_claim(entry: Any, target: str, source: str, where: str, uncertain: bool = False) -> GoldClaim:
    if not isinstance(entry, dict) or not isinstance(entry.get("text"), str) or not entry["text"].strip():
        raise ValueError(f"{where}: a gold claim needs a non-empty 'text'")
    hallucinated = entry.get("hallucinated", False if uncertain else None)
    if not isinstance(hallucinated, bool):
        raise ValueError(f"{where}: 'hallucinated' must be true or false")
    span = _span(entry["span"], where) if entry.get("span") is not None else None
    if span is None and hallucinated and not uncertain:
        raise ValueError(f"{where}: a hallucinated gold claim needs its 'span' in the target")
    if span is not None and span.end > len(target):
        raise ValueError(f"{where}: span {span.start}-{span.end} is outside the target ({len(target)} chars)")
    evidence = tuple(_span(e, f"{where} evidence") for e in entry.get("evidence") or [])
    if any(e.end > len(source) for e in evidence):
        raise ValueError(f"{where}: an evidence span is outside the source ({len(source)} chars)")
    return GoldClaim(
        id=str(entry.get("id", where)),
        text=entry["text"].strip(),
        span=span,
        hallucinated=hallucinated,
        evidence=evidence,
        uncertain=uncertain,
    )


def read_gold(example: Example) -> Gold | None:
    """The example's gold claims, or None when it has none. Raises ValueError on malformed gold."""
    meta = example.meta or {}
    if "gold_claims" in meta:
        claims = [
            _gold_claim(c, example.target, example.source, f"{example.id}: gold_claims[{i}]")
            for i, c in enumerate(meta["gold_claims"] or [])
        ]
        claims += [
            _gold_claim(c, example.target, example.source, f"{example.id}: gold_claims_uncertain[{i}]", uncertain=True)
            for i, c in enumerate(meta.get("gold_claims_uncertain") or [])
        ]
        return Gold(tuple(claims), bool(meta.get("gold_claims_complete", False)))
    if "injected_claims" in meta:  # sets written by `generate inject` before gold_claims existed
        claims = [
            _gold_claim(
                {
                    "id": f"h{i + 1}",
                    "text": c.get("fact") or c.get("inserted_text"),
                    "span": c.get("span"),
                    "hallucinated": True,
                },
                example.target,
                example.source,
                f"{example.id}: injected_claims[{i}]",
            )
            for i, c in enumerate(meta["injected_claims"])
        ]
        return Gold(tuple(claims), False)
    if meta.get("generator") == "inject" and example.label == 1:  # an older inject truth: nothing hallucinated
        return Gold((), False)
    return None


def has_gold(example: Example) -> bool:
    meta = example.meta or {}
    return (
        "gold_claims" in meta or "injected_claims" in meta or (meta.get("generator") == "inject" and example.label == 1)
    )
