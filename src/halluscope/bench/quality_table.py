"""The quality-and-cost table: per system, the dataset's statistic with its 95 % bootstrap CI (QAGS Spearman with
the human scores, SummEdits AUC overall and per domain, FINAL detection AUC and description-matching F1 by a named
judge), its coverage (scored/n), LLM calls, prompt + completion tokens and seconds per item.

The table is computed from :class:`Row` records alone (one system on one item, with the item's gold beside the
score), so it can be rebuilt at any time from what a run left on disk. ``halluscope bench --methods ...``
(:mod:`halluscope.bench.harness`) writes the rows of one dataset to ``rows.jsonl`` and ``run.json`` in its output
folder and the table of that folder to ``quality.md``; :func:`cells` and :func:`markdown` put several such folders
(one per dataset and model) side by side, one row per system and model (``benchmarks/quality_table.py``)."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from halluscope.records import Example, Report

ROWS_FILE = "rows.jsonl"
RUN_FILE = "run.json"


@dataclass
class Row:
    """One system on one item."""

    system: str
    item: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    report_calls: int | None = None  # rows counted at an HTTP proxy: halluscope's own Report.usage beside it
    report_prompt_tokens: int | None = None
    report_completion_tokens: int | None = None
    scored: bool = False
    units: int = 0
    unscored_units: int = 0
    http_errors: int = 0
    error: str | None = None
    seconds: float = 0.0
    score: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    # the item's gold, recorded beside the score so accuracy is computed from the rows alone
    dataset: str | None = None
    gold_label: int | None = None  # 1 = consistent (SummEdits, FINAL)
    gold_human_score: float | None = None  # QAGS
    domain: str | None = None  # SummEdits domain
    gold_descriptions: list[str] | None = None  # FINAL
    predicted_descriptions: list[str] | None = None  # the method's finding descriptions (FINAL matching)
    match: dict[str, Any] | None = None  # FINAL matching by the named judge: judge, n_gold, n_pred, matched_gold

    def as_json(self) -> str:
        return json.dumps(asdict(self), default=str, ensure_ascii=False)

    @classmethod
    def from_report(cls, system: str, example: Example, report: Report, dataset: str | None = None) -> Row:
        """A system's Report on an example, with the example's gold beside it (calls, tokens and seconds from
        ``Report.usage`` and ``Report.elapsed_s``)."""
        row = cls(
            system=system,
            item=example.id,
            calls=report.usage.calls,
            prompt_tokens=report.usage.prompt_tokens,
            completion_tokens=report.usage.completion_tokens,
            scored=report.score is not None,
            score=report.score,
            seconds=round(report.elapsed_s, 3),
            units=len(report.verdicts),
            unscored_units=sum(v.label == "unscored" for v in report.verdicts),
            predicted_descriptions=[f.description.strip() for f in report.findings if f.description.strip()],
            dataset=dataset,
            gold_label=example.label,
            gold_human_score=example.human_score,
            domain=example.meta.get("domain"),
            gold_descriptions=example.descriptions,
        )
        if report.unscored_reason:
            row.notes["unscored_reason"] = report.unscored_reason[:300]
        score_info = report.details.get("score") if isinstance(report.details, dict) else None
        if isinstance(score_info, dict) and score_info.get("kind") in ("label", "probability"):
            row.notes["score_kind"] = score_info["kind"]
            row.notes["label_score"] = score_info.get("label_score")
            row.notes["probability_score"] = score_info.get("probability_score")
        return row


LABEL_SUFFIX = " [label score]"
PROBABILITY_SUFFIX = " [probability score]"


def split_score_kinds(rows: list[Row], systems: list[str]) -> tuple[list[Row], list[str]]:
    """A system whose Reports carry a probability score (``details["score"]``, see ``-o score=``) becomes two rows
    of the table, computed from the same run: ``<system> [label score]``, the paper's score from the verdicts'
    labels alone, and ``<system> [probability score]``, the same formula with each verdict's P(supported). An item
    whose verdicts carry no probability keeps its label score on the probability row (``notes["label_fallback"]``).
    Calls, tokens and seconds are the run's, on both rows. Other systems are returned as they are."""
    out: list[Row] = []
    names: list[str] = []
    for system in systems:
        mine = [r for r in rows if r.system == system]
        if not any(r.notes.get("score_kind") == "probability" for r in mine):
            out += mine
            names.append(system)
            continue
        names += [system + LABEL_SUFFIX, system + PROBABILITY_SUFFIX]
        for r in mine:
            label = r.notes.get("label_score")
            out.append(
                replace(
                    r,
                    system=system + LABEL_SUFFIX,
                    score=label,
                    scored=label is not None,
                    notes={**r.notes, "score_from": "label_score"},
                )
            )
        for r in mine:
            probability = r.notes.get("probability_score")
            score = probability if probability is not None else r.score
            notes = {**r.notes, "score_from": "probability_score" if probability is not None else "label_fallback"}
            out.append(
                replace(r, system=system + PROBABILITY_SUFFIX, score=score, scored=score is not None, notes=notes)
            )
    return out, names


