"""Building the table's cells: our value for each (row, metric) from the row's bench results (or the reason it
cannot be computed), its coverage, the row's cost, and the paper's number beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from halluscope.bench.reproduce.papers import PaperNumber
from halluscope.bench.reproduce.spec import SUITE_NEEDS, Metric, Protocol, Row


def _node(metrics: dict[str, Any], suite: str, path: tuple[str, ...]) -> tuple[Any, dict[str, Any] | None]:
    """(the value node at ``path``, the dict holding it) or (None, None) when a key is missing."""
    node: Any = metrics[suite]
    parent = None
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None, None
        parent, node = node, node[key]
    return node, parent


def _ci_json(node: Any) -> dict[str, Any] | None:
    if isinstance(node, dict) and "value" in node:
        return {"value": node.get("value"), "low": node.get("low"), "high": node.get("high"), "n": node.get("n")}
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return {"value": float(node), "low": None, "high": None, "n": None}
    return None


def _metric_value(results: dict[str, Any], metric: Metric) -> tuple[dict[str, Any] | None, str | None]:  # noqa: C901 - one branch per metric kind of the paper tables, read top to bottom
    """(our value as {"value", "low", "high", "n", "scored", "coverage"}, or None with the reason).

    The headline ``value`` counts every item (an unscored one as the worst outcome, the suite's ``<key>_all``);
    ``scored`` is the value over the scored items alone and ``coverage`` how many those are."""
    metrics = results.get("metrics", {})
    if metric.suite in results.get("suite_errors", {}):
        return None, f"suite {metric.suite} failed: {results['suite_errors'][metric.suite]}"
    if not metrics.get(metric.suite):
        if results.get("n_scored", 1) == 0:
            return None, _all_unscored(results)
        said = [t["markdown"] for t in results.get("tables", []) if t["suite"] == metric.suite]
        if said:  # e.g. "Not computed: no judge model is available ..."
            return None, " ".join(said[0].split())[:300]
        return (
            None,
            f"suite {metric.suite} did not apply: the data has no {SUITE_NEEDS.get(metric.suite, 'such labels')}",
        )
    level = None
    path = metric.path
    if metric.paper_path is not None:
        found, _ = _node(metrics, metric.suite, metric.paper_path)
        path, level = (
            (metric.paper_path, metric.level_names[0]) if found is not None else (metric.path, metric.level_names[1])
        )
    node, parent = _node(metrics, metric.suite, path)
    if parent is None:
        return None, f"suite {metric.suite} reported no {'.'.join(path)}"
    scored = _ci_json(node)
    if scored is None and node is not None:
        return None, f"suite {metric.suite} reported {'.'.join(path)} as {type(node).__name__}"
    all_node = parent.get(f"{path[-1]}_all")
    if all_node is None and isinstance(node, dict) and isinstance(node.get("all"), dict):
        all_node = node["all"]  # e.g. the stress suite's per-perturbation means keep theirs inside
    every = _ci_json(all_node)
    suite_m = metrics[metric.suite]
    cov = (node.get("coverage") if isinstance(node, dict) else None) or suite_m.get("coverage")
    if cov is None and "n" in suite_m and "n_unscored" in suite_m:
        cov = {"scored": suite_m["n"] - suite_m["n_unscored"], "total": suite_m["n"]}
    if every is None and cov is not None and cov["scored"] == cov["total"]:
        every = scored  # nothing unscored: the scored value counts every item
    ours: dict[str, Any] | None = None
    if every is not None and every["value"] is not None:
        ours = {**every, "scored": scored if scored and scored["value"] is not None else None, "coverage": cov}
    elif scored is not None and scored["value"] is not None:
        ours = {
            **scored,
            "scored": scored,
            "coverage": cov,
            "all_missing": "the suite gives no value counting every item for this metric",
        }
    if ours is not None and results.get("n_scored", 1) == 0:
        return None, _all_unscored(results)  # nothing scored: the worst case would be the rule alone, not a result
    if ours is not None:
        if isinstance(all_node, dict) and all_node.get("bound"):
            ours["bound"] = True  # a value provably no higher than the exact minimum (worst_case.CORRELATION_RULE)
        if isinstance(node, dict) and "unscored" in node:  # e.g. the stress suite's per-perturbation unscored rows
            ours["unscored"] = node["unscored"]
        if level is not None:
            ours["level"] = level
        return ours, None
    # the suite's own word on why the value counting every item is undefined (e.g. the gold lacks something)
    why = next((x.get("reason") for x in (all_node, node) if isinstance(x, dict) and x.get("reason")), None)
    if why is None and results.get("n_scored", 1) == 0:
        return None, _all_unscored(results)
    n = (scored or {}).get("n")
    return None, (why or metric.undefined or "undefined on these items") + (f" (n={n})" if n is not None else "")


def _coverage(results: dict[str, Any], metric: Metric, ours: dict[str, Any] | None) -> str | None:
    """When some items were unscored, say how many and why (the headline value counts them as the worst outcome)."""
    rule = (results.get("metrics", {}).get(metric.suite) or {}).get("worst_case")  # the suite's own rule, if stated
    if ours is not None and metric.subset:
        return (
            (
                f"{ours['unscored']} of its rows unscored; counted as the worst outcome in the headline value"
                + (f" ({rule})" if rule else "")
            )
            if ours.get("unscored")
            else None
        )
    cov = (ours or {}).get("coverage")
    if ours is None or not cov or cov["scored"] >= cov["total"]:
        return None
    parts = [f"{results['n_unscored']} unscored by the method"] if results["n_unscored"] else []
    judge = (
        (results.get("metrics", {}).get(metric.suite) or {}).get("n_judge_unscored")
        if metric.suite == "final_matching"
        else 0
    )
    if judge:
        parts.append(f"{judge} by the judge")
    return (
        f"{cov['total'] - cov['scored']} of {cov['total']} items unscored"
        + (f" ({', '.join(parts)})" if parts else "")
        + "; counted as the worst outcome in the headline value"
        + (f" ({rule})" if rule else "")
    )


def _all_unscored(results: dict[str, Any]) -> str:
    reasons = "; ".join(f"{n} x {r}" for r, n in (results.get("unscored_reasons") or {}).items())
    return f"all {results.get('n', '?')} items unscored" + (f" ({reasons})" if reasons else "")


def _usage(node: dict[str, Any] | None) -> dict[str, int]:
    node = node or {}
    return {k: int(node.get(k, 0) or 0) for k in ("calls", "prompt_tokens", "completion_tokens", "cache_hits")}


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a[k] + b[k] for k in a}


def _selection_usage(results: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """LLM usage (all items, and this run) of the dev-split selection runs the bench made for this row (FINAL's
    prompt variant), read from their own results.json; zero when there were none."""
    total, now = _usage(None), _usage(None)
    record = results.get("final_protocol") or {}
    for candidate in (record.get("variant") or {}).get("candidates", []):
        path = Path(candidate.get("run_dir") or "") / "results.json"
        if not path.is_file():
            continue
        sub = json.loads(path.read_text(encoding="utf-8"))
        judge = sub.get("metrics", {}).get("final_matching") or {}
        total = _add(_add(total, _usage(sub.get("usage"))), _usage(judge.get("judge_usage")))
        now = _add(_add(now, _usage(sub.get("usage_this_run"))), _usage(judge.get("judge_usage_this_run")))
    return total, now


def _cost(results: dict[str, Any]) -> dict[str, Any]:
    """What the row cost. Calls and tokens count requests that reached the model (answers from the response
    cache are counted apart), summed over the row's items (as first computed; stable across resumes), the
    selection runs (FINAL's prompt variant) and the matching judge; per item = divided by the row's n."""
    n = max(1, results["n"])
    method = _usage(results["usage"])
    fm = results.get("metrics", {}).get("final_matching") or {}
    judge = _usage(fm.get("judge_usage"))
    selection, selection_now = _selection_usage(results)
    total = _add(_add(method, judge), selection)

    def per(u: dict[str, int]) -> dict[str, float]:
        return {
            "calls": round(u["calls"] / n, 3),
            "tokens": round((u["prompt_tokens"] + u["completion_tokens"]) / n, 1),
            "cache_hits": round(u["cache_hits"] / n, 3),
        }

    return {
        "calls_per_item": per(total)["calls"],
        "tokens_per_item": per(total)["tokens"],
        "cache_hits_per_item": per(total)["cache_hits"],
        "calls": total["calls"],
        "tokens": total["prompt_tokens"] + total["completion_tokens"],
        "method": method,
        "judge": judge if fm else None,
        "selection": selection if results.get("final_protocol") else None,
        "judge_calls_per_item": per(judge)["calls"] if fm else None,
        "calls_this_run": results["usage_this_run"]["calls"]
        + _usage(fm.get("judge_usage_this_run"))["calls"]
        + selection_now["calls"],
        "wall_time_s": results["wall_time_s"],
        "item_time_s": results["item_time_s"]["total"],
    }


def _paper_cell(protocol: Protocol, row: Row, metric: Metric, paper_model: str | None) -> dict[str, Any] | None:
    number = protocol.paper.lookup(row.paper_row, metric.key, paper_model)
    if number is None:
        return None
    return _number_json(number, row.analogue)


def _number_json(number: PaperNumber, analogue: bool) -> dict[str, Any]:
    return {**number.model_dump(), "display": number.display(), "cite": number.cite(), "analogue": analogue}
