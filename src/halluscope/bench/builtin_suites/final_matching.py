"""The ``final_matching`` suite: FINAL recall/precision/F1 of the findings' descriptions via an LLM judge."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.bench import metrics as M
from halluscope.bench import worst_case as W
from halluscope.bench.builtin_suites.shared import _ci, both, md_table, with_coverage
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite, scored_pairs
from halluscope.records import Example, Report, Usage

# --- FINAL description matching --------------------------------------------------------------------

FINAL_MATCHES_FILE = "final_matches.jsonl"


def predicted_descriptions(report: Report) -> list[str]:
    return [f.description.strip() for f in report.findings if f.description.strip()]


def _load_matches(path: Path) -> dict[str, Any]:
    from pydantic import ValidationError

    from halluscope.bench.judge import MatchResult

    stored: dict[str, MatchResult] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                result = MatchResult.model_validate_json(line)
            except ValidationError:
                continue  # a line cut short by an interrupted run: that item is judged again
            stored[result.example_id] = result
    return stored


@register_suite("final_matching", applies=lambda examples: any(e.descriptions is not None for e in examples))
async def final_matching_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    """FINAL P/R/F1 (micro over items): an LLM judge (``ctx.judge``) aligns each item's predicted
    descriptions (``Report.findings[*].description``) with its gold ``descriptions``. Judge results are
    stored in ``final_matches.jsonl`` as they arrive, so a re-run asks the judge only about new items
    (and, with ``ctx.extra["retry_unscored"]``, again about items whose judge reply was unusable)."""
    from halluscope.bench.judge import MATCH_PROMPT, match_descriptions, match_key
    from halluscope.prompts import apply_overrides

    if ctx.judge is None:
        return SuiteResult(
            tables=[
                (
                    "FINAL matching",
                    "Not computed: no judge model (a method with no model, or --judge-model none). Pass "
                    "--judge-model (and --judge-base-url) to match descriptions.",
                )
            ]
        )

    prompt = apply_overrides(MATCH_PROMPT, ctx.prompts_dir)
    with_gold = [(e, r) for e, r in zip(examples, reports) if e.descriptions is not None]
    exs, reps, n_unscored = scored_pairs([e for e, _ in with_gold], [r for _, r in with_gold])
    judge_name = ctx.judge.name if ctx.judge is not None else "none"
    path = ctx.out_dir / FINAL_MATCHES_FILE
    stored = _load_matches(path)
    results: dict[str, Any] = {}
    todo = []
    for e, r in zip(exs, reps):
        gold, pred = list(e.descriptions or []), predicted_descriptions(r)
        old = stored.get(e.id)
        retry = old is not None and old.matches is None and ctx.extra.get("retry_unscored", False)
        if old is not None and old.key == match_key(judge_name, gold, pred, prompt) and not retry:
            results[e.id] = old
        else:
            todo.append((e, gold, pred))
    judge_usage = Usage()
    started = time.perf_counter()
    if todo:
        from halluscope.bench.progress import progress_bar

        ctx.out_dir.mkdir(parents=True, exist_ok=True)
        sem = asyncio.Semaphore(max(1, getattr(ctx.judge, "max_concurrency", 4) or 4))

        async def one(e: Example, gold: list[str], pred: list[str]) -> Any:
            async with sem:
                return await match_descriptions(ctx.judge, e.id, e.target, gold, pred, prompt)

        with path.open("a", encoding="utf-8") as fh, progress_bar(ctx.extra.get("progress", False)) as bar:
            task = bar.add_task(f"FINAL matching judge ({judge_name})", total=len(todo))
            for fut in asyncio.as_completed([one(*t) for t in todo]):
                res = await fut
                results[res.example_id] = res
                for call in res.calls:
                    judge_usage = judge_usage + call.usage
                fh.write(res.model_dump_json() + "\n")
                fh.flush()
                bar.advance(task)
    judge_time = round(time.perf_counter() - started, 3)
    ordered = [results[e.id] for e in exs]
    usable = [res for res in ordered if res.matches is not None]
    counts = np.array([(res.matched_gold, res.n_pred, res.n_gold) for res in usable], dtype=int).reshape(-1, 3)
    no_gold = [res for res in usable if res.n_gold == 0]
    # every item with gold, each unscored one at its worst outcome (worst_case.DESCRIPTIONS_RULE): the judge could
    # not score it -> its predictions all wrong; the method could not -> no match and as many wrong descriptions
    # as the method gave on any one scored item (at least one)
    by_id = {res.example_id: res for res in usable}
    n_wrong = max([1, *(len(predicted_descriptions(r)) for r in reps)])
    counts_all = np.array(
        [
            (by_id[e.id].matched_gold, by_id[e.id].n_pred, by_id[e.id].n_gold)
            if e.id in by_id
            else (0, len(predicted_descriptions(r)), len(e.descriptions or []))
            if r.score is not None
            else W.worst_description_counts(len(e.descriptions or []), n_wrong)
            for e, r in with_gold
        ],
        dtype=int,
    ).reshape(-1, 3)

    def stat(table: np.ndarray, key: str) -> Callable[[np.ndarray], float]:
        return lambda idx: getattr(M.final_prf(table[idx].tolist()), key)

    m: dict[str, Any] = {
        "n": len(with_gold),
        "n_unscored": n_unscored,
        "n_judge_unscored": len(ordered) - len(usable),
        "n_scored": len(usable),
        "n_judged": sum(res.judged for res in ordered),
        "coverage": M.coverage(len(usable), len(with_gold)),
        "judge_model": judge_name,
        "judge_prompt_version": f"{prompt.name}@{prompt.version}",
        "judge_is_evaluated_model": judge_name == ctx.model,
        "predictions": int(counts[:, 1].sum()),
        "gold": int(counts[:, 2].sum()),
        "gold_matched": int(counts[:, 0].sum()),
        "false_positives_on_consistent_items": int(sum(res.n_pred for res in no_gold)),
        "judge_usage": sum((c.usage for res in ordered for c in res.calls), Usage()).model_dump(),
        "judge_usage_this_run": judge_usage.model_dump(),
        "judge_time_s": judge_time,
        "judge_items_this_run": len(todo),
        "averaging": "micro over items (counts summed, then ratios)",
        "worst_case": W.DESCRIPTIONS_RULE,
        "worst_case_wrong_descriptions": n_wrong,
    }
    for key in ("recall", "precision", "f1"):
        m[key] = with_coverage(_ci(ctx, stat(counts, key), len(usable)), len(usable), len(with_gold))
        m[f"{key}_all"] = with_coverage(_ci(ctx, stat(counts_all, key), len(with_gold)), len(usable), len(with_gold))
    if m["predictions"] == 0:
        m["note"] = "the method made no predictions: precision is 0 by convention (nothing predicted correctly)"
    reasons = [res.unscored_reason for res in ordered if res.unscored_reason]
    if reasons:
        m["judge_unscored_reasons"] = reasons[:20]
    result = SuiteResult(metrics=m)
    judge_text = f"{judge_name} (the evaluated model judges itself)" if m["judge_is_evaluated_model"] else judge_name
    result.tables.append(
        (
            f"FINAL matching (judge {judge_text}; coverage {len(usable)}/{len(with_gold)}: "
            f"{n_unscored} unscored by the "
            f"method and {m['n_judge_unscored']} by the judge; 'all' counts them at their worst: no match, and "
            f"{n_wrong} wrong description(s) for an item the method left unscored)",
            md_table(
                [
                    "recall",
                    "precision",
                    "F1",
                    "judge",
                    "predictions",
                    "gold",
                    "gold matched",
                    "items judged",
                    "judge LLM calls (tokens)",
                ],
                [
                    [
                        both(m, "recall"),
                        both(m, "precision"),
                        both(m, "f1"),
                        judge_text,
                        m["predictions"],
                        m["gold"],
                        m["gold_matched"],
                        m["n_judged"],
                        f"{m['judge_usage']['calls']} ({m['judge_usage']['prompt_tokens']}"
                        f"+{m['judge_usage']['completion_tokens']})",
                    ]
                ],
            ),
        )
    )
    return result
