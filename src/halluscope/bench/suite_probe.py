"""PROBE step metrics (seed 004 §4) on sets with gold hallucinated spans (e.g. ``halluscope generate inject``).

The paper scores each step against annotated claims and evidence. Our data carry gold *hallucinated spans*
(and, for injected sets, the injected facts) but no gold claims for the faithful text and no gold evidence,
so some metrics are defined here in our own words, and the proxies are named as such:

- **Claim-level P/R/F1** (localization, any method with claim verdicts): a *predicted hallucinated claim* is
  a verdict labelled unsupported/contradicted; it is correct when one of its target spans overlaps a gold
  span. Precision = correct predicted claims / predicted claims (a flagged claim with no target span can
  never be correct); recall = gold spans overlapped by at least one predicted claim / gold spans. Micro over
  items. Character-level span P/R/F1 comes from the built-in ``span`` suite and is not repeated here.
- **Decomposition recall**: gold hallucinated units (gold spans; with their injected fact when known) that
  some predicted claim *matches*: the overlap covers at least half of the shorter of the two spans, or the
  claim's wording is close to the injected fact (rapidfuzz token-set ratio >= 80).
  **Decomposition traceability** (our stand-in for precision, which needs the full gold claim set): the
  share of predicted claims the decomposer tied to the target by its quoted segment or by its own wording
  (not by the similar-sentence fallback, not unplaced).
- **Evidence finding** (``probe`` reports): with gold evidence in ``meta["gold_evidence"]`` (a list of
  ``{"target_span": {start, end}, "source_spans": [{start, end}, ...]}``) *partial* = claims matched to a
  gold entry whose verified quotes overlap at least one gold source span, *complete* = overlap all of them.
  Without it both are undefined (None), and we report the proxy ``evidence_found_truth``: the share of
  truth claims (claims matching no gold span, in texts otherwise faithful) for which the finder returned at
  least one real source passage (a quote verified in the source, or a retrieved sentence with
  ``evidence="retrieval"``); plus the share of model quotes that were verified at all.
- **Evidence-evaluation accuracy** (``probe`` reports): per hallucinated claim, correct when none of its
  judged passages was accepted (nothing in the source can support an injected fact); per truth claim,
  correct when at least one judged passage was accepted (a proxy: it assumes the finder surfaced a
  supporting passage). Reported separately and combined, over claims with at least one decided judgment.

Unscored reports are left out and counted. Within a report, a claim whose evidence reply was unusable in
every context it was checked against (``error`` set on its ``evidence_finding`` entry) is left out of the
evidence metrics; a claim whose quotes were all invented stays in (a truth claim without a real passage,
its quotes counted as unverified). With retrieval, a claim's entry gathers the quotes of all its snippets.
CIs: bootstrap over items.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from rapidfuzz import fuzz

from halluscope.bench import metrics as M
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite, scored_pairs
from halluscope.records import Example, Report, Span

FLAGGED = ("unsupported", "contradicted")
TRACEABLE_PREFIXES = ("segment:", "claim:")

# per-item counters; every ratio metric is sum(numerator) / sum(denominator) over (resampled) items
COUNTERS = (
    "pred_claims", "pred_correct", "gold_units", "gold_found",            # claim-level P/R
    "gold_decomposed", "claims", "claims_traceable",                       # decomposition
    "truth_claims", "truth_with_evidence", "quotes", "quotes_verified",    # evidence finding (proxy)
    "gold_ev_claims", "gold_ev_partial", "gold_ev_complete",               # evidence finding (gold)
    "ee_halluc", "ee_halluc_correct", "ee_truth", "ee_truth_correct",      # evidence evaluation
)


def _overlap(a: Span, b: Span) -> int:
    return max(0, min(a.end, b.end) - max(a.start, b.start))


def _matches(spans: list[Span], text: str, gold: Span, fact: str | None) -> bool:
    for s in spans:
        shorter = min(len(s), len(gold)) or 1
        if _overlap(s, gold) >= 0.5 * shorter:
            return True
    return bool(fact) and fuzz.token_set_ratio(text, fact) >= 80


def _gold_units(example: Example) -> list[tuple[Span, str | None]]:
    facts = {(c["span"]["start"], c["span"]["end"]): c.get("fact")
             for c in example.meta.get("injected_claims", []) if isinstance(c, dict) and "span" in c}
    return [(s, facts.get((s.start, s.end))) for s in example.gold_spans or []]


def item_counts(example: Example, report: Report) -> dict[str, int]:
    """The counters of one (example, report) pair (see module docstring for what each counts)."""
    c: dict[str, int] = defaultdict(int)
    gold = _gold_units(example)
    gold_spans = [g for g, _ in gold]
    flagged = [v for v in report.verdicts if v.label in FLAGGED]
    c["pred_claims"] = len(flagged)
    c["pred_correct"] = sum(any(s.overlaps(g) for s in v.claim.target_spans for g in gold_spans) for v in flagged)
    c["gold_units"] = len(gold)
    c["gold_found"] = sum(any(s.overlaps(g) for v in flagged for s in v.claim.target_spans) for g in gold_spans)
    claims = report.claims
    c["claims"] = len(claims)
    c["gold_decomposed"] = sum(any(_matches(cl.target_spans, cl.text, g, fact) for cl in claims) for g, fact in gold)

    steps = report.details.get("steps") if isinstance(report.details, dict) else None
    if not isinstance(steps, dict):
        return {k: c.get(k, 0) for k in COUNTERS}
    placements = {p.get("id"): p.get("placed_by", "") for p in steps.get("decomposition", {}).get("claims", [])}
    c["claims_traceable"] = sum(str(placements.get(cl.id, "")).startswith(TRACEABLE_PREFIXES) for cl in claims)
    hallucinated = {cl.id for cl in claims
                    if any(_matches(cl.target_spans, cl.text, g, fact) for g, fact in gold)}
    finding = {f["claim_id"]: f for f in steps.get("evidence_finding", [])}
    judged: dict[str, list[bool | None]] = defaultdict(list)
    for e in steps.get("evidence_evaluation", []):
        judged[e["claim_id"]].append(e.get("accepted"))
    for cl in claims:
        f = finding.get(cl.id)
        if f is None or f.get("error"):
            continue
        quotes = f.get("quotes", [])
        c["quotes"] += sum(q.get("status") in ("verified", "rejected") for q in quotes)
        c["quotes_verified"] += sum(q.get("status") == "verified" for q in quotes)
        decided = [a for a in judged.get(cl.id, []) if a is not None]
        if cl.id in hallucinated:
            if decided:
                c["ee_halluc"] += 1
                c["ee_halluc_correct"] += not any(decided)
        else:
            c["truth_claims"] += 1
            c["truth_with_evidence"] += any(q.get("status") in ("verified", "retrieved") for q in quotes)
            if decided:
                c["ee_truth"] += 1
                c["ee_truth_correct"] += any(decided)
    for entry in example.meta.get("gold_evidence", []) or []:
        _gold_evidence_counts(c, entry, claims, finding)
    return {k: c.get(k, 0) for k in COUNTERS}


def _gold_evidence_counts(c: dict[str, int], entry: Any, claims, finding) -> None:
    try:
        target_span = Span(**entry["target_span"])
        sources = [Span(**s) for s in entry["source_spans"]]
    except (KeyError, TypeError, ValueError):
        return
    matched = [cl for cl in claims if _matches(cl.target_spans, cl.text, target_span, None)]
    if not matched or not sources:
        return
    found = [Span(**q["span"]) for cl in matched for q in finding.get(cl.id, {}).get("quotes", [])
             if q.get("status") == "verified" and "span" in q]
    hit = [any(s.overlaps(f) for f in found) for s in sources]
    c["gold_ev_claims"] += 1
    c["gold_ev_partial"] += any(hit)
    c["gold_ev_complete"] += all(hit)


def _ratio(table: np.ndarray, num: str, den: str) -> Callable[[np.ndarray], float | None]:
    i, j = COUNTERS.index(num), COUNTERS.index(den)

    def stat(idx: np.ndarray) -> float | None:
        d = table[idx, j].sum()
        return float(table[idx, i].sum() / d) if d else None

    return stat


def _f1(table: np.ndarray) -> Callable[[np.ndarray], float | None]:
    p, r = _ratio(table, "pred_correct", "pred_claims"), _ratio(table, "gold_found", "gold_units")

    def stat(idx: np.ndarray) -> float | None:
        pv, rv = p(idx), r(idx)
        if pv is None or rv is None:
            return None
        return 2 * pv * rv / (pv + rv) if pv + rv else 0.0

    return stat


def _ee_combined(table: np.ndarray) -> Callable[[np.ndarray], float | None]:
    cols = [COUNTERS.index(k) for k in ("ee_halluc_correct", "ee_truth_correct", "ee_halluc", "ee_truth")]

    def stat(idx: np.ndarray) -> float | None:
        hc, tc, h, t = (table[idx, k].sum() for k in cols)
        return float((hc + tc) / (h + t)) if h + t else None

    return stat


METRICS: tuple[tuple[str, str, str], ...] = (  # (name, numerator, denominator)
    ("claim_precision", "pred_correct", "pred_claims"),
    ("claim_recall", "gold_found", "gold_units"),
    ("decomposition_recall", "gold_decomposed", "gold_units"),
    ("decomposition_traceable", "claims_traceable", "claims"),
    ("evidence_found_truth", "truth_with_evidence", "truth_claims"),
    ("quote_verified_rate", "quotes_verified", "quotes"),
    ("evidence_partial", "gold_ev_partial", "gold_ev_claims"),
    ("evidence_complete", "gold_ev_complete", "gold_ev_claims"),
    ("ee_accuracy_hallucinated", "ee_halluc_correct", "ee_halluc"),
    ("ee_accuracy_truth", "ee_truth_correct", "ee_truth"),
)


def probe_metrics(examples: list[Example], reports: list[Report], *, n_bootstrap: int = 1000, seed: int = 0
                  ) -> dict[str, Any]:
    """All step metrics with bootstrap CIs (plain function, usable outside the bench runner)."""
    rows = [item_counts(e, r) for e, r in zip(examples, reports)]
    table = np.array([[row.get(k, 0) for k in COUNTERS] for row in rows], dtype=float).reshape(-1, len(COUNTERS))

    def ci(stat: Callable[[np.ndarray], float | None]) -> dict[str, Any]:
        return M.bootstrap_ci(stat, len(rows), n_resamples=n_bootstrap, seed=seed)

    out: dict[str, Any] = {name: ci(_ratio(table, num, den)) for name, num, den in METRICS}
    out["claim_f1"] = ci(_f1(table))
    out["ee_accuracy"] = ci(_ee_combined(table))
    out["counts"] = {k: int(table[:, i].sum()) for i, k in enumerate(COUNTERS)}
    out["has_probe_steps"] = sum(isinstance(r.details.get("steps"), dict) for r in reports)
    return out


def _by_difficulty(examples: list[Example], reports: list[Report]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        groups[e.difficulty or "-"].append(i)
    out = {}
    for name in sorted(groups):
        idx = groups[name]
        m = probe_metrics([examples[i] for i in idx], [reports[i] for i in idx], n_bootstrap=0)
        out[name] = {"n": len(idx), **{k: m[k]["value"] for k in ("claim_precision", "claim_recall", "claim_f1",
                                                                   "decomposition_recall")}}
    return out


@register_suite("probe_steps", applies=lambda examples: any(e.gold_spans is not None for e in examples))
def probe_steps_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    from halluscope.bench.builtin_suites import md_table

    with_gold = [(e, r) for e, r in zip(examples, reports) if e.gold_spans is not None]
    exs, reps, n_unscored = scored_pairs([e for e, _ in with_gold], [r for _, r in with_gold])
    m = probe_metrics(exs, reps, n_bootstrap=ctx.n_bootstrap, seed=ctx.seed)
    m.update({"n": len(with_gold), "n_scored": len(exs), "n_unscored": n_unscored})
    m["by_difficulty"] = _by_difficulty(exs, reps)
    result = SuiteResult(metrics=m)
    result.tables.append((
        f"PROBE claim-level localization (n={len(exs)}; {n_unscored} unscored left out; "
        "char-level P/R/F1: see the span suite)",
        md_table(["claim P", "claim R", "claim F1", "flagged claims", "gold units"],
                 [[m["claim_precision"], m["claim_recall"], m["claim_f1"], m["counts"]["pred_claims"],
                   m["counts"]["gold_units"]]]),
    ))
    if m["has_probe_steps"]:
        result.tables.append((
            "PROBE steps (proxies where gold is missing: see halluscope.bench.suite_probe)",
            md_table(["decomp. recall", "decomp. traceable", "EF partial", "EF complete", "EF truth-claim proxy",
                      "quotes verified", "EE acc.", "EE acc. halluc.", "EE acc. truth (proxy)"],
                     [[m["decomposition_recall"], m["decomposition_traceable"], m["evidence_partial"],
                       m["evidence_complete"], m["evidence_found_truth"], m["quote_verified_rate"],
                       m["ee_accuracy"], m["ee_accuracy_hallucinated"], m["ee_accuracy_truth"]]]),
        ))
    if len(m["by_difficulty"]) > 1:
        result.tables.append((
            "Claim-level localization by difficulty",
            md_table(["difficulty", "n", "claim P", "claim R", "claim F1", "decomp. recall"],
                     [[d, v["n"], v["claim_precision"], v["claim_recall"], v["claim_f1"], v["decomposition_recall"]]
                      for d, v in m["by_difficulty"].items()]),
        ))
    return result
