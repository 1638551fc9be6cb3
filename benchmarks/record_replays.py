"""Record the replay suite: every LLM method checks one short shared dev item with a real model, and
each check is written to ``tests/replays/<name>.json`` -- the item, the options, the model, every request
(messages and response format) with its raw reply in order, the token counts the method asked for, and the
report's outcome (score, per-claim labels, findings' spans). ``tests/test_replay.py`` replays them offline.

A fixture holds no copy of the dev data: the item is stored by reference (dataset file, row id, sha256 of its
source and target) and the request texts hold ``{{source}}`` / ``{{target}}`` where the item's texts stood; the
replay reads the row from ``../shared/data`` and puts them back (``tests/replay_model.py``).

    python benchmarks/record_replays.py                                   # embedded 1.5B, every method
    python benchmarks/record_replays.py --model embedded:smollm2 --only dove
    python benchmarks/record_replays.py --model gpt-4o-mini --base-url https://api.openai.com/v1
    python benchmarks/record_replays.py --convert     # rewrite fixtures that still hold the item's text; no model

Re-record after an intended prompt change (a replay test names the request that no longer matches). Needs
``../shared/data`` (or ``--data``). The response cache is off, so every request reaches the model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from halluscope.config import Config  # noqa: E402
from halluscope.llm import GenerateParams, build_api, get_llm  # noqa: E402
from halluscope.methods import get_method  # noqa: E402
from tests.replay_model import FORMAT, REPLAY_DIR, fill_text, outcome, strip_fixture  # noqa: E402

# (fixture name, method, options): every LLM method, and factscore behind the lexical gate
SUITE: list[tuple[str, str, dict[str, Any]]] = [
    ("geval", "geval", {}),
    ("dcr", "dcr", {}),
    ("factscore", "factscore", {}),
    ("factscore_gate_lexical", "factscore", {"gate": "lexical"}),
    ("probe", "probe", {}),
    ("dove", "dove", {}),
    ("localize", "localize", {}),
    ("improve", "improve", {}),
]
ITEM = ("summedits/samsum.jsonl", "samsum_train_13681548_5")  # a short dialogue; the summary says "alone"
FIELDS = {"id": "id", "source": "doc", "target": "summary"}  # the SummEdits row's fields


class RecordingAPI:
    """Wraps a backend: passes every request through and keeps it with its reply, and every token count."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = inner.name
        self.max_concurrency = getattr(inner, "max_concurrency", None)
        self.structured_output = getattr(inner, "structured_output", "schema")
        self.calls: list[dict[str, Any]] = []
        self.token_counts: dict[str, int | None] = {}

    @property
    def context_window(self) -> int | None:
        return self.inner.context_window

    def count_tokens(self, text: str) -> int | None:
        n = self.inner.count_tokens(text)
        self.token_counts[text] = n
        return n

    async def generate(self, messages: list[dict[str, str]], params: GenerateParams):
        completion = await self.inner.generate(messages, params)
        self.calls.append(
            {
                "messages": [dict(m) for m in messages],
                "json_mode": params.json_mode,
                "json_schema": params.json_schema,
                "reply": completion.text,
            }
        )
        return completion


def load_item(data: Path) -> dict[str, str]:
    path, item_id = ITEM
    for line in (data / path).read_text().splitlines():
        row = json.loads(line)
        if row[FIELDS["id"]] == item_id:
            return {"dataset": path, "id": item_id, "source": row[FIELDS["source"]], "target": row[FIELDS["target"]]}
    raise SystemExit(f"item {item_id} not found in {data / path}")


def record(
    name: str, method: str, options: dict[str, Any], item: dict[str, str], config: Config, model_label: str
) -> dict[str, Any]:
    api = RecordingAPI(build_api(config))
    llm = get_llm(config, api=api)
    start = time.perf_counter()
    report = get_method(method, llm=llm, **options).check(item["source"], item["target"])
    took = time.perf_counter() - start
    params = llm.default_params
    fixture = {
        "name": name,
        "method": method,
        "options": options,
        "model": report.model or api.name,
        "recorded_with": model_label,
        "item": item,
        "params": {"temperature": params.temperature, "max_tokens": params.max_tokens, "seed": params.seed},
        "context_window": api.context_window,
        "structured_output": api.structured_output,
        "token_counts": api.token_counts,
        "calls": api.calls,
        "outcome": outcome(report),
    }
    print(
        f"{name}: {len(api.calls)} calls, score {report.score}, {len(report.findings)} findings, {took:.0f} s",
        flush=True,
    )
    return fixture


def stored_form(fixture: dict[str, Any]) -> dict[str, Any]:
    """The fixture as written: no copy of the item's text (``strip_fixture``), checked to give the recorded
    fixture back exactly when the texts are put back."""
    stored = strip_fixture(fixture, FIELDS)
    source, target = fixture["item"]["source"], fixture["item"]["target"]
    for name, text in (("source", source), ("target", target)):
        if text in json.dumps(stored["item"], ensure_ascii=False) or any(
            text in m["content"] for c in stored["calls"] for m in c["messages"]
        ):
            raise SystemExit(f"{fixture['name']}: the item's {name} is still in a request after stripping")
    back = [[fill_text(m["content"], source, target) for m in c["messages"]] for c in stored["calls"]]
    if (
        back != [[m["content"] for m in c["messages"]] for c in fixture["calls"]]
        or {fill_text(t, source, target): n for t, n in stored["token_counts"].items()} != fixture["token_counts"]
    ):
        raise SystemExit(f"{fixture['name']}: stripping the item's text is not reversible")
    return stored


def write_fixture(path: Path, stored: dict[str, Any]) -> None:
    path.write_text(json.dumps(stored, indent=1, ensure_ascii=False) + "\n")


def convert(out: Path, only: list[str] | None) -> int:
    """Rewrite fixtures recorded with the item's text in them (``item.source``/``item.target``) into the stored
    form; the recorded requests, replies and outcome are kept. No model runs."""
    for path in sorted(out.glob("*.json")):
        if only and path.stem not in only:
            continue
        fixture = json.loads(path.read_text())
        if fixture.get("format") == FORMAT:
            print(f"{path.stem}: already {FORMAT}")
            continue
        write_fixture(path, stored_form(fixture))
        print(f"{path.stem}: converted to {FORMAT}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded:qwen2.5-coder-1.5b")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint for --model")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--only", action="append", help="record only these fixture names (repeatable)")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=REPLAY_DIR)
    parser.add_argument(
        "--convert",
        action="store_true",
        help="rewrite existing fixtures that hold the item's text into the stored form; no model",
    )
    args = parser.parse_args()
    if args.convert:
        return convert(args.out, args.only)
    config = Config(
        model=args.model, base_url=args.base_url, api_key=args.api_key, max_tokens=args.max_tokens, cache=False
    )
    item = load_item(args.data)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, method, options in SUITE:
        if args.only and name not in args.only:
            continue
        fixture = record(name, method, options, item, config, args.model)
        write_fixture(args.out / f"{name}.json", stored_form(fixture))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
