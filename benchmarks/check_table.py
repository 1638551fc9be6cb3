"""``halluscope check --input pairs.csv --output results.parquet`` on N generated pairs (``--method rouge``, no
LLM): one uninterrupted run, then a run killed with SIGKILL once K rows are in the partial file and resumed.
Prints the timings and whether the resumed output equals the uninterrupted one (nothing lost or repeated).

    python benchmarks/check_table.py --pairs 1000 --kill-after 400 --work /tmp/check_table
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

WORDS = ("the cat sat on a mat while the dog ran to the park and a bird sang in the tree near the old house by "
         "the river").split()


def make_pairs(path: Path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    rows = [{"id": f"p{i}", "source": " ".join(rng.choices(WORDS, k=80)) + ".",
             "target": " ".join(rng.choices(WORDS, k=20)) + "."} for i in range(n)]
    pd.DataFrame(rows).to_csv(path, index=False)


def command(pairs: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "halluscope.cli.main", "check", "--input", str(pairs), "--output", str(out),
            "--method", "rouge", "--no-progress"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--kill-after", type=int, default=400)
    parser.add_argument("--work", type=Path, default=Path("/tmp/check_table"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    pairs = args.work / "pairs.csv"
    make_pairs(pairs, args.pairs)
    full, resumed = args.work / "full.parquet", args.work / "resumed.parquet"
    for path in (full, resumed, resumed.with_name(resumed.name + ".partial.jsonl")):
        path.unlink(missing_ok=True)

    started = time.perf_counter()
    subprocess.run(command(pairs, full), check=True, capture_output=True)
    full_s = time.perf_counter() - started

    partial = resumed.with_name(resumed.name + ".partial.jsonl")
    proc = subprocess.Popen(command(pairs, resumed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        if partial.exists() and len(partial.read_bytes().splitlines()) > args.kill_after:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    killed_rows = len(partial.read_bytes().splitlines()) - 1 if partial.exists() else 0
    started = time.perf_counter()
    done = subprocess.run(command(pairs, resumed), check=True, capture_output=True, text=True)
    resume_s = time.perf_counter() - started

    a, b = pd.read_parquet(full), pd.read_parquet(resumed)
    same = a.drop(columns="elapsed_s").equals(b.drop(columns="elapsed_s"))
    print(json.dumps({
        "pairs": args.pairs, "uninterrupted_s": round(full_s, 2), "killed_with_rows_done": killed_rows,
        "killed_by_sigkill": proc.returncode == -signal.SIGKILL, "resume_s": round(resume_s, 2),
        "resume_summary": done.stdout.strip(), "rows_out": len(b), "distinct_ids": int(b["id"].nunique()),
        "ids_in_input_order": list(b["id"]) == [f"p{i}" for i in range(args.pairs)],
        "equal_to_uninterrupted_run": bool(same), "partial_file_left": partial.exists(),
    }, indent=2))


if __name__ == "__main__":
    main()
