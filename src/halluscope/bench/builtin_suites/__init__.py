"""The built-in metric suites: each applies when the dataset carries the labels it needs.

| suite | applies when examples have | metrics |
|---|---|---|
| ``binary`` | ``label`` | AUC-ROC, balanced accuracy (threshold from the dev split), P/R/F1 of "inconsistent" |
| ``correlation`` | ``human_score`` | Pearson, Spearman, Kendall |
| ``montage_auc`` | ``group`` + ``difficulty`` | AUC-ROC per difficulty and averaged (MontageLie protocol) |
| ``span`` | ``gold_spans`` | character-level P/R/F1 of finding spans vs gold spans |
| ``final_matching`` | ``descriptions`` | FINAL recall/precision/F1 via an LLM judge |

Unscored items: every metric ``K`` is computed twice. ``K`` is over the scored items (as before) and carries
``coverage`` (scored / total); ``K_all``, the headline, is the minimum over every outcome the unscored items could
have had (:data:`worst_case.HEADLINE_RULE`): the wrong side for AUC and balanced accuracy
(:func:`metrics.worst_case_scores`), the exact minimum over the unscored items' scores for correlations, pooled
and per document (:func:`worst_case.worst_correlation`, :func:`worst_case.worst_per_document`; a bound, marked,
where the search would be too costly), no match and as many wrong descriptions as the method gave on any scored
item for FINAL, every character outside the gold flagged for spans. Tables show both with the coverage: a method
that fails on the hard items cannot look better than one that tries.
"""

# imported in the order the suites were registered before the split (the order of the suite registry)
from halluscope.bench.builtin_suites.binary import DEV_SPLIT_NAMES, binary_suite, pick_dev_split
from halluscope.bench.builtin_suites.correlation import correlation_suite, document_key, per_document_correlation
from halluscope.bench.builtin_suites.final_matching import (
    FINAL_MATCHES_FILE,
    final_matching_suite,
    predicted_descriptions,
)
from halluscope.bench.builtin_suites.montage import montage_suite
from halluscope.bench.builtin_suites.shared import both, fmt, fmt_cov, md_table, with_coverage
from halluscope.bench.builtin_suites.span import predicted_spans, span_suite

__all__ = [
    "DEV_SPLIT_NAMES",
    "FINAL_MATCHES_FILE",
    "binary_suite",
    "both",
    "correlation_suite",
    "document_key",
    "final_matching_suite",
    "fmt",
    "fmt_cov",
    "md_table",
    "montage_suite",
    "per_document_correlation",
    "pick_dev_split",
    "predicted_descriptions",
    "predicted_spans",
    "span_suite",
    "with_coverage",
]