def _bootstrap(statistic: Any, n: int, resamples: tuple[int, int] = (1000, 0)) -> dict[str, Any]:
    from halluscope.bench.metrics import bootstrap_ci

    return bootstrap_ci(statistic, n, n_resamples=resamples[0], seed=resamples[1])


def accuracy(mine: list[Row], n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Each system's agreement with the gold recorded on its rows, with 95 % bootstrap CIs over the items it
    scored (an unscored item is counted, never given a score): Spearman with QAGS human scores; AUC (label 1 =
    consistent, higher score = more consistent) overall and per SummEdits domain; FINAL description matching
    P/R/F1 over the scored items the named judge could match (an unscored item found nothing and missed nothing:
    it is not matched). ``n_resamples`` and ``seed``: the bootstrap's."""
    import numpy as np
    from scipy.stats import spearmanr

    from halluscope.bench.metrics import brier_score, expected_calibration_error, final_prf, roc_auc

    out: dict[str, Any] = {"items": len(mine), "scored": sum(r.scored and r.score is not None for r in mine)}
    scored = [r for r in mine if r.scored and r.score is not None]
    human = [r for r in scored if r.gold_human_score is not None]
    if human:
        s = np.array([r.score for r in human], dtype=float)
        h = np.array([r.gold_human_score for r in human], dtype=float)

        def rho(idx: Any) -> float | None:
            if len(set(s[idx])) < 2 or len(set(h[idx])) < 2:
                return None
            return float(spearmanr(s[idx], h[idx]).statistic)

        out["spearman"] = _bootstrap(rho, len(human), (n_resamples, seed))
    labelled = [r for r in scored if r.gold_label is not None]
    if labelled:

        def auc_of(rows: list[Row]) -> dict[str, Any]:
            y = np.array([r.gold_label for r in rows])
            x = np.array([r.score for r in rows], dtype=float)
            return _bootstrap(lambda idx: roc_auc(y[idx].tolist(), x[idx].tolist()), len(rows), (n_resamples, seed))

        out["auc"] = auc_of(labelled)
        y_all = np.array([r.gold_label for r in labelled])
        x_all = np.array([r.score for r in labelled], dtype=float)
        if x_all.min() >= 0.0 and x_all.max() <= 1.0:  # a score on [0, 1], read as P(consistent)
            out["calibration"] = {
                "brier": _bootstrap(
                    lambda idx: brier_score(y_all[idx].tolist(), x_all[idx].tolist()),
                    len(labelled),
                    (n_resamples, seed),
                ),
                "ece": expected_calibration_error(y_all.tolist(), x_all.tolist()),
                "mean_score": float(x_all.mean()),
                "consistent_fraction": float(y_all.mean()),
            }
        domains = sorted({r.domain for r in labelled if r.domain})
        if len(domains) > 1 or (domains and any(r.domain is None for r in labelled)):
            out["auc_per_domain"] = {d: auc_of([r for r in labelled if r.domain == d]) for d in domains}
        elif domains:
            out["auc_per_domain"] = {domains[0]: out["auc"]}
    judged = [r for r in scored if r.match and r.match.get("matched_gold") is not None]
    if judged:
        counts = [(r.match["matched_gold"], r.match["n_pred"], r.match["n_gold"]) for r in judged]  # type: ignore[index]
        out["final_match"] = {
            "judge": judged[0].match.get("judge"),  # type: ignore[union-attr]
            **final_prf(counts).as_dict(),
            # the CI, beside P and R
            "f1": _bootstrap(lambda idx: final_prf([counts[i] for i in idx]).f1, len(counts), (n_resamples, seed)),
            "unmatched_items": sum(1 for r in scored if r.match and r.match.get("matched_gold") is None),
        }
    return out


def paired_difference(rows: list[Row], a: str, b: str, n_resamples: int = 2000, seed: int = 0) -> dict[str, Any] | None:
    """System ``a``'s statistic minus system ``b``'s on the items both scored, with a paired 95 % bootstrap CI (one
    resample of items serves both systems, so what the items share cancels out): Spearman with the human scores
    (QAGS), else AUC against the gold labels (SummEdits, FINAL detection). None when the rows hold no gold for
    either statistic or the two systems share fewer than two scored items."""
    import numpy as np
    from scipy.stats import spearmanr

    from halluscope.bench.metrics import roc_auc

    def scored(system: str) -> dict[str, Row]:
        return {r.item: r for r in rows if r.system == system and r.scored and r.score is not None}

    mine, theirs = scored(a), scored(b)
    items = [i for i in mine if i in theirs]
    if len(items) < 2:
        return None
    human = all(mine[i].gold_human_score is not None for i in items)
    if not human and not all(mine[i].gold_label is not None for i in items):
        return None
    gold = np.array([mine[i].gold_human_score if human else mine[i].gold_label for i in items], dtype=float)
    x = np.array([mine[i].score for i in items], dtype=float)
    y = np.array([theirs[i].score for i in items], dtype=float)

    def one(s: Any, idx: Any) -> float | None:
        if len(set(gold[idx])) < 2 or len(set(s[idx])) < 2:
            return None
        if human:
            return float(spearmanr(s[idx], gold[idx]).statistic)
        return roc_auc(gold[idx].astype(int).tolist(), s[idx].tolist())

    def difference(idx: Any) -> float | None:
        first, second = one(x, idx), one(y, idx)
        return None if first is None or second is None else first - second

    out = _bootstrap(difference, len(items), (n_resamples, seed))
    return {"a": a, "b": b, "statistic": "Spearman" if human else "AUC", **out}


def fmt_ci(ci: dict[str, Any] | None, band_digits: int = 3, with_n: bool = True) -> str:
    if not ci or ci.get("value") is None:
        return "-"
    lo, hi = ci.get("low"), ci.get("high")
    band = f" [{lo:.{band_digits}f}, {hi:.{band_digits}f}]" if lo is not None and hi is not None else ""
    return f"{ci['value']:.3f}{band}" + (f" (n={ci['n']})" if with_n else "")


def summarize(rows: list[Row], systems: list[str], n_resamples: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """Per system (in the order given): items, calls and tokens per item, unscored items and units, seconds per
    item and :func:`accuracy`."""
    out = []
    for system in systems:
        mine = [r for r in rows if r.system == system]
        if not mine:
            continue
        n = len(mine)
        summary = {
            "system": system,
            "items": n,
            "calls_per_item": sum(r.calls for r in mine) / n,
            "prompt_tokens_per_item": sum(r.prompt_tokens for r in mine) / n,
            "completion_tokens_per_item": sum(r.completion_tokens for r in mine) / n,
            "tokens_per_item": sum(r.prompt_tokens + r.completion_tokens for r in mine) / n,
            "max_calls": max(r.calls for r in mine),
            "unscored_items": sum(not r.scored for r in mine),
            "unscored_units": sum(r.unscored_units for r in mine),
            "units": sum(r.units for r in mine),
            "failed_runs": sum(r.error is not None for r in mine),
            "seconds_per_item": statistics.mean(r.seconds for r in mine),
            "distinct_scores": len({r.score for r in mine if r.scored and r.score is not None}),
            "accuracy": accuracy(mine, n_resamples, seed),
        }
        out.append(summary)
    return out


def statistic(accuracy: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The headline statistic of a system's accuracy on its dataset: FINAL matching F1 when a judge matched its
    descriptions, else Spearman with human scores (QAGS), else AUC (SummEdits, FINAL detection)."""
    if "final_match" in accuracy:
        return f"matching F1 (judge {accuracy['final_match']['judge']})", accuracy["final_match"]["f1"]
    if "spearman" in accuracy:
        return "Spearman", accuracy["spearman"]
    if "auc" in accuracy:
        return "AUC", accuracy["auc"]
    return "-", None


def dataset_markdown(summary: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The quality-and-cost table of one dataset: a row per system with its statistic and 95 % bootstrap CI,
    coverage, LLM calls, prompt and completion tokens and seconds per item; then each system's accuracy in full
    (per domain, FINAL P/R) and the systems that were skipped, with the reason."""
    lines = [
        f"# Quality and cost ({meta['items_run']} items of {meta.get('dataset', 'the dataset')}; model "
        f"{meta.get('model') or '-'})",
        "",
        "| system | statistic [95 % CI] | coverage | calls/item | prompt tok/item | completion tok/item | s/item |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        a = s["accuracy"]
        name, ci = statistic(a)
        if ci and ci.get("value") is not None:
            figure = f"{name} {fmt_ci(ci, with_n=False)}"
        elif a["scored"] < 2:
            figure = "no figure: too few scored"
        elif s["distinct_scores"] == 1:
            figure = "no figure: every score equal"
        else:
            figure = f"no {name} figure" if name != "-" else "no gold to compare with"
        lines.append(
            f"| {s['system']} | {figure} | {a['scored']}/{a['items']} | {s['calls_per_item']:.1f} | "
            f"{s['prompt_tokens_per_item']:.0f} | {s['completion_tokens_per_item']:.0f} | "
            f"{s['seconds_per_item']:.2f} |"
        )
    acc_lines = []
    for s in summary:
        a = s["accuracy"]
        parts = []
        if "spearman" in a:
            parts.append(f"Spearman {fmt_ci(a['spearman'])}")
        if "auc" in a:
            parts.append(f"AUC {fmt_ci(a['auc'])}")
        for domain, ci in (a.get("auc_per_domain") or {}).items():
            if len(a["auc_per_domain"]) > 1:
                parts.append(f"{domain} AUC {fmt_ci(ci)}")
        if "calibration" in a:
            cal = a["calibration"]
            parts.append(
                f"the score as P(consistent): Brier {fmt_ci(cal['brier'], with_n=False)}, ECE {cal['ece']:.3f} "
                f"(mean score {cal['mean_score']:.3f}, consistent {cal['consistent_fraction']:.3f})"
            )
        if "final_match" in a:
            fm = a["final_match"]
            parts.append(
                f"FINAL matching F1 {fmt_ci(fm['f1'])}, P {fm['precision']:.3f}, R {fm['recall']:.3f} "
                f"(judge {fm['judge']}; {fm['unmatched_items']} items the judge could not match)"
            )
        if parts:
            acc_lines.append(f"| {s['system']} | {a['scored']}/{a['items']} | " + "; ".join(parts) + " |")
    if acc_lines:
        lines += [
            "",
            f"Accuracy against the gold of {meta.get('dataset', 'the dataset')} (95 % bootstrap CI over "
            "the scored items):",
            "",
            "| system | scored | accuracy |",
            "|---|---|---|",
            *acc_lines,
        ]
    for name, why in meta.get("skipped", {}).items():
        lines.append(f"\n{name}: skipped ({why})")
    return "\n".join(lines) + "\n"


def model_name(settings: dict[str, Any]) -> str:
    """The model the folder's rows came from, as its endpoint names it."""
    endpoint = str(settings.get("endpoint", ""))
    found = re.match(r"llama_cpp\.server \+ (.+?) \(", endpoint)
    if found:
        return found.group(1)
    return f"{settings.get('model')} at {endpoint}" if endpoint else str(settings.get("model"))


def dataset_kind(dataset: str) -> str:
    name = dataset.split(":")[0].lower()
    for kind in ("qags", "summedits", "final"):
        if kind in name:
            return kind
    return name


def read_rows(path: Path) -> list[Row]:
    """The rows of a ``rows.jsonl``; a line cut off by a kill mid-write is skipped (its row is measured again)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(Row(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return rows


def is_table_folder(folder: Path) -> bool:
    return (folder / ROWS_FILE).is_file() and (folder / RUN_FILE).is_file()


def load_folder(folder: Path) -> tuple[dict[str, Any], list[Row]]:
    """A table folder's settings (``run.json``: dataset, model, endpoint) and rows (``rows.jsonl``)."""
    settings = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
    return settings, read_rows(folder / ROWS_FILE)


NO_LLM = "(no LLM)"


def _scores(rows: list[Row]) -> dict[str, float | None]:
    return {r.item: r.score for r in rows}


def _agree(a: dict[str, float | None], b: dict[str, float | None]) -> bool:
    """The same score on every item both have, and one's items a subset of the other's."""
    common = a.keys() & b.keys()
    return len(common) == min(len(a), len(b)) and all(a[k] == b[k] for k in common)


def cells(folders: list[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """(system, model) -> {dataset kind: {"accuracy", "items", "unscored", "calls_per_item", "tokens_per_item"}}."""
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for folder in folders:
        settings, rows = load_folder(folder)
        model, kind = model_name(settings), dataset_kind(str(settings.get("dataset", "")))
        for system in dict.fromkeys(r.system for r in rows):
            mine = [r for r in rows if r.system == system]
            n = len(mine)
            no_llm = all(r.calls == 0 for r in mine)  # rouge, the gate: one row whatever the endpoint
            cell = table.setdefault((system, NO_LLM if no_llm else model), {})
            if kind in cell:
                if not (no_llm and _agree(cell[kind]["scores"], _scores(mine))):
                    raise SystemExit(
                        f"{system} has {kind} rows in two folders ({cell[kind]['folder']}, {folder}) "
                        "that differ: name one of them"
                    )
                if n <= cell[kind]["items"]:
                    continue  # the same scores, measured beside another model (a run still going has fewer)
            summary = summarize(mine, [system])[0]
            cell[kind] = {
                "folder": str(folder),
                "items": n,
                "accuracy": summary["accuracy"],
                "unscored": n - summary["accuracy"]["scored"],
                "calls_per_item": summary["calls_per_item"],
                "tokens_per_item": summary["tokens_per_item"],
                "seconds_per_item": summary["seconds_per_item"],
                "scores": _scores(mine),
                "describes": any(r.predicted_descriptions for r in mine),
            }
    return table


def _band(ci: dict[str, Any] | None) -> str:
    return fmt_ci(ci, band_digits=2, with_n=False)  # n is in the cell's "scored" count


def _stat(ci: dict[str, Any] | None, cell: dict[str, Any]) -> str:
    """The statistic with its CI, or why there is none (a rank statistic is undefined when every score is equal)."""
    if ci and ci.get("value") is not None:
        return _band(ci)
    scored = [s for s in cell["scores"].values() if s is not None]
    if len(scored) < 2:
        return "no figure: too few scored"
    if len(set(scored)) == 1:
        return f"no figure: every score {scored[0]:.2f}"
    return _band(ci)


def _calibration(acc: dict[str, Any]) -> str:
    """``<br>Brier ..., ECE ...`` of a score on [0, 1] against the gold labels, or nothing."""
    cal = acc.get("calibration")
    if not cal or cal["brier"].get("value") is None:
        return ""
    return f"<br>Brier {cal['brier']['value']:.3f}, ECE {cal['ece']:.3f}"


def _cell(kind: str, cell: dict[str, Any] | None, min_items: int = 0) -> str:
    if cell is None:
        return "not run"
    acc = cell["accuracy"]
    scored = f"{acc['scored']}/{cell['items']} scored"
    if cell["items"] < min_items:
        return f"{cell['items']} items so far (fewer than {min_items}: no figure)"
    if acc["scored"] < min_items:  # run on enough items, but a figure over the few it scored would mislead
        return f"no figure: fewer than {min_items} scored ({scored})"
    if kind == "qags":
        return f"{_stat(acc.get('spearman'), cell)} ({scored})"
    if kind == "summedits":
        per = acc.get("auc_per_domain") or {}
        domains = "; ".join(f"{d} {v['value']:.2f}" if v.get("value") is not None else f"{d} -" for d, v in per.items())
        return f"{_stat(acc.get('auc'), cell)} ({scored}){'<br>' + domains if domains else ''}{_calibration(acc)}"
    if kind == "final":
        match = acc.get("final_match")
        if not cell.get("describes", True):  # a score-only system (ROUGE): its detection AUC, not an F1 of 0
            return f"describes no error; detection AUC {_band(acc.get('auc'))} ({scored})"
        if not match:
            return f"AUC {_band(acc.get('auc'))}, no matching judge ({scored})"
        return (
            f"F1 {_band(match.get('f1'))} (P {match['precision']:.2f}, R {match['recall']:.2f}; {scored})"
            f"<br>detection AUC {_band(acc.get('auc'))}{_calibration(acc)}"
        )  # beside the score-only systems' statistic
    if "spearman" in acc:  # a dataset of another name: the statistic its gold allows
        return f"Spearman {_stat(acc.get('spearman'), cell)} ({scored})"
    if "auc" in acc:
        return f"AUC {_stat(acc.get('auc'), cell)} ({scored})"
    return f"{scored}"


def markdown(table: dict[tuple[str, str], dict[str, Any]], min_items: int = 0) -> str:
    kinds = [k for k in ("qags", "summedits", "final") if any(k in c for c in table.values())]
    kinds += sorted({k for c in table.values() for k in c} - set(kinds))
    heads = {
        "qags": "QAGS-CNNDM dev: Spearman [95 % CI]",
        "summedits": "SummEdits dev: AUC [95 % CI]; per domain",
        "final": "FINAL dev: matching F1 [95 % CI]; detection AUC",
    }
    lines = [
        "| system | model | " + " | ".join(heads.get(k, k) for k in kinds) + " | calls / tokens / seconds per item |",
        "|---|---|" + "---|" * len(kinds) + "---|",
    ]
    for (system, model), cell in sorted(table.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cost = "; ".join(
            f"{k} {c['calls_per_item']:.1f} / {c['tokens_per_item']:,.0f} / {c.get('seconds_per_item', 0.0):.1f} s"
            for k, c in cell.items()
        )
        lines.append(
            f"| {system} | {model} | " + " | ".join(_cell(k, cell.get(k), min_items) for k in kinds) + f" | {cost} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """``python benchmarks/quality_table.py FOLDER... [--min-items N] [--out quality.md]``: the table of several
    table folders (``halluscope bench --methods`` output folders), printed and, with ``--out``, written with its
    numbers beside it as ``.json``."""
    import argparse

    parser = argparse.ArgumentParser(description="The quality table of several `halluscope bench --methods` folders.")
    parser.add_argument("folders", nargs="+", type=Path, help="halluscope bench --methods output folders")
    parser.add_argument(
        "--min-items",
        type=int,
        default=10,
        help="a cell measured on fewer items shows its count, not a figure (default 10)",
    )
    parser.add_argument("--out", type=Path, help="also write the table here (and its numbers beside it as .json)")
    parser.add_argument(
        "--paired",
        nargs=2,
        action="append",
        metavar=("A", "B"),
        default=[],
        help="also print system A's statistic minus system B's in each folder, with a paired bootstrap CI (repeatable)",
    )
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not is_table_folder(folder):
            raise SystemExit(f"{folder}: no {ROWS_FILE} and {RUN_FILE} (a `halluscope bench --methods` output folder)")
    table = cells(args.folders)
    text = markdown(table, args.min_items)
    print(text, end="")
    for a, b in args.paired:
        for folder in args.folders:
            found = paired_difference(load_folder(folder)[1], a, b)
            if found is None:
                print(f"{folder}: {a} - {b}: no paired figure (a system missing, or no gold)")
            else:
                print(f"{folder}: {a} - {b}: {found['statistic']} {fmt_ci(found)}")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(
            json.dumps(
                [
                    {
                        "system": s,
                        "model": m,
                        **{k: {f: v for f, v in c.items() if f != "scores"} for k, c in cell.items()},
                    }
                    for (s, m), cell in table.items()
                ],
                indent=2,
                default=str,
            )
            + "\n",
            encoding="utf-8",
        )
