"""Whole reports of the explanation set's targets, from whichever halluscope is importable, for
``halluscope bench-explain score`` (docs/benchmarks.md, "Explanations").

It uses nothing but ``halluscope.check(source, target, method=..., model=..., **options)``, so it runs against an
older checkout too (``PYTHONPATH=/path/to/old/src python benchmarks/explain_reports.py ...``), whose ``check --input``
result rows may lack the fields the benchmark scores (the fix, its re-verification, the evidence relation). One
``{"id": ..., "report": REPORT}`` line per target, appended as each is done; a rerun skips the ids already written.

    python benchmarks/explain_reports.py --targets explain_targets.jsonl --output old_reports.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def _options(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--option expects KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=Path, required=True, help="the targets file of `bench-explain build`")
    parser.add_argument("--output", type=Path, required=True, help="the reports file (.jsonl; resumed)")
    parser.add_argument("--method", default=None, help="the method (default: that version's default)")
    parser.add_argument("--model", default=None, help="the model (default: that version's default)")
    parser.add_argument("--option", "-o", action="append", default=[], help="a method option KEY=VALUE")
    args = parser.parse_args(argv)

    import halluscope

    options = _options(args.option)
    done: set[str] = set()
    if args.output.exists():
        done = {json.loads(line)["id"] for line in args.output.read_text(encoding="utf-8").splitlines() if line.strip()}
    rows = [json.loads(line) for line in args.targets.read_text(encoding="utf-8").splitlines() if line.strip()]
    with args.output.open("a", encoding="utf-8") as out:
        for row in rows:
            if row["id"] in done:
                continue
            started = time.perf_counter()
            try:
                report: dict[str, Any] = json.loads(
                    halluscope.check(
                        row["source"], row["target"], method=args.method, model=args.model, **options
                    ).model_dump_json()
                )
            except Exception as exc:  # noqa: BLE001 - any version's failure becomes an unscored line that names it
                report = {"score": None, "unscored_reason": f"{type(exc).__name__}: {exc}", "findings": []}
                report["elapsed_s"] = time.perf_counter() - started
            out.write(json.dumps({"id": row["id"], "report": report}) + "\n")
            out.flush()
            print(f"{row['id']}: score {report.get('score')}", flush=True)


if __name__ == "__main__":
    main()
