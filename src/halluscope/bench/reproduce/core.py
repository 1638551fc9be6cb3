"""The reproduce engine: a protocol is a dataset (shared dev data, or a set built from it), a list of rows
(one halluscope method + options per row of the paper's table) and, per row, the metrics that map suite
results onto the paper's columns. :func:`run_reproduce` builds the data (resumably), runs one
:func:`~halluscope.bench.runner.run_bench` per row (each resumable, in ``<out>/rows/<row>/``), and puts the
paper's published number next to ours for every (row, metric), or the reason ours cannot be computed.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from halluscope.bench.builtin_suites import fmt
from halluscope.bench.reproduce.builders import BuildError, BuildMode, BuiltSet
from halluscope.bench.reproduce.checkpoints import Checkpoint, locate
from halluscope.bench.reproduce.papers import PaperNumber, PaperResults, load_paper_results
from halluscope.config import Config

REPRODUCE_JSON = "reproduce.json"
REPRODUCE_MD = "reproduce.md"

# What a suite needs from the data, for the "cannot compute" reason when it did not apply.
SUITE_NEEDS = {
    "final_matching": "gold inconsistency descriptions",
    "correlation": "human consistency scores",
    "montage_auc": "montage groups (truths and lies with difficulties)",
    "stress": "perturbation groups (an original row per group)",
    "probe_steps": "gold hallucinated spans",
    "span": "gold hallucinated spans",
    "rai_improvement": "improvement rounds (the improve method)",
    "binary": "binary labels",
}


class ReproduceError(RuntimeError):
    """A reproduce run that cannot go ahead (unknown paper or row, bad options, unusable folder)."""


@dataclass(frozen=True)
class Metric:
    """One column of the paper's table: where our value is in the row's bench results, and the paper's key."""

    key: str  # the metric key in the paper's results file (and in reproduce.json)
    label: str  # shown in the table
    suite: str  # the bench suite that computes it
    path: tuple[str, ...]  # where the value is inside results["metrics"][suite]
    undefined: str | None = None  # why the value can be undefined, when that is known in advance
    subset: bool = False  # the value is over a subset of the items by design (e.g. one perturbation's rows)
    paper_path: tuple[str, ...] | None = None
    """Where the paper's variant of the value is when the data allows it (e.g. the per-document correlation when
    documents repeat); ``path`` is used otherwise. The record names which one was used (``level``)."""
    level_names: tuple[str, str] = ("paper", "fallback")  # (name of paper_path's value, name of path's value)


@dataclass(frozen=True)
class Row:
    """One row of the paper's table. ``method=None``: a row of the paper that halluscope does not implement
    (kept for the layout, with ``reason``)."""

    id: str
    paper_row: str
    metrics: tuple[Metric, ...]
    method: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    dataset: str = "main"
    reason: str | None = None
    analogue: bool = False  # the paper numbers shown are of the nearest analogue, not this method
    note: str | None = None
    checkpoint: Checkpoint | None = None  # the encoder checkpoint the row needs (its stage is in ``options``)

    def title(self) -> str:
        if self.method is None:
            return self.paper_row
        opts = " ".join(f"{k}={_opt(v)}" for k, v in self.options.items())
        return f"{self.id} (`{self.method}{' ' + opts if opts else ''}`)"


