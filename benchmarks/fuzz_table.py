"""Issue 14's fuzz table, re-run: replies that state no verdict must never produce a score, and no reply or
transport fault may crash a check.

Every LLM-backed method configuration (the list in ``tests/test_fuzz_methods.py``) runs on the README's kind of
pair with a scripted model whose every reply -- first answer and repair answer -- comes from one garbage class
(truncated JSON, prose, wrong keys, wrong types, negations, nested junk, empty, huge, placeholders, lone
surrogates), then with replies mixed with transport faults (HTTP 500/429 after retries, time-outs). Counted
per method: replies sent, checks, checks that produced a score / a scored verdict / a finding from those
replies (all must be 0), and crashes (exceptions out of ``check``; must be 0).

    python benchmarks/fuzz_table.py [--mixed-runs 40] [--out bench_out/fuzz_table.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.llm import LLM, FakeModel, LLMError  # noqa: E402
from halluscope.methods import get_method  # noqa: E402
from tests.test_fuzz_methods import CONFIGS, GARBAGE, SOURCE, TARGET  # noqa: E402

FAULTS = [LLMError("HTTP 500 after retries"), LLMError("timed out"), LLMError("HTTP 429 after retries")]


def _run(method: str, options: dict, responder, row: Counter) -> None:
    calls = Counter()

    def counting(messages):
        calls["n"] += 1
        return responder(messages)

    row["checks"] += 1
    try:
        report = get_method(method, llm=LLM(FakeModel(responder=counting), cache=None), **options).check(SOURCE, TARGET)
    except Exception as exc:  # the point of the table: count, never hide
        row["crashes"] += 1
        print(f"CRASH {method} {options}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    finally:
        row["replies"] += calls["n"]
    row["scored"] += report.score is not None
    row["scored_verdicts"] += sum(v.label != "unscored" for v in report.verdicts)
    row["findings"] += len(report.findings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mixed-runs", type=int, default=40, help="checks per method with faults mixed in")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    start = time.perf_counter()
    table: dict[str, Counter] = defaultdict(Counter)
    for method, options in CONFIGS:
        label = method + "".join(f" {k}={v}" for k, v in options.items())
        row = table[label]
        for items in GARBAGE.values():
            for item in items:
                _run(method, options, lambda messages, item=item: item, row)
        rng = random.Random(label)
        pool = [g for items in GARBAGE.values() for g in items]

        def mixed(messages):
            if rng.random() < 0.3:
                row["faults"] += 1
                raise rng.choice(FAULTS)
            return rng.choice(pool)

        for _ in range(args.mixed_runs):
            _run(method, options, mixed, row)

    cols = ["checks", "replies", "faults", "scored", "scored_verdicts", "findings", "crashes"]
    total = Counter()
    print("| method | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for label, row in table.items():
        total.update(row)
        print(f"| {label} | " + " | ".join(str(row[c]) for c in cols) + " |")
    print("| **all** | " + " | ".join(f"**{total[c]}**" for c in cols) + " |")
    print(f"\n{len(GARBAGE)} garbage classes, {sum(len(v) for v in GARBAGE.values())} replies each method; "
          f"{time.perf_counter() - start:.1f} s")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({k: dict(v) for k, v in table.items()} | {"all": dict(total)}, indent=1))
    bad = total["scored"] + total["scored_verdicts"] + total["findings"] + total["crashes"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
