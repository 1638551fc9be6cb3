"""Before/after proof for a refactor: one deterministic JSON of what the project visibly does, to be
taken on the old tree and on the new one and compared byte for byte.

    PYTHONPATH=/path/to/old/src python benchmarks/refactor_snapshot.py --out before.json
    PYTHONPATH=$PWD/src          python benchmarks/refactor_snapshot.py --out after.json
    cmp before.json after.json   # or: python benchmarks/refactor_snapshot.py --compare before.json after.json

The ``halluscope`` package comes from ``PYTHONPATH`` (the tree under test); the test-side helpers (the stage
fuzzer's valid replies, the fuzz configurations, the replay fixtures) come from this file's own checkout, so the
same questions are asked of both trees. Sections (``--parts``, all by default):

- ``fuzz``: the stage-by-stage fuzz table counts (``benchmarks/fuzz_table.py --stage-by-stage``, in process);
- ``methods``: for every method configuration below, on the 5 shortest items (distinct sources) of each shared
  dev set (QAGS-CNNDM, SummEdits samsum, FINAL dev), the full Report JSON with its call log (the prompts sent,
  the replies), less wall-clock fields; the model is a scripted fake that answers every stage with a valid reply built
  from the prompt (``tests/stage_fuzz.valid``), flipping the verdict for about one prompt in three (by a hash of the
  prompt, so the same prompt always gets the same reply);
- ``replays``: the report of every recorded replay fixture (``tests/replays/``) replayed offline, with the
  requests that found no recorded reply; the fixtures' item texts are read from the dev data.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's tests/ helpers; halluscope itself comes from PYTHONPATH

DATA = ROOT.parent / "shared" / "data"
ITEMS_PER_SET = 5

CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("geval", {}),
    ("dcr", {}),
    ("factscore", {}),
    ("probe", {}),
    ("dove", {}),
    ("localize", {}),
    ("improve", {}),
    ("gate", {}),
    ("rouge", {}),
    ("dcr", {"gate": "lexical"}),
    ("factscore", {"gate": "lexical"}),
    ("probe", {"gate": "lexical"}),
    ("dove", {"gate": "lexical"}),
    ("dcr", {"batch_size": 3}),
    ("factscore", {"batch_size": 3}),
    ("probe", {"batch_size": 3}),
    ("dove", {"batch_size": 3}),
]

# fields whose value is wall-clock time (or derived from it): dropped wherever they appear
VOLATILE = {"elapsed_s", "duration_s", "seconds", "started_at", "finished_at", "timestamp", "created_at"}


def _label(method: str, options: dict[str, Any]) -> str:
    return method + "".join(f" {k}={v}" for k, v in sorted(options.items()))


def strip_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: strip_volatile(v)
            for k, v in value.items()
            if k not in VOLATILE and not k.endswith("_seconds") and not k.endswith("_elapsed_s")
        }
    if isinstance(value, list):
        return [strip_volatile(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------ dev items


def _shortest(rows: list[dict[str, Any]], source: str, target: str, ident: str, name: str) -> list[dict[str, str]]:
    items = [{"set": name, "id": str(r[ident]), "source": r[source], "target": r[target]} for r in rows]
    items.sort(key=lambda it: (len(it["source"]) + len(it["target"]), it["id"]))
    chosen: list[dict[str, str]] = []
    for it in items:  # one target per source: five different documents
        if all(c["source"] != it["source"] for c in chosen):
            chosen.append(it)
    return chosen[:ITEMS_PER_SET]


def dev_items(data: Path) -> list[dict[str, str]]:
    def rows(path: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (data / path).read_text().splitlines() if line.strip()]

    return (
        _shortest(rows("qags/cnndm_dev.jsonl"), "source", "summary", "id", "qags")
        + _shortest(rows("summedits/samsum.jsonl"), "doc", "summary", "id", "summedits")
        + _shortest(rows("final/dev.jsonl"), "text", "summary", "doc_id", "final")
    )


# ------------------------------------------------------------------------------------------ the scripted fake


def valid_responder():
    from tests.stage_fuzz import prompt_of, stage_of, valid_text

    def respond(messages: list[dict[str, str]]) -> str:
        prompt = prompt_of(messages)
        stage = stage_of(messages)
        if stage is None:
            return "No stage recognised for this prompt."
        flip = zlib.crc32(prompt.encode("utf-8", "surrogatepass")) % 3 == 0
        try:
            return valid_text(stage, prompt, flip)
        except KeyError:
            return f"No reply scripted for stage {stage}."

    return respond


def methods_section(data: Path) -> dict[str, Any]:
    from halluscope.llm import LLM, FakeModel
    from halluscope.methods import get_method

    items = dev_items(data)
    respond = valid_responder()
    out: dict[str, Any] = {}
    for method, options in CONFIGS:
        label = _label(method, options)
        reports = {}
        for item in items:
            llm = LLM(FakeModel(responder=respond), cache=None)
            try:
                report = get_method(method, llm=llm, **options).check(item["source"], item["target"])
                reports[f"{item['set']}/{item['id']}"] = strip_volatile(report.model_dump(mode="json"))
            except Exception as exc:  # a crash is an observable output too
                reports[f"{item['set']}/{item['id']}"] = {"crash": f"{type(exc).__name__}: {exc}"}
        out[label] = reports
        print(f"  methods: {label} done", file=sys.stderr, flush=True)
    return out


# ------------------------------------------------------------------------------------------ fuzz and replays


def fuzz_section() -> dict[str, Any]:
    from tests.stage_fuzz import STAGE_CONFIGS, STRUCTURAL_CLASSES, config_label, fuzz_stage, verdict_stages_reached
    from tests.test_fuzz_methods import GARBAGE

    classes = list(STRUCTURAL_CLASSES) + ["amc_rule_negations"] + list(GARBAGE)
    rows: dict[str, dict[str, int]] = {}
    crashes: list[str] = []
    for method, options in STAGE_CONFIGS:
        for stage in verdict_stages_reached(method, options):
            row: Counter = Counter()
            fuzz_stage(method, options, stage, classes, GARBAGE, row, on_crash=crashes.append)
            rows[f"{config_label(method, options)} | {stage}"] = dict(sorted(row.items()))
        print(f"  fuzz: {config_label(method, options)} done", file=sys.stderr, flush=True)
    return {"rows": rows, "crashes": sorted(crashes)}


def replays_section(data: Path) -> dict[str, Any]:
    from tests.replay_model import ReplayDataMissing, fixtures, load_fixture, replay

    out: dict[str, Any] = {}
    for path in fixtures():
        try:
            fixture = load_fixture(path, data)  # the fixtures hold no dataset text: their item comes from data
        except ReplayDataMissing as exc:
            raise SystemExit(f"{exc} (use --data)") from exc
        report, model = replay(fixture)
        out[path.stem] = {
            "report": strip_volatile(report.model_dump(mode="json")),
            "unmatched": model.unmatched,
            "unused_recorded_calls": model.unused(),
        }
    return out


def compare(a: Path, b: Path) -> int:
    left, right = json.loads(a.read_text()), json.loads(b.read_text())
    diffs: list[str] = []

    def walk(x: Any, y: Any, where: str) -> None:
        if len(diffs) >= 40:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                if k not in x or k not in y:
                    diffs.append(f"{where}/{k}: only in {'after' if k not in x else 'before'}")
                else:
                    walk(x[k], y[k], f"{where}/{k}")
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{where}[{i}]")
        elif x != y:
            diffs.append(f"{where}: {json.dumps(x)[:300]} != {json.dumps(y)[:300]}")

    walk(left, right, "")
    print("\n".join(diffs) if diffs else "identical")
    return 1 if diffs else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="where to write the snapshot JSON")
    parser.add_argument("--parts", default="fuzz,methods,replays", help="comma-separated: fuzz, methods, replays")
    parser.add_argument("--data", type=Path, default=DATA, help="the shared dev data (default ../shared/data)")
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="compare two snapshots and list the first differences",
    )
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        parser.error("--out is required (or --compare)")
    import halluscope

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    print(f"halluscope from {Path(halluscope.__file__).parent}", file=sys.stderr)
    snapshot: dict[str, Any] = {"parts": parts}
    for part in parts:
        start = time.perf_counter()
        if part == "fuzz":
            snapshot["fuzz"] = fuzz_section()
        elif part == "methods":
            if not args.data.is_dir():
                raise SystemExit(f"dev data not found at {args.data} (use --data)")
            snapshot["methods"] = methods_section(args.data)
        elif part == "replays":
            snapshot["replays"] = replays_section(args.data)
        else:
            parser.error(f"unknown part {part!r}")
        print(f"{part}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(snapshot, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
