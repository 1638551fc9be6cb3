"""A bench output folder and its files: ``items.jsonl`` (one finished Report per line, appended as items finish:
:class:`ItemStore`), ``run.json`` (what the folder holds: :func:`folder_identity_clash`), ``results.json`` and
``results.md`` (:func:`write_results`). The run that fills it is :func:`halluscope.bench.runner.run_bench`."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from halluscope.records import Report

ITEMS_FILE = "items.jsonl"
RUN_FILE = "run.json"
RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"


def default_out_dir(dataset: str, method: str, model: str | None, sample: int | None = None, seed: int = 0) -> Path:
    """``runs/<dataset>-<method>-<model>[-sample<N>-seed<S>]`` with unsafe characters replaced."""
    parts = [dataset, method, model or "nollm"]
    if sample:
        parts.append(f"sample{sample}-seed{seed}")
    name = "-".join(re.sub(r"[^A-Za-z0-9._+]+", "-", p).strip("-") for p in parts)
    return Path("runs") / name


class ItemStore:
    """The append-only per-item JSONL: one ``{"example_id", "report"}`` object per line."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict[str, Report]:
        """Finished reports by example id (a later line wins). A line cut short by a crash is dropped and
        the file is rewritten without it, so the next append starts on a clean line."""
        done: dict[str, Report] = {}
        if not self.path.is_file():
            return done
        good_lines: list[str] = []
        bad = 0
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                done[row["example_id"]] = Report.model_validate(row["report"])
                good_lines.append(line)
            except (json.JSONDecodeError, KeyError, TypeError, ValidationError):
                bad += 1
        if bad:
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(line + "\n" for line in good_lines), encoding="utf-8")
            tmp.replace(self.path)
            print(
                f"warning: dropped {bad} unreadable line(s) from {self.path} (an interrupted write); "
                "those items will be redone",
                file=sys.stderr,
            )
        return done

    def open(self) -> TextIO:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return self.path.open("a", encoding="utf-8")

    @staticmethod
    def write(fh: TextIO, example_id: str, report: Report) -> None:
        fh.write(
            json.dumps({"example_id": example_id, "report": report.model_dump(mode="json")}, ensure_ascii=False) + "\n"
        )
        fh.flush()


def folder_identity_clash(path: Path, identity: dict[str, Any]) -> str | None:
    """What an existing identity file at ``path`` says differently from ``identity`` (None when they agree); a
    new file is written when there is none, so the folder is claimed by this identity."""
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        clash = {k: (old.get(k), v) for k, v in identity.items() if json.dumps(old.get(k)) != json.dumps(v)}
        return "; ".join(f"{k}: folder has {a!r}, this run {b!r}" for k, (a, b) in clash.items()) or None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(identity, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return None


def write_results(out_dir: Path, results: dict[str, Any], calibration_md: Sequence[str] = ()) -> None:
    (out_dir / RESULTS_JSON).write_text(
        json.dumps(results, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8"
    )
    (out_dir / RESULTS_MD).write_text(render_markdown(results, calibration_md), encoding="utf-8")


def render_markdown(results: dict[str, Any], calibration_md: Sequence[str] = ()) -> str:
    """``results.md``; ``calibration_md``: the calibrating method's lines about its dev-set choices."""
    u = results["usage"]
    lines = [
        f"# {results['method']} on {results['dataset']}",
        "",
        "| | |",
        "|---|---|",
        f"| method | `{results['method']}` options `{json.dumps(results['method_options'])}` |",
        f"| prompt version | `{results['prompt_version']}` |",
        f"| model | `{results['model'] or 'none (no LLM)'}` |",
        f"| judge | `{results['judge_model'] or '-'}`"
        + (
            " (the evaluated model judges itself)"
            if results["judge_model"] and results["judge_model"] == results["model"]
            else ""
        )
        + " |",
        f"| dataset | `{results['dataset']}` splits {results['splits']} |",
        f"| items | {results['n']} of {results['n_dataset']}"
        + (
            f" (seeded sample of {results['sample_per_stratum']} per split/domain, seed {results['seed']})"
            if results["sample_per_stratum"]
            else ""
        )
        + (f" (limit {results['limit']})" if results["limit"] is not None else "")
        + " |",
        f"| coverage | {results['n_scored']}/{results['n']} items scored; {results['n_unscored']} unscored "
        f"{results['unscored_reasons'] or ''} (each metric: the value counting every item, an unscored one as the "
        "worst outcome, then the value over the scored items with its coverage) |",
        f"| LLM usage | {u['calls']} calls, {u['prompt_tokens']}+{u['completion_tokens']} tokens"
        + (f" ({u['cached_prompt_tokens']} cached)" if u.get("cached_prompt_tokens") else "")
        + ", "
        f"{u['cache_hits']} cache hits; per item {u['per_item']} |",
        f"| time | this run {results['wall_time_s']} s wall; {results['item_time_s']['total']} s summed over items "
        "(includes waiting for the model when items run concurrently) |",
        "",
        "Values are point estimates with bootstrap 95% confidence intervals in brackets.",
        "",
    ]
    lines += calibration_md
    for name, error in results.get("suite_errors", {}).items():
        lines += [f"**suite `{name}` failed:** {error}", ""]
    for table in results["tables"]:
        lines += [f"## {table['title']}", "", table["markdown"], ""]
    for plot in results["plots"]:
        lines += [f"![{plot}]({plot})", ""]
    return "\n".join(lines)
