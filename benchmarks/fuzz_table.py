"""The fuzz table: replies that state no verdict must never produce a score, and no reply or
transport fault may crash a check.

Every LLM-backed method configuration (the list in ``tests/test_fuzz_methods.py``) runs on the README's kind of
pair with a scripted model whose every reply -- first answer and repair answer -- comes from one garbage class
(truncated JSON, prose, wrong keys, wrong types, negations, nested junk, empty, huge, placeholders, lone
surrogates), then with replies mixed with transport faults (HTTP 500/429 after retries, time-outs). Counted
per method: replies sent, checks, checks that produced a score / a scored verdict / a finding from those
replies (all must be 0), and crashes (exceptions out of ``check``; must be 0).

    python benchmarks/fuzz_table.py [--mixed-runs 40] [--methods geval,dcr] [--out bench_out/fuzz_table.json]

With ``--stage-by-stage`` it attacks one verdict stage at a time instead: a scripted model answers every
other stage validly (so the attacked stage is always reached) and gives the attacked stage -- first answer and
repair -- the schema's example (alone, in the format text), the prompt echoed, two verdicts, repeated keys,
look-alike labels, a second verdict hidden (keys differing in case, nested, listed, after 250 bracketed tokens),
``amc=rule`` negations and hedged reasons, and every garbage reply above; for every LLM method configuration of
``tests/stage_fuzz.py`` (single and batch_size > 1) and every verdict stage it reaches. Counted per method/stage:
checks, checks that reached the attacked stage (must be all), scores from attacked replies (must be 0), crashes
(must be 0).

    python benchmarks/fuzz_table.py --stage-by-stage [--methods geval,dcr] [--out bench_out/fuzz_stages.json]

``--methods`` keeps only those methods' configurations (a quick run; the table above is of every method).
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


def stage_by_stage(out: str | None, methods: set[str] | None = None) -> int:
    from tests.stage_fuzz import (  # noqa: PLC0415
        RULE_CLASSES,
        STAGE_CONFIGS,
        STRUCTURAL_CLASSES,
        config_label,
        fuzz_stage,
        verdict_stages_reached,
    )

    start = time.perf_counter()
    classes = list(STRUCTURAL_CLASSES) + list(RULE_CLASSES) + list(GARBAGE)
    table: dict[str, Counter] = {}
    per_class: Counter = Counter()
    scored_class: Counter = Counter()
    configs = [c for c in STAGE_CONFIGS if not methods or c[0] in methods]
    for method, options in configs:
        for stage in verdict_stages_reached(method, options):
            row: Counter = Counter()
            fuzz_stage(
                method,
                options,
                stage,
                classes,
                GARBAGE,
                row,
                on_crash=lambda line: print("CRASH " + line, file=sys.stderr),
            )
            table[f"{config_label(method, options)} | {stage}"] = row
            per_class.update({k[6:]: v for k, v in row.items() if k.startswith("class:")})
            scored_class.update({k[7:]: v for k, v in row.items() if k.startswith("scored:") and v})
    cols = ["checks", "reached", "attacked_replies", "scores_from_attack", "crashes"]
    total: Counter = Counter()
    print("| method | stage | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for label, row in table.items():
        total.update({c: row[c] for c in cols})
        print(f"| {label} | " + " | ".join(str(row[c]) for c in cols) + " |")
    print("| **all** | | " + " | ".join(f"**{total[c]}**" for c in cols) + " |")
    print("\nchecks per attack class: " + ", ".join(f"{k} {v}" for k, v in per_class.items()))
    print(
        "scores from attacked replies per class: " + (", ".join(f"{k} {v}" for k, v in scored_class.items()) or "none")
    )
    print(
        f"{len(configs)} configurations, {len(table)} (configuration, verdict stage) pairs; "
        f"{time.perf_counter() - start:.1f} s"
    )
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(
            json.dumps(
                {
                    "rows": {k: dict(v) for k, v in table.items()},
                    "all": dict(total),
                    "per_class": dict(per_class),
                    "scored_per_class": dict(scored_class),
                },
                indent=1,
            )
        )
    bad = total["scores_from_attack"] + total["crashes"] + (total["checks"] - total["reached"])
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mixed-runs", type=int, default=40, help="checks per method with faults mixed in")
    parser.add_argument(
        "--stage-by-stage",
        action="store_true",
        help="attack one verdict stage at a time, every other stage answered validly",
    )
    parser.add_argument("--methods", default=None, help="only these methods' configurations (comma-separated)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    methods = {m.strip() for m in args.methods.split(",") if m.strip()} if args.methods else None
    if args.stage_by_stage:
        return stage_by_stage(args.out, methods)

    start = time.perf_counter()
    table: dict[str, Counter] = defaultdict(Counter)
    for method, options in [c for c in CONFIGS if not methods or c[0] in methods]:
        label = method + "".join(f" {k}={v}" for k, v in options.items())
        row = table[label]
        for items in GARBAGE.values():
            for item in items:
                _run(method, options, lambda messages, item=item: item, row)
        rng = random.Random(label)
        pool = [g for items in GARBAGE.values() for g in items]

        def mixed(messages):  # only called by the _run calls of this iteration below
            if rng.random() < 0.3:  # noqa: B023
                row["faults"] += 1  # noqa: B023
                raise rng.choice(FAULTS)  # noqa: B023
            return rng.choice(pool)  # noqa: B023

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
    print(
        f"\n{len(GARBAGE)} garbage classes, {sum(len(v) for v in GARBAGE.values())} replies each method; "
        f"{time.perf_counter() - start:.1f} s"
    )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({k: dict(v) for k, v in table.items()} | {"all": dict(total)}, indent=1))
    bad = total["scored"] + total["scored_verdicts"] + total["findings"] + total["crashes"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
