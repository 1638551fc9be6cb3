"""The explanation suite of ``halluscope bench``: the metrics of :mod:`halluscope.bench.explain_score` on a targets
file of the explanation set (``halluscope bench --dataset explain_targets.jsonl --method ...``), whose Examples carry
their gold in ``meta["explain"]`` (:func:`halluscope.bench.explain_set.write_targets`). For any other dataset it
does not apply."""

from __future__ import annotations

import json
from typing import Any

from halluscope.bench.explain_score import markdown_table, score_reports
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite
from halluscope.records import Example, Report


def _has_gold(examples: list[Example]) -> bool:
    return any(isinstance(e.meta.get("explain"), dict) for e in examples)


@register_suite("explanations", applies=_has_gold)
def explanations_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    pairs = [(e, r) for e, r in zip(examples, reports) if isinstance(e.meta.get("explain"), dict)]
    items: list[dict[str, Any]] = [
        {**e.meta["explain"], "id": e.id, "source": e.source, "target": e.target} for e, _ in pairs
    ]
    rows = {e.id: {"id": e.id, "report": json.loads(r.model_dump_json())} for e, r in pairs}
    summary, _ = score_reports(items, rows, n_bootstrap=ctx.n_bootstrap, seed=ctx.seed)
    table = markdown_table([(ctx.method, summary)])
    return SuiteResult(metrics=summary, tables=[("Explanations", table)])