def _opt(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


@dataclass
class Context:
    """Everything a protocol needs to build its data and run its rows."""

    out_dir: Path
    config: Config
    data_dir: Path | None = None
    dataset: str | None = None
    sample: int | None = None
    seed: int = 0
    limit: int | None = None
    builder: BuildMode = "no-llm"
    build_options: dict[str, Any] = field(default_factory=dict)
    progress: bool = True
    select_holdout: float | None = None  # FINAL: share of the items held out (not scored) for the variant choice
    select_on: Any = None  # FINAL: a Dataset the choices are made on instead (e.g. a user's file)
    llm: Any = None  # an LLM to use instead of one built from ``config`` (tests: the scripted fake)
    _llm_built: Any = None

    def get_llm(self) -> Any:
        if self.llm is not None:
            return self.llm
        if self._llm_built is None:
            from halluscope.llm import get_llm

            self._llm_built = get_llm(self.config)
        return self._llm_built


@dataclass
class Protocol:
    """A paper's main evaluation protocol."""

    name: str
    description: str
    base_dataset: str
    rows: tuple[Row, ...]
    embedded_rows: tuple[str, ...]
    build: Callable[[Context], Awaitable[BuiltSet]]
    sample_applies_to: str  # "items" (bench subsample) or "base" (the items the set is built from)
    protocol_notes: tuple[str, ...] = ()
    explain_missing: Callable[[Row, Metric, BuiltSet], str | None] | None = None

    @property
    def paper(self) -> PaperResults:
        return load_paper_results(self.name)

    def row(self, row_id: str) -> Row:
        for r in self.rows:
            if r.id == row_id:
                return r
        raise ReproduceError(f"{self.name} has no row {row_id!r}; rows: {', '.join(r.id for r in self.rows)}")

    def runnable_rows(self) -> list[Row]:
        return [r for r in self.rows if r.method is not None]


def is_embedded(config: Config) -> bool:
    model = config.model
    return (model is None and not config.base_url) or model == "embedded" or bool(model and model.startswith("embedded:"))


def select_rows(protocol: Protocol, methods: Sequence[str] | None, embedded: bool) -> tuple[list[Row], str]:
    """The rows to run, and how they were chosen (printed and recorded)."""
    runnable = protocol.runnable_rows()
    if methods:
        wanted = [m.strip() for item in methods for m in item.split(",") if m.strip()]
        if wanted == ["all"]:
            return runnable, "all rows (--methods all)"
        chosen = []
        for name in wanted:
            matches = [r for r in runnable if r.id == name] or [r for r in runnable if r.method == name]
            if not matches:
                known = ", ".join(r.id for r in runnable)
                raise ReproduceError(f"{protocol.name} has no row or method {name!r}; rows: {known}")
            chosen += [r for r in matches if r not in chosen]
        return chosen, f"rows chosen with --methods: {', '.join(r.id for r in chosen)}"
    if embedded:
        chosen = [protocol.row(r) for r in protocol.embedded_rows]
        return chosen, (f"embedded model: only the cheap rows {', '.join(r.id for r in chosen)} run by default "
                        "(--methods all runs every row)")
    return runnable, "all rows"


# --------------------------------------------------------------------------------------------- running


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


def _metric_value(results: dict[str, Any], metric: Metric) -> tuple[dict[str, Any] | None, str | None]:
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
        return None, f"suite {metric.suite} did not apply: the data has no {SUITE_NEEDS.get(metric.suite, 'such labels')}"
    level = None
    path = metric.path
    if metric.paper_path is not None:
        found, _ = _node(metrics, metric.suite, metric.paper_path)
        path, level = (metric.paper_path, metric.level_names[0]) if found is not None else (metric.path, metric.level_names[1])
    node, parent = _node(metrics, metric.suite, path)
    if parent is None:
        return None, f"suite {metric.suite} reported no {'.'.join(path)}"
    scored = _ci_json(node)
    if scored is None and node is not None:
        return None, f"suite {metric.suite} reported {'.'.join(path)} as {type(node).__name__}"
    all_node = parent.get(f"{path[-1]}_all")
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
        ours = {**scored, "scored": scored, "coverage": cov,
                "all_missing": "the suite gives no value counting every item for this metric"}
    if ours is not None:
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
    if ours is not None and metric.subset:
        return f"{ours['unscored']} of its rows unscored" if ours.get("unscored") else None
    cov = (ours or {}).get("coverage")
    if ours is None or not cov or cov["scored"] >= cov["total"]:
        return None
    parts = [f"{results['n_unscored']} unscored by the method"] if results["n_unscored"] else []
    judge = (results.get("metrics", {}).get(metric.suite) or {}).get("n_judge_unscored") if metric.suite == "final_matching" else 0
    if judge:
        parts.append(f"{judge} by the judge")
    return (f"{cov['total'] - cov['scored']} of {cov['total']} items unscored" + (f" ({', '.join(parts)})" if parts else "")
            + "; counted as the worst outcome in the headline value")


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
        judge = (sub.get("metrics", {}).get("final_matching") or {})
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
        return {"calls": round(u["calls"] / n, 3), "tokens": round((u["prompt_tokens"] + u["completion_tokens"]) / n, 1),
                "cache_hits": round(u["cache_hits"] / n, 3)}

    return {"calls_per_item": per(total)["calls"], "tokens_per_item": per(total)["tokens"],
            "cache_hits_per_item": per(total)["cache_hits"],
            "calls": total["calls"], "tokens": total["prompt_tokens"] + total["completion_tokens"],
            "method": method, "judge": judge if fm else None, "selection": selection if results.get("final_protocol") else None,
            "judge_calls_per_item": per(judge)["calls"] if fm else None,
            "calls_this_run": results["usage_this_run"]["calls"] + _usage(fm.get("judge_usage_this_run"))["calls"]
            + selection_now["calls"],
            "wall_time_s": results["wall_time_s"], "item_time_s": results["item_time_s"]["total"]}


def _paper_cell(protocol: Protocol, row: Row, metric: Metric, paper_model: str | None) -> dict[str, Any] | None:
    number = protocol.paper.lookup(row.paper_row, metric.key, paper_model)
    if number is None:
        return None
    return _number_json(number, row.analogue)


def _number_json(number: PaperNumber, analogue: bool) -> dict[str, Any]:
    return {**number.model_dump(), "display": number.display(), "cite": number.cite(), "analogue": analogue}


async def run_row(protocol: Protocol, row: Row, built: BuiltSet, ctx: Context, *, judge: Any, options: dict[str, Any],
                  n_bootstrap: int, concurrency: int | None) -> dict[str, Any]:
    """Run one row's bench (resumable) and map its metrics; every failure becomes a reason, never an exception."""
    from halluscope.bench.runner import BenchError, run_bench
    from halluscope.methods import get_method, method_class

    record: dict[str, Any] = {"id": row.id, "paper_row": row.paper_row, "method": row.method,
                              "options": dict(row.options), "analogue": row.analogue, "note": row.note,
                              "status": "ok", "reason": None, "metrics": []}
    started = time.perf_counter()
    if row.checkpoint is not None:  # an encoder baseline: runs only where its checkpoint is on this machine
        location, missing = locate(row.id, row.checkpoint)
        if location is None:
            record.update(status="not installed", reason=missing, checkpoint=row.checkpoint.model,
                          metrics=[{"key": m.key, "label": m.label, "paper": None, "ours": None, "reason": missing}
                                   for m in row.metrics], wall_time_s=round(time.perf_counter() - started, 3))
            return record
        record.update(checkpoint=row.checkpoint.model, checkpoint_location=location)
        row = replace(row, options={**row.options, row.checkpoint.option: row.checkpoint.stage(location)})
    try:
        cls = method_class(row.method)  # type: ignore[arg-type]
        extra = {k: v for k, v in options.items() if k in cls.Options.model_fields and k not in row.options}
        record["options"] = {**extra, **row.options}
        method = get_method(row.method, llm=ctx.get_llm() if cls.uses_llm else None, config=ctx.config,
                            **record["options"])
        record["model"] = method.model_name
        dataset = built.datasets.get(row.dataset)
        if dataset is None:
            raise ReproduceError(f"the protocol built no {row.dataset!r} dataset")
        if not dataset.examples:
            raise ReproduceError(f"the {dataset.spec} set is empty: the builder produced no item "
                                 f"({'; '.join(f'{w}: {r} x{n}' for (w, r), n in built.skipped.most_common(3))})")
        on_items = protocol.sample_applies_to == "items" or built.builder in ("shared", "given")  # else: at build
        bench_sample, bench_limit = (ctx.sample, ctx.limit) if on_items else (None, None)
        suites = sorted({m.suite for m in row.metrics})
        results = await run_bench(method, dataset, ctx.out_dir / "rows" / row.id,
                                  judge=judge if "final_matching" in suites else None,
                                  sample=bench_sample, seed=ctx.seed, limit=bench_limit, n_bootstrap=n_bootstrap,
                                  concurrency=concurrency, progress=ctx.progress, suite_names=suites,
                                  select_on=ctx.select_on, select_holdout=ctx.select_holdout)
    except (BenchError, ReproduceError, BuildError, ValueError, KeyError, RuntimeError) as exc:
        record.update(status="failed", reason=f"{type(exc).__name__}: {str(exc).strip(chr(39))}")
        record["metrics"] = [{"key": m.key, "label": m.label, "paper": None, "ours": None, "reason": record["reason"]}
                             for m in row.metrics]
        record["wall_time_s"] = round(time.perf_counter() - started, 3)
        return record
    record.update(n=results["n"], n_unscored=results["n_unscored"], unscored_reasons=results["unscored_reasons"],
                  dataset=results["dataset"], prompt_version=results["prompt_version"],
                  judge_model=results.get("judge_model"), cost=_cost(results),
                  selection=results.get("final_protocol"),  # FINAL's dev-split choices, when the bench made them
                  run_dir=str(ctx.out_dir / "rows" / row.id))
    for metric in row.metrics:
        ours, reason = _metric_value(results, metric)
        if ours is None and protocol.explain_missing is not None:
            reason = protocol.explain_missing(row, metric, built) or reason
        record["metrics"].append({"key": metric.key, "label": metric.label, "paper": None, "ours": ours,
                                  "reason": reason, "note": _coverage(results, metric, ours)})
    if results["n_unscored"] == results["n"]:
        record["status"] = "unscored"
        record["reason"] = _all_unscored(results)
    record["wall_time_s"] = round(time.perf_counter() - started, 3)
    return record


async def run_reproduce(protocol: Protocol, ctx: Context, *, methods: Sequence[str] | None = None,
                        options: dict[str, Any] | None = None, judge: Any = None, paper_model: str | None = None,
                        n_bootstrap: int = 1000, concurrency: int | None = None,
                        echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run (or resume) a paper's protocol and write ``reproduce.json`` and ``reproduce.md``; returns the JSON."""
    started = time.perf_counter()
    echo = echo or (lambda text: print(text, file=sys.stderr))
    embedded = ctx.llm is None and is_embedded(ctx.config)
    rows, selection = select_rows(protocol, methods, embedded)
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    if options:
        from halluscope.methods import method_class

        accepted = {k for r in rows for k in method_class(r.method).Options.model_fields}  # type: ignore[arg-type]
        unused = sorted(set(options) - accepted)
        if unused:
            raise ReproduceError(f"option(s) {', '.join(unused)} belong to none of the selected rows' methods "
                                 f"({', '.join(sorted({r.method for r in rows if r.method}))})")
    echo(f"{protocol.name}: {selection}")
    built = await protocol.build(ctx)
    echo(f"{protocol.name}: data {', '.join(f'{d.spec} ({len(d.examples)} items)' for d in built.datasets.values())}")
    needs_judge = any(m.suite == "final_matching" for r in rows for m in r.metrics)
    if judge is None and needs_judge:
        judge = ctx.get_llm()
    records = []
    for row in rows:
        echo(f"{protocol.name}: row {row.id} ...")
        record = await run_row(protocol, row, built, ctx, judge=judge, options=options or {},
                               n_bootstrap=n_bootstrap, concurrency=concurrency)
        for m, metric in zip(record["metrics"], row.metrics):
            m["paper"] = _paper_cell(protocol, row, metric, paper_model)
            if m["paper"] is None:
                m["paper_missing"] = ("not printed for this row" if row.paper_row in protocol.paper.rows()
                                      else "row not in the paper")
        records.append(record)
    paper = protocol.paper
    chosen = {r.id for r in rows}
    not_run = [{"id": r.id, "paper_row": r.paper_row, "method": r.method, "options": r.options}
               for r in protocol.runnable_rows() if r.id not in chosen]
    paper_only = []
    for r in protocol.rows:
        if r.method is None:
            numbers = [_number_json(n, False) for m in r.metrics
                       for n in [paper.lookup(r.paper_row, m.key, paper_model)] if n is not None]
            paper_only.append({"id": r.id, "paper_row": r.paper_row, "reason": r.reason,
                               "models": paper.models(r.paper_row), "numbers": numbers})
    from halluscope.methods import method_class

    model_name = next((r["model"] for r in records if r.get("model")), None)
    if model_name is None and any(method_class(r.method).uses_llm for r in rows if r.method):
        model_name = ctx.config.model or "embedded"
    result = {
        "paper": {"name": protocol.name, "title": paper.title, "seed": paper.seed, "dataset": paper.dataset,
                  "split": paper.split, "reference_model": paper_model or paper.reference_model,
                  "tables": paper.tables, "notes": paper.notes},
        "protocol": {"description": protocol.description, "notes": list(protocol.protocol_notes),
                     "rows_selected": selection, "sample": ctx.sample, "sample_applies_to": protocol.sample_applies_to,
                     "seed": ctx.seed, "limit": ctx.limit, "base_dataset": ctx.dataset or protocol.base_dataset,
                     "builder": ctx.builder, "build": built.summary(), "options": options or {}},
        "model": model_name,
        "judge_model": getattr(judge, "name", None) if needs_judge else None,
        "rows": records,
        "rows_not_run": not_run,
        "paper_only_rows": paper_only,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": round(time.perf_counter() - started, 3),
    }
    write_reproduce(ctx.out_dir, result)
    return result


# --------------------------------------------------------------------------------------------- output


def write_reproduce(out_dir: Path, result: dict[str, Any]) -> None:
    (out_dir / REPRODUCE_JSON).write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n",
                                          encoding="utf-8")
    (out_dir / REPRODUCE_MD).write_text(render_markdown(result), encoding="utf-8")


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def ours_cell(ours: dict[str, Any] | None) -> str:
    if ours is None:
        return "-"
    if ours.get("low") is None and float(ours["value"]).is_integer() and ours.get("n") is None:
        return f"{ours['value']:g}"
    return fmt(ours)


def scored_cell(ours: dict[str, Any] | None) -> str:
    """The value over the scored items alone (shown beside the headline that counts every item)."""
    if ours is None:
        return "-"
    if ours.get("all_missing"):
        return "(headline is over scored items: no all-items value)"
    return ours_cell(ours.get("scored")) if ours.get("scored") else "- (no item scored)"


def coverage_cell(ours: dict[str, Any] | None, rec: dict[str, Any]) -> str:
    cov = (ours or {}).get("coverage")
    if cov:
        return f"{cov['scored']}/{cov['total']}"
    if "n" in rec and "n_unscored" in rec:
        return f"{rec['n'] - rec['n_unscored']}/{rec['n']}"
    return "-"


def paper_cell(paper: dict[str, Any] | None, missing: str | None = None) -> str:
    if paper is None:
        return f"- ({missing or 'not printed'})"
    text = f"{paper['display']} ({paper['cite']})"
    return f"{text}, nearest analogue: {paper['row']}" if paper.get("analogue") else text


def main_table(result: dict[str, Any]) -> str:
    """The paper's layout: one line per (row, metric), the paper's number beside ours. Ours is first the value
    counting every item (an unscored one as the worst outcome, as the papers count), then the value over the
    scored items and the coverage (scored / total)."""
    header = ["row", "metric", "paper", "ours, all items [95% CI]", "ours, scored items", "coverage", "judge",
              "calls / tokens per item", "note"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rec in result["rows"]:
        cost = rec.get("cost")
        cost_text = "-"
        if cost:
            cost_text = f"{cost['calls_per_item']:g} / {cost['tokens_per_item']:g}"
            if cost.get("cache_hits_per_item"):
                cost_text += f" (+ {cost['cache_hits_per_item']:g} cached)"
        title = rec["id"] if rec.get("analogue") else f"{rec['paper_row']} ({rec['id']})"
        judge = judge_cell(rec)
        chosen = _selection_text(rec.get("selection")).lstrip("; ")
        for m in rec["metrics"]:
            ours = m["ours"]
            note = "; ".join(t for t in (m["reason"], m.get("note"), _level_text(ours), chosen) if t)
            lines.append("| " + " | ".join(_cell(c) for c in (
                title, m["label"], paper_cell(m["paper"], m.get("paper_missing")),
                ours_cell(ours) if ours else "cannot compute", scored_cell(ours), coverage_cell(ours, rec), judge,
                cost_text, note)) + " |")
    return "\n".join(lines)


def judge_cell(rec: dict[str, Any]) -> str:
    """Who judged a row's matching: '-' for rows with no judge; says so when the judge is the evaluated model."""
    judge = rec.get("judge_model")
    if not judge:
        return "-"
    return f"{judge} (= evaluated model)" if judge == rec.get("model") else judge


def _level_text(ours: dict[str, Any] | None) -> str | None:
    level = (ours or {}).get("level")
    return f"level: {level}" if level else None


def _selection_text(selection: dict[str, Any] | None) -> str:
    """FINAL's dev-split choice for a row, as recorded by the bench (empty when it made none)."""
    variant = (selection or {}).get("variant") or {}
    if not variant.get("chosen"):
        return ""
    from halluscope.bench.final_protocol import criterion_name

    return (f"; prompt variant {variant['chosen']} chosen by {criterion_name(variant.get('criterion', '?'))} on "
            f"{selection.get('selected_on', '?')}"
            + (" (in-sample: selection items also scored)" if selection.get("overlap") else ""))


def render_markdown(result: dict[str, Any]) -> str:
    paper, proto = result["paper"], result["protocol"]
    build = proto["build"]
    lines = [
        f"# Reproducing {paper['name']}: {paper['title']}",
        "",
        "| | |",
        "|---|---|",
        f"| paper's data | {paper['dataset']}, split {paper['split']} |",
        f"| paper's numbers | {', '.join(f'{k} ({v})' for k, v in paper['tables'].items())}; "
        f"model shown: {paper['reference_model']} where a row has several (`--paper-model`) |",
        f"| our data | {proto['base_dataset']} -> "
        + ", ".join(f"`{d['spec']}` ({d['n']} items)" for d in build["datasets"].values())
        + (f"; built by `{build['builder']}` ({build['mode']}) {json.dumps(build['options'])}" if build["builder"] != "shared" else "")
        + " |",
        f"| sample | {proto['sample'] or 'all'} ({'items per split/domain' if proto['sample_applies_to'] == 'items' else 'base items the set is built from'}), "
        f"seed {proto['seed']}, limit {proto['limit'] if proto['limit'] is not None else 'none'} |",
        f"| our model | `{result['model'] or 'none (no LLM)'}`"
        + (f"; FINAL matching judge `{result['judge_model']}`" if result.get("judge_model") else "") + " |",
        f"| rows | {proto['rows_selected']} |",
        f"| time | {result['wall_time_s']} s this run |",
        "",
        "Ours: point estimate with a bootstrap 95% CI in brackets. Paper: the published number, its model and",
        "where it is printed (percentages shown as fractions). A cell we cannot compute says why. Calls / tokens",
        "per item: requests that reached the model (cached answers counted apart), including the matching judge",
        "and FINAL's dev-split prompt selection.",
        "",
        main_table(result),
        "",
    ]
    departures = build.get("departures") or []
    notes = proto.get("notes") or []
    if departures or notes:
        lines += ["## How this run departs from the paper", ""]
        lines += [f"- {d}" for d in [*notes, *departures]]
        lines.append("")
    if build.get("skipped"):
        lines += ["## Items the builder could not make", "",
                  "| what | reason | count |", "|---|---|---|"]
        lines += [f"| {_cell(s['what'])} | {_cell(s['reason'])} | {s['count']} |" for s in build["skipped"][:30]]
        lines.append("")
    lines += ["## Runs", "", "| row | method and options | model | n | unscored | LLM calls (this run) | tokens | "
              "wall s | folder |", "|---|---|---|---|---|---|---|---|---|"]
    for rec in result["rows"]:
        cost = rec.get("cost") or {}
        opts = " ".join(f"{k}={_opt(v)}" for k, v in rec["options"].items())
        chosen = _selection_text(rec.get("selection"))
        lines.append("| " + " | ".join(_cell(c) for c in (
            rec["id"], f"`{rec['method']} {opts}`".replace(" `", "`") + chosen, rec.get("model") or "-", rec.get("n", "-"),
            rec.get("n_unscored", "-"),
            f"{cost.get('calls', '-')} ({cost.get('calls_this_run', '-')})", cost.get("tokens", "-"),
            cost.get("wall_time_s", rec.get("wall_time_s", "-")), rec.get("run_dir") or rec.get("reason") or "-"))
            + " |")
    lines.append("")
    if result["rows_not_run"]:
        lines += ["Rows not run this time (`--methods ID` or `--methods all`): "
                  + ", ".join(f"`{r['id']}` ({r['paper_row']})" for r in result["rows_not_run"]), ""]
    if result["paper_only_rows"]:
        lines += ["## Paper rows halluscope does not implement", "",
                  "| paper row | models | reason | published numbers |", "|---|---|---|---|"]
        for r in result["paper_only_rows"]:
            nums = "; ".join(f"{n['metric']} {n['display']} ({n['cite']})" for n in r["numbers"])
            lines.append(f"| {_cell(r['paper_row'])} | {_cell(', '.join(str(m) for m in r['models'] if m) or '-')} | "
                         f"{_cell(r['reason'])} | {_cell(nums)} |")
        lines.append("")
    if paper["notes"]:
        lines += ["## Notes on the paper's numbers", ""] + [f"- {n}" for n in paper["notes"]] + [""]
    return "\n".join(lines)


def render_terminal(result: dict[str, Any]) -> str:
    """What the CLI prints: the main table, departures, and where the files are."""
    proto = result["protocol"]
    out = [f"{result['paper']['name']}: {result['paper']['title']}",
           f"model {result['model'] or 'none'}; {proto['rows_selected']}", "", main_table(result)]
    departures = [*proto.get("notes", []), *proto["build"].get("departures", [])]
    if departures:
        out += ["", "Departures from the paper:"] + [f"  - {d}" for d in departures]
    if result["paper_only_rows"]:
        out += ["", "Paper rows halluscope does not implement (numbers in reproduce.md): "
                + ", ".join(r["paper_row"] for r in result["paper_only_rows"])]
    if result["rows_not_run"]:
        out += ["Rows not run (--methods all): " + ", ".join(r["id"] for r in result["rows_not_run"])]
    return "\n".join(out)
