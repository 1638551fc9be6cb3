"""How many LLM-member runs the ``ensemble`` cascade saves on items already scored by every member, and whether its
labels equal those of running every member. No model is run: the members' reports are read from bench folders.

    python benchmarks/combiner_cascade.py COMBINER.json rouge=bench_out/se64-rouge gate=bench_out/se64-gate \
        geval=bench_out/se64-geval
"""

from __future__ import annotations

import argparse
from pathlib import Path

from halluscope.bench.folder import ITEMS_FILE, ItemStore
from halluscope.methods.ensemble import load_combiner
from halluscope.records import Report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("combiner")
    parser.add_argument("runs", nargs="+", help="MEMBER=BENCH_FOLDER, one per member of the combiner")
    args = parser.parse_args()
    c = load_combiner(args.combiner)
    runs: dict[str, dict[str, Report]] = {}
    for item in args.runs:
        name, _, folder = item.partition("=")
        runs[name] = ItemStore(Path(folder) / ITEMS_FILE).load()
    missing = [m.name for m in c.members if m.name not in runs]
    if missing:
        parser.error(f"no folder for member(s) {', '.join(missing)}")
    ids = sorted(set.intersection(*(set(r) for r in runs.values())))
    llm = [m.name for m in c.members if m.uses_llm]
    limit = c.value_threshold(c.threshold)
    runs_saved = same = 0
    for i in ids:
        reports: dict[str, Report | None] = {m.name: runs[m.name][i] for m in c.members if not m.uses_llm}
        pending = list(llm)
        while pending:
            known = c.intercept + sum(c.contribution(m, r) for m, r in reports.items())
            low = known + sum(c.bounds(m)[0] for m in pending)
            high = known + sum(c.bounds(m)[1] for m in pending)
            if low >= limit or high < limit:
                runs_saved += len(pending)
                break
            name = pending.pop(0)
            reports[name] = runs[name][i]
        full = c.predict({m.name: runs[m.name][i] for m in c.members}) >= c.threshold
        same += (c.predict(reports) >= c.threshold) == full
    print(
        f"{len(ids)} items, LLM members {', '.join(llm) or 'none'}: the cascade skips {runs_saved} of "
        f"{len(ids) * len(llm)} LLM-member runs; its label equals the all-members label on {same} of {len(ids)} items "
        f"(threshold {c.threshold:.3f})"
    )


if __name__ == "__main__":
    main()
