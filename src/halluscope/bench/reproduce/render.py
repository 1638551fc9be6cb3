"""Rendering a reproduce result: ``reproduce.json``, the markdown report and the terminal table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from halluscope.bench.builtin_suites import fmt
from halluscope.bench.reproduce.spec import REPRODUCE_JSON, REPRODUCE_MD, _opt


def write_reproduce(out_dir: Path, result: dict[str, Any]) -> None:
    (out_dir / REPRODUCE_JSON).write_text(
        json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8"
    )
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
    header = [
        "row",
        "metric",
        "paper",
        "ours, all items [95% CI]",
        "ours, scored items",
        "coverage",
        "judge",
        "calls / tokens per item",
        "note",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rec in result["rows"]:
        cost = rec.get("cost")
        cost_text = "-"
        if cost:
            cost_text = f"{cost['calls_per_item']:g} / {cost['tokens_per_item']:g}"
            if cost.get("cache_hits_per_item"):
                cost_text += f" (+ {cost['cache_hits_per_item']:g} cached)"
        title = rec["id"] if rec.get("analogue") else f"{rec['paper_row']} ({rec['id']})"
        gold = gold_text(rec)
        if (rec.get("gold") or {}).get("built_by") == "self":
            title += " [self-built gold]"
        judge = judge_cell(rec)
        chosen = _selection_text(rec.get("selection")).lstrip("; ")
        matching = f"claim matching: {rec['claim_matching']}" if rec.get("claim_matching") else None
        for m in rec["metrics"]:
            ours = m["ours"]
            note = "; ".join(t for t in (m["reason"], m.get("note"), _level_text(ours), chosen, matching, gold) if t)
            lines.append(
                "| "
                + " | ".join(
                    _cell(c)
                    for c in (
                        title,
                        m["label"],
                        paper_cell(m["paper"], m.get("paper_missing")),
                        ours_cell(ours) if ours else "cannot compute",
                        scored_cell(ours),
                        coverage_cell(ours, rec),
                        judge,
                        cost_text,
                        note,
                    )
                )
                + " |"
            )
    return "\n".join(lines)


def gold_text(rec: dict[str, Any]) -> str | None:
    """Who built a PROBE row's gold claims and evidence (None for rows that use no such gold)."""
    gold = rec.get("gold")
    if not gold:
        return None
    if gold.get("built_by") == "self":
        return (
            f"self-built gold: built by the scored model {gold.get('decomposer')}, so decomposition and evidence "
            "finding are measured against its own output"
        )
    if gold.get("built_by") == "named":
        return f"gold built by {', '.join(gold.get('models') or [])} (--gold-model)"
    if gold.get("built_by") == "given":
        return "gold as given in the data"
    return "no gold claims or evidence built (--gold-model MODEL)"


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
    assert selection is not None  # a chosen variant comes with its record
    from halluscope.methods.localize.protocol import criterion_name

    return (
        f"; prompt variant {variant['chosen']} chosen by {criterion_name(variant.get('criterion', '?'))} on "
        f"{selection.get('selected_on', '?')}"
        + (" (in-sample: selection items also scored)" if selection.get("overlap") else "")
    )


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
        + (
            f"; built by `{build['builder']}` ({build['mode']}) {json.dumps(build['options'])}"
            if build["builder"] != "shared"
            else ""
        )
        + " |",
        f"| sample | {proto['sample'] or 'all'} "
        + (
            "(items per split/domain), "
            if proto["sample_applies_to"] == "items"
            else "(base items the set is built from), "
        )
        + f"seed {proto['seed']}, limit {proto['limit'] if proto['limit'] is not None else 'none'} |",
        f"| our model | `{result['model'] or 'none (no LLM)'}`"
        + (f"; FINAL matching judge `{result['judge_model']}`" if result.get("judge_model") else "")
        + " |",
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
        lines += ["## Items the builder could not make", "", "| what | reason | count |", "|---|---|---|"]
        lines += [f"| {_cell(s['what'])} | {_cell(s['reason'])} | {s['count']} |" for s in build["skipped"][:30]]
        lines.append("")
    lines += [
        "## Runs",
        "",
        "| row | method and options | model | n | unscored | LLM calls (this run) | tokens | wall s | folder |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in result["rows"]:
        cost = rec.get("cost") or {}
        opts = " ".join(f"{k}={_opt(v)}" for k, v in rec["options"].items())
        chosen = _selection_text(rec.get("selection"))
        lines.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    rec["id"],
                    f"`{rec['method']} {opts}`".replace(" `", "`") + chosen,
                    rec.get("model") or "-",
                    rec.get("n", "-"),
                    rec.get("n_unscored", "-"),
                    f"{cost.get('calls', '-')} ({cost.get('calls_this_run', '-')})",
                    cost.get("tokens", "-"),
                    cost.get("wall_time_s", rec.get("wall_time_s", "-")),
                    rec.get("run_dir") or rec.get("reason") or "-",
                )
            )
            + " |"
        )
    lines.append("")
    if result["rows_not_run"]:
        lines += [
            "Rows not run this time (`--methods ID` or `--methods all`): "
            + ", ".join(f"`{r['id']}` ({r['paper_row']})" for r in result["rows_not_run"]),
            "",
        ]
    if result["paper_only_rows"]:
        lines += [
            "## Paper rows halluscope does not implement",
            "",
            "| paper row | models | reason | published numbers |",
            "|---|---|---|---|",
        ]
        for r in result["paper_only_rows"]:
            nums = "; ".join(f"{n['metric']} {n['display']} ({n['cite']})" for n in r["numbers"])
            lines.append(
                f"| {_cell(r['paper_row'])} | {_cell(', '.join(str(m) for m in r['models'] if m) or '-')} | "
                f"{_cell(r['reason'])} | {_cell(nums)} |"
            )
        lines.append("")
    if paper["notes"]:
        lines += ["## Notes on the paper's numbers", ""] + [f"- {n}" for n in paper["notes"]] + [""]
    return "\n".join(lines)


def render_terminal(result: dict[str, Any]) -> str:
    """What the CLI prints: the main table, departures, and where the files are."""
    proto = result["protocol"]
    out = [
        f"{result['paper']['name']}: {result['paper']['title']}",
        f"model {result['model'] or 'none'}; {proto['rows_selected']}",
        "",
        main_table(result),
    ]
    departures = [*proto.get("notes", []), *proto["build"].get("departures", [])]
    if departures:
        out += ["", "Departures from the paper:"] + [f"  - {d}" for d in departures]
    if result["paper_only_rows"]:
        out += [
            "",
            "Paper rows halluscope does not implement (numbers in reproduce.md): "
            + ", ".join(r["paper_row"] for r in result["paper_only_rows"]),
        ]
    if result["rows_not_run"]:
        out += ["Rows not run (--methods all): " + ", ".join(r["id"] for r in result["rows_not_run"])]
    return "\n".join(out)
