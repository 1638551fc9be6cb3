"""The step record of one ``probe`` check: what each step produced, for ``Report.details["steps"]``.

Stages record into the check's :class:`ProbeTrace`, one record of the check's
:class:`~halluscope.stages.trace.RunTrace` that the pipeline passes along (the decomposer through
``with_trace``, the verifier on each ``Context``), so concurrent checks on one method instance never mix their
records; ``Probe.finish`` turns it into the details. Outside a pipeline check nothing is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from halluscope.records import Report


@dataclass
class ProbeTrace:
    """Raw step records, appended as the stages finish (in any order); :meth:`steps` puts them in order."""

    decomposition: dict[str, Any] = field(default_factory=dict)
    searches: list[dict[str, Any]] = field(default_factory=list)  # one per (claim, context) evidence search
    judgments: list[dict[str, Any]] = field(default_factory=list)  # one per judged passage
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # one per (claim, context) decision

    def steps(self, report: Report) -> dict[str, Any]:
        """``details["steps"]``: decomposition, evidence_finding (one entry per claim, all contexts tried),
        evidence_evaluation (one entry per judged passage), localization."""
        order = {c.id: i for i, c in enumerate(report.claims)}
        retrieval = report.details.get("context", {}).get("mode") == "retrieval"

        def kept(entry: dict[str, Any]) -> bool:  # after a context overflow the claims were re-run on snippets
            return entry["claim_id"] in order and (not retrieval or entry["context"]["kind"] == "snippet")

        def key(entry: dict[str, Any]) -> tuple[int, int, int]:
            return order[entry["claim_id"]], entry["context"]["rank"], entry.get("position", 0)

        searches = sorted(filter(kept, self.searches), key=key)
        finding = []
        for claim in report.claims:
            mine = [s for s in searches if s["claim_id"] == claim.id]
            if not mine:
                continue
            usable = [s for s in mine if s["error"] is None]
            finding.append(
                {
                    "claim_id": claim.id,
                    "narrowed": any(s["context"]["kind"] == "snippet" for s in mine),
                    "snippets": [s["context"]["span"] for s in mine if s["context"]["kind"] == "snippet"],
                    "contexts": [{k: s[k] for k in ("context", "outcome", "error")} for s in mine],
                    "quotes": [{**q, "context_rank": s["context"]["rank"]} for s in mine for q in s["quotes"]],
                    "error": None if usable else "; ".join(dict.fromkeys(s["error"] for s in mine)),
                    "outcome": "evidence" if any(s["outcome"] == "evidence" for s in mine) else mine[0]["outcome"],
                }
            )
        evaluation = [
            {k: v for k, v in j.items() if k != "position"} for j in sorted(filter(kept, self.judgments), key=key)
        ]
        decisions = sorted(filter(kept, self.outcomes), key=key)
        flagged = [v for v in report.verdicts if v.label in ("unsupported", "contradicted")]
        localization = {
            "hallucinated_claim_ids": [v.claim.id for v in flagged],
            "spans": [s.model_dump() for f in report.findings for s in f.target_spans],
            "unplaced": [v.claim.id for v in flagged if not v.claim.target_spans],
            "unscored": [
                {"claim_id": v.claim.id, "reason": v.reason} for v in report.verdicts if v.label == "unscored"
            ],
            "outcomes": {v.claim.id: _claim_outcome(v.claim.id or "", v.label, decisions) for v in report.verdicts},
        }
        return {
            "decomposition": self.decomposition or {"claims": [], "error": None, "fallback": None},
            "evidence_finding": finding,
            "evidence_evaluation": evaluation,
            "localization": localization,
        }

    def quote_counts(self) -> dict[str, float]:
        statuses = [q["status"] for s in self.searches for q in s["quotes"]]
        return {
            "quotes_verified": float(statuses.count("verified")),
            "quotes_rejected": float(statuses.count("rejected")),
        }


def _claim_outcome(claim_id: str, label: str, decisions: list[dict[str, Any]]) -> str:
    """Why the claim got its label, from the best-ranked context that gave that label: ``supported``,
    ``unsupported:no_evidence`` (a valid reply listed no passage), ``unsupported:all_failed`` (the judges
    failed every passage), ``unscored:<why>``; the bare label when no context gave it (e.g. a claim left
    unscored because some of its snippets could not be checked)."""
    return next((d["outcome"] for d in decisions if d["claim_id"] == claim_id and d["label"] == label), label)
