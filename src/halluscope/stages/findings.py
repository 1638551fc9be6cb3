"""A judged claim as a Finding: the one conversion every claim method (and the gate) shares."""

from __future__ import annotations

from halluscope.records import Finding, Verdict


def verdict_confidence(verdict: Verdict) -> float | None:
    """A flagged verdict's confidence that it is a real problem: ``1 - support_probability`` (None without one)."""
    return None if verdict.support_probability is None else round(1.0 - verdict.support_probability, 6)


def group_confidence(verdicts: list[Verdict]) -> float | None:
    """The confidence of a finding several verdicts share: the highest of theirs (None when none has one)."""
    known = [c for c in (verdict_confidence(v) for v in verdicts) if c is not None]
    return max(known) if known else None


def claim_finding(verdict: Verdict) -> Finding:
    """The verdict's offending characters (``verdict.target_spans``) when it has them, else the claim's spans. A
    suggested fix is the finding's ``fix``, never repeated in its description."""
    claim = verdict.claim
    what = "contradicted by" if verdict.label == "contradicted" else "not supported by"
    description = f'"{claim.text}" is {what} the source.' + (f" {verdict.reason}" if verdict.reason else "")
    confidence = verdict_confidence(verdict)
    return Finding(
        description=description,
        kind=verdict.label,  # type: ignore[arg-type]
        target_spans=list(verdict.target_spans or claim.target_spans),
        evidence=list(verdict.evidence),
        claim_ids=[claim.id] if claim.id else [],
        confidence=confidence,
        **verdict.finding_fields(),
    )
