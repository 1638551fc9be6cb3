"""The ``probe_steps`` bench suite: PROBE's step metrics on the items with gold claims, as tables."""

from __future__ import annotations

import os

from halluscope.bench import metrics as M
from halluscope.bench.suite_probe.gold import has_gold
from halluscope.bench.suite_probe.matching import claim_matcher
from halluscope.bench.suite_probe.metrics import METRIC_KEYS, OWN_METRICS, PAPER_METRICS, _by_difficulty, probe_metrics
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite, scored_pairs
from halluscope.records import Example, Report


@register_suite("probe_steps", applies=lambda examples: any(has_gold(e) for e in examples))
def probe_steps_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    from halluscope.bench.builtin_suites import both, md_table, with_coverage

    with_gold = [(e, r) for e, r in zip(examples, reports) if has_gold(e)]
    exs, reps, n_unscored = scored_pairs([e for e, _ in with_gold], [r for _, r in with_gold])
    kind = ctx.extra.get("claim_matching") or os.environ.get("HALLUSCOPE_CLAIM_MATCHING", "").strip() or "lexical"
    similarity, threshold, matching = claim_matcher(kind)
    kw = {"n_bootstrap": ctx.n_bootstrap, "seed": ctx.seed, "similarity": similarity, "min_similarity": threshold}
    m = probe_metrics(exs, reps, **kw)
    # every item, the headline: an unscored report at its worst outcome (counts.unscored_item_counts), and a gold
    # claim a scored report gave no outcome counted as a miss
    every = probe_metrics([e for e, _ in with_gold], [r for _, r in with_gold], counts_every_item=True, **kw)
    for key in METRIC_KEYS:
        m[key] = with_coverage(m[key], len(exs), len(with_gold))
        m[f"{key}_all"] = with_coverage(every[key], len(exs), len(with_gold))
    m["counts_all"] = every["counts"]
    m.update(
        {
            "n": len(with_gold),
            "n_scored": len(exs),
            "n_unscored": n_unscored,
            "coverage": M.coverage(len(exs), len(with_gold)),
            "claim_matching": matching,
        }
    )
    m["by_difficulty"] = _by_difficulty(exs, reps, similarity=similarity, min_similarity=threshold)
    counts = m["counts"]
    result = SuiteResult(metrics=m)
    title = (
        f"PROBE step metrics as the paper defines them (coverage {len(exs)}/{len(with_gold)}; 'all', the "
        f"headline, counts an unscored item at its worst outcome and a gold claim the method gave no outcome as a "
        f"miss; {counts['items_complete']} with complete gold claims, "
        f"{counts['items_gold_evidence']} with gold evidence; claim matching {matching}"
        + (
            f"; EF complete capped: {m['evidence_finding_complete']['capped']['note']}"
            if m["evidence_finding_complete"].get("capped")
            else ""
        )
        + "; '-' = not computable, reasons in results.json)"
    )
    result.tables.append(
        (
            title,
            md_table(
                [
                    "decomp. P",
                    "decomp. R",
                    "EF partial",
                    "EF complete",
                    "EE acc.",
                    "loc. P (chars)",
                    "loc. R (chars)",
                    "loc. F1",
                ],
                [[both(m, k) for k in PAPER_METRICS]],
            ),
        )
    )
    result.tables.append(
        (
            "Our own PROBE measures (not the paper's metrics; proxies assume what gold lacks)",
            md_table(
                [
                    "decomp. R (halluc. gold)",
                    "EE acc. truth",
                    "EE acc. halluc.",
                    "EF truth proxy",
                    "EE acc. truth proxy",
                    "quotes verified",
                ],
                [[both(m, k) for k in OWN_METRICS]],
            ),
        )
    )
    if len(m["by_difficulty"]) > 1:
        result.tables.append(
            (
                "PROBE localization by difficulty",
                md_table(
                    ["difficulty", "n", "loc. P", "loc. R", "loc. F1", "decomp. R (halluc. gold)"],
                    [
                        [
                            d,
                            v["n"],
                            v["localization_precision"],
                            v["localization_recall"],
                            v["localization_f1"],
                            v["decomposition_recall_hallucinated"],
                        ]
                        for d, v in m["by_difficulty"].items()
                    ],
                ),
            )
        )
    return result
