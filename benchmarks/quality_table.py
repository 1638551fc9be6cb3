"""The dev-data quality table: every system of several ``benchmarks/cost.py`` folders, one row per system and model.

    python benchmarks/quality_table.py bench_out/qags-qwen bench_out/summedits-qwen bench_out/final-qwen \\
        bench_out/qags-smollm2 [--out quality.md]

Each folder is one dataset on one endpoint (its ``run.json``); the table puts a system's QAGS Spearman, its
SummEdits AUC (overall and per domain) and its FINAL description-matching F1 side by side, each with its 95 %
bootstrap CI and n, computed by ``cost.py``'s own ``accuracy`` from the rows alone, over every item the system
has a row for in that folder (so n can differ between systems: it is printed in every cell). Items a system could
not score are counted beside it, never given a score. Nothing is measured here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _cost() -> Any:
    spec = importlib.util.spec_from_file_location("cost_bench", HERE / "cost.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules.setdefault("cost_bench", module)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def model_name(settings: dict[str, Any]) -> str:
    """The model the folder's rows came from, as its endpoint names it."""
    endpoint = str(settings.get("endpoint", ""))
    found = re.match(r"llama_cpp\.server \+ (.+?) \(", endpoint)
    return found.group(1) if found else f"{settings.get('model')} at {endpoint}"


def dataset_kind(dataset: str) -> str:
    name = dataset.split(":")[0].lower()
    for kind in ("qags", "summedits", "final"):
        if kind in name:
            return kind
    return name


def load_folder(folder: Path) -> tuple[dict[str, Any], list[Any]]:
    cost = _cost()
    settings = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    rows = []
    for line in (folder / "rows.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            rows.append(cost.Row(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue  # a line cut off by a kill mid-write (cost.py measures it again on resume)
    return settings, rows


NO_LLM = "(no LLM)"


def _scores(rows: list[Any]) -> dict[str, float | None]:
    return {r.item: r.score for r in rows}


def _agree(a: dict[str, float | None], b: dict[str, float | None]) -> bool:
    """The same score on every item both have, and one's items a subset of the other's."""
    common = a.keys() & b.keys()
    return len(common) == min(len(a), len(b)) and all(a[k] == b[k] for k in common)


def cells(folders: list[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """(system, model) -> {dataset kind: {"accuracy", "items", "unscored", "calls_per_item", "tokens_per_item"}}."""
    cost = _cost()
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
                    raise SystemExit(f"{system} has {kind} rows in two folders ({cell[kind]['folder']}, {folder}) "
                                     "that differ: name one of them")
                if n <= cell[kind]["items"]:
                    continue  # the same scores, measured beside another model (a run still going has fewer)
            summary = cost.summarize(mine, [system])[0]  # cost.py's own per-system figures
            cell[kind] = {
                "folder": str(folder), "items": n, "accuracy": summary["accuracy"],
                "unscored": n - summary["accuracy"]["scored"],
                "calls_per_item": summary["calls_per_item"], "tokens_per_item": summary["tokens_per_item"],
                "scores": _scores(mine),
                "describes": any(r.predicted_descriptions for r in mine),
            }
    return table


def _ci(ci: dict[str, Any] | None) -> str:
    return _cost()._fmt_ci(ci, band_digits=2, with_n=False)  # n is in the cell's "scored" count


def _stat(ci: dict[str, Any] | None, cell: dict[str, Any]) -> str:
    """The statistic with its CI, or why there is none (a rank statistic is undefined when every score is equal)."""
    if ci and ci.get("value") is not None:
        return _ci(ci)
    scored = [s for s in cell["scores"].values() if s is not None]
    if len(scored) < 2:
        return "no figure: too few scored"
    if len(set(scored)) == 1:
        return f"no figure: every score {scored[0]:.2f}"
    return _ci(ci)


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
        domains = "; ".join(f"{d} {v['value']:.2f}" if v.get("value") is not None else f"{d} -"
                            for d, v in per.items())
        return f"{_stat(acc.get('auc'), cell)} ({scored}){'<br>' + domains if domains else ''}"
    if kind == "final":
        match = acc.get("final_match")
        if not cell.get("describes", True):  # a score-only system (ROUGE): its detection AUC, not an F1 of 0
            return f"describes no error; detection AUC {_ci(acc.get('auc'))} ({scored})"
        if not match:
            return f"AUC {_ci(acc.get('auc'))}, no matching judge ({scored})"
        return (f"F1 {_ci(match.get('f1'))} (P {match['precision']:.2f}, R {match['recall']:.2f}; {scored})"
                f"<br>detection AUC {_ci(acc.get('auc'))}")  # beside the score-only systems' statistic
    return f"{scored}"


def markdown(table: dict[tuple[str, str], dict[str, Any]], min_items: int = 0) -> str:
    kinds = [k for k in ("qags", "summedits", "final") if any(k in c for c in table.values())]
    kinds += sorted({k for c in table.values() for k in c} - set(kinds))
    heads = {"qags": "QAGS-CNNDM dev: Spearman [95 % CI]", "summedits": "SummEdits dev: AUC [95 % CI]; per domain",
             "final": "FINAL dev: matching F1 [95 % CI]; detection AUC"}
    lines = ["| system | model | " + " | ".join(heads.get(k, k) for k in kinds) + " | calls / tokens per item |",
             "|---|---|" + "---|" * len(kinds) + "---|"]
    for (system, model), cell in sorted(table.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cost = "; ".join(f"{k} {c['calls_per_item']:.1f} / {c['tokens_per_item']:,.0f}" for k, c in cell.items())
        lines.append(f"| {system} | {model} | " + " | ".join(_cell(k, cell.get(k), min_items) for k in kinds) + f" | {cost} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="benchmarks/cost.py --out folders")
    parser.add_argument("--min-items", type=int, default=10,
                        help="a cell measured on fewer items shows its count, not a figure (default 10)")
    parser.add_argument("--out", type=Path, help="also write the table here (and its numbers beside it as .json)")
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not (folder / "rows.jsonl").is_file() or not (folder / "run.json").is_file():
            raise SystemExit(f"{folder}: no rows.jsonl and run.json (a benchmarks/cost.py --out folder)")
    table = cells(args.folders)
    text = markdown(table, args.min_items)
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps(
            [{"system": s, "model": m, **{k: {f: v for f, v in c.items() if f != "scores"} for k, c in cell.items()}}
             for (s, m), cell in table.items()], indent=2, default=str) + "\n",
            encoding="utf-8")


if __name__ == "__main__":
    main()
