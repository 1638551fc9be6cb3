"""Reason first vs verdict first, label score vs probability score, on a few balanced SummEdits items.

    python benchmarks/verdict_first.py --model embedded:qwen2.5-coder-1.5b --per-class 6 \
        --systems "dove order=verdict_first" "dcr order=verdict_first" "dove" --out bench_out/verdict_first

Per system (a method name and ``key=value`` options) and item: wall seconds, LLM calls, prompt and completion
tokens (``Report.usage``), the label score and the probability score (``details["score"]``: both are computed
from the same verdicts), and the item's gold label. The summary gives, per system, the mean seconds / calls /
tokens per item and the SummEdits AUC of the label score and of the probability score over the scored items,
with their counts. Items: ``--per-class`` consistent and as many inconsistent SummEdits items, taken in a fixed
order (by item id hash) across the domains. Every row is appended to ``rows.jsonl`` as soon as it is measured;
a rerun skips the (system, item) rows already there. Small n: an AUC on 12 items has a wide interval (it is
printed with a bootstrap 95 % CI).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _pick(examples: list[Any], per_class: int) -> list[Any]:
    ordered = sorted(examples, key=lambda e: hashlib.sha256(e.id.encode()).hexdigest())
    by_label: dict[int, list[Any]] = {0: [], 1: []}
    domains: dict[int, dict[str, int]] = {0: {}, 1: {}}
    for e in ordered:  # round-robin over domains within each class
        if e.label not in by_label or len(by_label[e.label]) >= per_class:
            continue
        d = str(e.meta.get("domain") or e.group or "")
        if domains[e.label].get(d, 0) > per_class // 4:
            continue
        domains[e.label][d] = domains[e.label].get(d, 0) + 1
        by_label[e.label].append(e)
    return [e for pair in zip(by_label[1], by_label[0]) for e in pair]  # alternating: a cut run stays balanced


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded:qwen2.5-coder-1.5b")
    parser.add_argument("--dataset", default="summedits")
    parser.add_argument("--per-class", type=int, default=6)
    parser.add_argument("--systems", nargs="+", default=["dove order=verdict_first", "dove"])
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", default="bench_out/verdict_first")
    parser.add_argument("--time-budget-s", type=float, default=None)
    args = parser.parse_args()

    from halluscope.bench.datasets import load_dataset
    from halluscope.bench.metrics import bootstrap_ci, roc_auc
    from halluscope.config import Config
    from halluscope.methods import get_method

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    done = set()
    rows: list[dict[str, Any]] = []
    if rows_path.exists():
        for line in rows_path.read_text().splitlines():
            row = json.loads(line)
            rows.append(row)
            done.add((row["system"], row["item"]))
    items = _pick(load_dataset(args.dataset).examples, args.per_class)
    config = Config(model=args.model, cache=False, max_tokens=args.max_tokens)
    started = time.monotonic()
    methods = {}
    for spec in args.systems:
        name, *opts = spec.split()
        options = dict(o.split("=", 1) for o in opts)
        methods[spec] = get_method(name, config=config, **options)
    for item in items:
        for spec, method in methods.items():
            if (spec, item.id) in done:
                continue
            if args.time_budget_s is not None and time.monotonic() - started > args.time_budget_s:
                break
            t0 = time.perf_counter()
            report = method.check(item.source, item.target)
            seconds = time.perf_counter() - t0
            info = report.details.get("score") or {}
            row = {
                "system": spec,
                "item": item.id,
                "gold": item.label,
                "domain": item.meta.get("domain"),
                "seconds": round(seconds, 2),
                "calls": report.usage.calls,
                "prompt_tokens": report.usage.prompt_tokens,
                "completion_tokens": report.usage.completion_tokens,
                "cached_prompt_tokens": report.usage.cached_prompt_tokens,
                "score": report.score,
                "label_score": info.get("label_score", report.score),
                "probability_score": info.get("probability_score"),
                "score_kind": info.get("kind"),
                "unscored_reason": report.unscored_reason,
                "claims": len(report.verdicts),
                "findings": len(report.findings),
                "loadavg": round(os.getloadavg()[0], 2),
            }
            rows.append(row)
            with rows_path.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    summary = []
    for spec in args.systems:
        mine = [r for r in rows if r["system"] == spec]
        if not mine:
            continue
        line: dict[str, Any] = {
            "system": spec,
            "items": len(mine),
            "seconds_per_item": round(sum(r["seconds"] for r in mine) / len(mine), 1),
            "calls_per_item": round(sum(r["calls"] for r in mine) / len(mine), 2),
            "prompt_tokens_per_item": round(sum(r["prompt_tokens"] for r in mine) / len(mine)),
            "completion_tokens_per_item": round(sum(r["completion_tokens"] for r in mine) / len(mine)),
            "load_average": round(sum(r["loadavg"] for r in mine) / len(mine), 1),
        }
        for key in ("label_score", "probability_score"):
            scored = [r for r in mine if r[key] is not None]
            labels, scores = [r["gold"] for r in scored], [r[key] for r in scored]
            auc = roc_auc(labels, scores) if len(set(labels)) == 2 else None
            ci = None
            if auc is not None:
                ci = bootstrap_ci(
                    lambda idx: roc_auc([labels[i] for i in idx], [scores[i] for i in idx]),  # noqa: B023 - called here
                    len(labels),
                )
            line[key.replace("_score", "_auc")] = None if auc is None else round(auc, 3)
            line[key.replace("_score", "_auc_ci")] = ci
            line[key.replace("_score", "_n")] = len(scored)
        summary.append(line)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
