"""A judged claim as a Finding: the one conversion every claim method (and the gate) shares."""

from __future__ import annotations

from halluscope.records import Finding, Verdict


def claim_finding(verdict: Verdict) -> Finding:
    """The verdict's offending characters (``verdict.target_spans``) when it has them, else the claim's spans."""
    claim = verdict.claim
    what = "contradicted by" if verdict.label == "contradicted" else "not supported by"
    description = f'"{claim.text}" is {what} the source.' + (f" {verdict.reason}" if verdict.reason else "")
    confidence = None if verdict.support_probability is None else round(1.0 - verdict.support_probability, 6)
    if verdict.fix:
        description += f" Suggested fix: {verdict.fix}"
    return Finding(description=description, kind=verdict.label,  # type: ignore[arg-type]
                   target_spans=list(verdict.target_spans or claim.target_spans), evidence=list(verdict.evidence),
                   claim_ids=[claim.id] if claim.id else [], confidence=confidence, fix=verdict.fix)
