"""Replaying recorded real replies (issue 19): a fixture under ``tests/replays/`` holds one check of one method on
one dev item with a real model -- every request it sent (messages and response format) with the raw reply, in
order, and the report's outcome at record time. :class:`ReplayModel` answers each request by exact match of the
request against the fixture; a request nobody recorded is refused and kept in :attr:`ReplayModel.unmatched`
with a unified diff against the closest recorded request, so a reworded prompt fails its replay test loudly.

Written by ``python benchmarks/record_replays.py``, run offline by ``tests/test_replay.py`` and by
``benchmarks/refactor_snapshot.py``. Uses only the backend protocol (``generate(messages, params)``), so it
replays against older and newer source trees alike.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from halluscope.llm import LLM, GenerateParams, LLMError
from halluscope.llm.base import Completion
from halluscope.records import Report, Usage

REPLAY_DIR = Path(__file__).resolve().parent / "replays"


def request_key(messages: list[dict[str, str]], params: GenerateParams) -> str:
    """What identifies a request: its messages and the response format it asks for (JSON mode, schema)."""
    return json.dumps({"messages": [{"role": m["role"], "content": m["content"]} for m in messages],
                       "json_mode": params.json_mode, "json_schema": params.json_schema}, sort_keys=True)


def _readable(key: str) -> list[str]:
    request = json.loads(key)
    lines = [f"json_mode={request['json_mode']} json_schema={request['json_schema']}"]
    for m in request["messages"]:
        lines.append(f"--- {m['role']} ---")
        lines.extend(m["content"].splitlines())
    return lines


class ReplayModel:
    """A backend that answers from a fixture's recorded calls. Each recorded call answers once, in the order
    recorded among equal requests (a request sent twice was recorded twice)."""

    max_concurrency: int | None = None
    context_window: int | None = None
    structured_output = "schema"

    def __init__(self, calls: list[dict[str, Any]], name: str, context_window: int | None = None,
                 structured_output: str = "schema", token_counts: dict[str, int | None] | None = None):
        self.name = name
        self._token_counts = token_counts or {}
        self.context_window = context_window
        self.structured_output = structured_output
        self._calls = [(request_key(c["messages"], GenerateParams(json_mode=c["json_mode"],
                                                                  json_schema=c["json_schema"])), c) for c in calls]
        self._used = [False] * len(self._calls)
        self.unmatched: list[str] = []  # one diff-friendly message per request nobody recorded

    def count_tokens(self, text: str) -> int | None:
        return self._token_counts.get(text)  # the real model's count at record time; unknown otherwise

    def unused(self) -> int:
        return self._used.count(False)

    async def generate(self, messages: list[dict[str, str]], params: GenerateParams) -> Completion:
        key = request_key(messages, params)
        for i, (recorded, call) in enumerate(self._calls):
            if not self._used[i] and recorded == key:
                self._used[i] = True
                return Completion(text=call["reply"], model=self.name, usage=Usage(calls=1))
        self.unmatched.append(self._explain(key))
        raise LLMError("replay: no recorded reply for this request (see ReplayModel.unmatched)")

    def _explain(self, key: str) -> str:
        asked = _readable(key)
        if not self._calls:
            return "the fixture recorded no calls, but this request was sent:\n" + "\n".join(asked)
        closest = max(self._calls, key=lambda rc: difflib.SequenceMatcher(None, rc[0], key).quick_ratio())[0]
        diff = difflib.unified_diff(_readable(closest), asked, "closest recorded request", "request sent", lineterm="")
        return "request not in the fixture (re-record with `python benchmarks/record_replays.py` if the change " \
               "is intended):\n" + "\n".join(diff)


def load_fixture(path: Path | str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def fixtures() -> list[Path]:
    return sorted(REPLAY_DIR.glob("*.json"))


def outcome(report: Report) -> dict[str, Any]:
    """What a replay test compares: the score, why it is unscored, each claim's label, the findings' spans."""
    return {
        "score": None if report.score is None else round(report.score, 9),
        "unscored_reason": report.unscored_reason,
        "labels": [[v.claim.text, v.label] for v in report.verdicts],
        "findings": [[[s.start, s.end] for s in f.target_spans] for f in report.findings],
    }


def replay(fixture: dict[str, Any]) -> tuple[Report, ReplayModel]:
    """Run the fixture's check offline against its recorded replies."""
    from halluscope.methods import get_method

    model = ReplayModel(fixture["calls"], fixture["model"], context_window=fixture.get("context_window"),
                        structured_output=fixture.get("structured_output", "schema"),
                        token_counts=fixture.get("token_counts"))
    params = GenerateParams(**fixture.get("params", {}))
    llm = LLM(model, cache=None, default_params=params)
    item = fixture["item"]
    report = get_method(fixture["method"], llm=llm, **fixture["options"]).check(item["source"], item["target"])
    return report, model
