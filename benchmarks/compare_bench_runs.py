"""Compare two sets of `halluscope bench` output folders (a before/after proof for a refactor).

    python benchmarks/compare_bench_runs.py OLD_DIR NEW_DIR

OLD_DIR and NEW_DIR are either one bench output folder each (holding results.json) or folders of such folders
(matched by relative path: run the same commands into two roots; nested run folders, such as localize's
``final_protocol/.../variant-N`` selection runs, are compared too). For every run it compares, after dropping wall-clock
fields (elapsed and wall times, creation stamps) and writing each root's own path as ``<ROOT>``:

- ``items.jsonl``: every item's full Report, matched by ``example_id`` -- score, label, verdicts, findings, usage
  (calls, tokens) and the call log (every prompt sent and every reply);
- ``results.json``: the metrics, tables, counts and usage; ``run.json``: the run's identity (method options,
  prompt version, model).

Prints "identical" (exit 0), or the first differences (exit 1), then one summary line per run; when no run is in
both roots, "nothing compared" (exit 2). Symlinked run folders are followed. PNG plots and
results.md (a rendering of results.json) are not compared.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

# fields whose value is wall-clock time or a stamp of when the run happened: dropped wherever they appear
VOLATILE = {
    "elapsed_s",
    "item_time_s",
    "wall_time_s",
    "created",
    "created_at",
    "started_at",
    "finished_at",
    "timestamp",
    "duration_s",
    "seconds",
}
MAX_DIFFS = 40


def normalize(value: Any, root: str) -> Any:
    if isinstance(value, dict):
        return {
            k: normalize(v, root)
            for k, v in value.items()
            if k not in VOLATILE and not k.endswith("_seconds") and not k.endswith("_elapsed_s")
        }
    if isinstance(value, list):
        return [normalize(v, root) for v in value]
    if isinstance(value, str):
        return "<ROOT>" if value == root else value.replace(root + "/", "<ROOT>/")
    return value


def run_dirs(root: Path) -> dict[str, Path]:
    """Every folder under root (root included) holding a run's files, by its path relative to root (so the
    localize method's nested ``final_protocol/<selection>/variant-N`` runs are compared too)."""
    names = {"items.jsonl", "results.json", "run.json"}
    folders = {Path(top) for top, _, files in os.walk(root, followlinks=True) if names & set(files)}
    return {str(p.relative_to(root)): p for p in sorted(folders)}


def load_run(folder: Path, root: Path) -> dict[str, Any]:
    run: dict[str, Any] = {}
    items_path = folder / "items.jsonl"
    if items_path.exists():
        items: dict[str, Any] = {}
        for line in items_path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                items[str(row.get("example_id"))] = normalize(row, str(root))
        run["items"] = items
    for name in ("results.json", "run.json"):
        if (folder / name).exists():
            run[name] = normalize(json.loads((folder / name).read_text()), str(root))
    return run


def differences(old: Any, new: Any, where: str, out: list[str]) -> None:
    if len(out) >= MAX_DIFFS:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            if k not in old or k not in new:
                out.append(f"{where}/{k}: only in {'NEW' if k not in old else 'OLD'}")
            else:
                differences(old[k], new[k], f"{where}/{k}", out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (u, v) in enumerate(zip(old, new)):
            differences(u, v, f"{where}[{i}]", out)
    elif old != new:
        out.append(f"{where}: OLD {json.dumps(old)[:300]} != NEW {json.dumps(new)[:300]}")


def summary(name: str, run: dict[str, Any]) -> str:
    items = run.get("items", {})
    calls = sum(len(r["report"].get("calls") or []) for r in items.values())
    tokens = sum(
        (r["report"].get("usage") or {}).get("prompt_tokens", 0)
        + (r["report"].get("usage") or {}).get("completion_tokens", 0)
        for r in items.values()
    )
    scored = sum(1 for r in items.values() if r["report"].get("score") is not None)
    findings = sum(len(r["report"].get("findings") or []) for r in items.values())
    return f"{name}: {len(items)} items ({scored} scored), {findings} findings, {calls} logged calls, {tokens} tokens"


def compare(old_root: Path, new_root: Path) -> int:
    old_runs, new_runs = run_dirs(old_root), run_dirs(new_root)
    if not set(old_runs) & set(new_runs):
        print(
            f"nothing compared: no run folder (items.jsonl, results.json or run.json) is in both {old_root} "
            f"({len(old_runs)} runs) and {new_root} ({len(new_runs)} runs)"
        )
        return 2
    diffs: list[str] = []
    for name in sorted(set(old_runs) ^ set(new_runs)):
        diffs.append(f"{name}: run only in {'OLD' if name in old_runs else 'NEW'}")
    lines = []
    for name in sorted(set(old_runs) & set(new_runs)):
        old, new = load_run(old_runs[name], old_root), load_run(new_runs[name], new_root)
        if not old:
            diffs.append(f"{name}: no items.jsonl/results.json in OLD")
        differences(old, new, name, diffs)
        lines.append(summary(name, new))
    print("\n".join(diffs[:MAX_DIFFS]) if diffs else "identical")
    print("\n".join(lines))
    return 1 if diffs else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path, help="bench output folder (or folder of them) from the old tree")
    parser.add_argument("new", type=Path, help="the same from the new tree")
    args = parser.parse_args()
    return compare(args.old.resolve(), args.new.resolve())


if __name__ == "__main__":
    sys.exit(main())
