"""Replaying recorded real replies: a fixture under ``tests/replays/`` holds one check of one method on
one dev item with a real model -- every request it sent (messages and response format) with the raw reply, in
order, and the report's outcome at record time. :class:`ReplayModel` answers each request by exact match of the
request against the fixture; a request nobody recorded is refused and kept in :attr:`ReplayModel.unmatched`
with a unified diff against the closest recorded request, so a reworded prompt fails its replay test loudly.

Written by ``python benchmarks/record_replays.py``, run offline by ``tests/test_replay.py`` and by
``benchmarks/refactor_snapshot.py``. Uses only the backend protocol (``generate(messages, params)``), so it
replays against older and newer source trees alike.

A fixture holds no copy of the dev data (``../shared/data/README.md``): its ``item`` names the dataset file, the
row id, the row's fields and the sha256 of the source and target texts, and in every recorded request (message
contents, and the texts whose tokens were counted) the exact source and target texts stand as ``{{source}}`` and
``{{target}}`` (a literal ``{{`` stands as ``{{brace}}``). :func:`load_fixture` reads the row from the shared
data folder (``HALLUSCOPE_DATA_DIR``, else ``../shared/data`` next to this checkout) and puts the texts back;
without the folder or the row it raises :class:`ReplayDataMissing` naming what it looked for, and on a changed
text :class:`ReplayDataChanged`.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from halluscope.llm import LLM, GenerateParams, LLMError
from halluscope.llm.base import Completion
from halluscope.records import Report, Usage

REPLAY_DIR = Path(__file__).resolve().parent / "replays"
DATA_DIR_ENV = "HALLUSCOPE_DATA_DIR"
FORMAT = "replay/2"  # item by reference, request texts with placeholders

# the placeholders a stripped text may hold, and what each stands for
_PLACEHOLDERS = {"source": "{{source}}", "target": "{{target}}", "brace": "{{brace}}"}
_DECODE = re.compile(r"\{\{(source|target|brace)\}\}")


def request_key(messages: list[dict[str, str]], params: GenerateParams) -> str:
    """What identifies a request: its messages and the response format it asks for (JSON mode, schema)."""
    return json.dumps(
        {
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "json_mode": params.json_mode,
            "json_schema": params.json_schema,
        },
        sort_keys=True,
    )


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

    def __init__(
        self,
        calls: list[dict[str, Any]],
        name: str,
        context_window: int | None = None,
        structured_output: str = "schema",
        token_counts: dict[str, int | None] | None = None,
    ):
        self.name = name
        self._token_counts = token_counts or {}
        self.context_window = context_window
        self.structured_output = structured_output
        self._calls = [
            (request_key(c["messages"], GenerateParams(json_mode=c["json_mode"], json_schema=c["json_schema"])), c)
            for c in calls
        ]
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
        return (
            "request not in the fixture (re-record with `python benchmarks/record_replays.py` if the change "
            "is intended):\n" + "\n".join(diff)
        )


class ReplayDataMissing(LookupError):
    """The dev data a fixture refers to is not here (no data folder, no file, no row): its test is skipped."""


class ReplayDataChanged(ValueError):
    """The dev data row a fixture refers to no longer holds the recorded text: its test fails."""


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def strip_text(text: str, source: str, target: str) -> str:
    """``text`` with every occurrence of the source and target texts replaced by their placeholders, and every
    literal ``{{`` by ``{{brace}}`` (one left-to-right pass, the longer of source and target tried first), so that
    :func:`fill_text` gives ``text`` back exactly and no ``{{`` of the text can be read as a placeholder."""
    if not source or not target:
        raise ValueError("an empty source or target cannot be stripped")
    longer, shorter = (
        (("source", source), ("target", target))
        if len(source) >= len(target)
        else (("target", target), ("source", source))
    )
    pattern = re.compile(
        f"(?P<{longer[0]}>{re.escape(longer[1])})|(?P<{shorter[0]}>{re.escape(shorter[1])})"
        r"|(?P<brace>\{\{)"
    )
    return pattern.sub(lambda m: _PLACEHOLDERS[m.lastgroup], text)


def fill_text(text: str, source: str, target: str) -> str:
    """The inverse of :func:`strip_text`."""
    values = {"source": source, "target": target, "brace": "{{"}
    return _DECODE.sub(lambda m: values[m.group(1)], text)


def _map_request_texts(fixture: dict[str, Any], change) -> dict[str, Any]:
    """A copy of ``fixture`` with ``change`` applied to every request text: each recorded message's content and
    each text whose tokens were counted. Replies and the outcome are the model's output and stay as recorded."""
    out = dict(fixture)
    out["calls"] = [
        {**call, "messages": [{**m, "content": change(m["content"])} for m in call["messages"]]}
        for call in fixture["calls"]
    ]
    out["token_counts"] = {change(text): n for text, n in (fixture.get("token_counts") or {}).items()}
    return out


def strip_fixture(fixture: dict[str, Any], fields: dict[str, str]) -> dict[str, Any]:
    """The stored form of a fixture whose ``item`` holds ``source`` and ``target``: the item by reference
    (dataset file, row id, the row's field names, the texts' sha256), the request texts with placeholders."""
    item = fixture["item"]
    source, target = item["source"], item["target"]
    stored = _map_request_texts(fixture, lambda text: strip_text(text, source, target))
    stored["item"] = {
        "dataset": item["dataset"],
        "id": item["id"],
        "fields": dict(fields),
        "source_sha256": sha256(source),
        "target_sha256": sha256(target),
    }
    stored = {"format": FORMAT, **{k: v for k, v in stored.items() if k != "format"}}
    return stored


def data_dir() -> Path:
    """The shared dev data folder: ``HALLUSCOPE_DATA_DIR``, else ``../shared/data`` next to this checkout."""
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


def read_item(item: dict[str, Any], data: Path | None = None, fixture_name: str = "fixture") -> tuple[str, str]:
    """The source and target texts of a stored fixture's item, read from the shared data and checked against
    their sha256."""
    data = data_dir() if data is None else Path(data)
    path = data / item["dataset"]
    if not data.is_dir():
        raise ReplayDataMissing(
            f"{fixture_name}: shared data folder not found at {data} (set {DATA_DIR_ENV}); "
            f"the replay needs row {item['id']!r} of {item['dataset']}"
        )
    if not path.is_file():
        raise ReplayDataMissing(f"{fixture_name}: dataset file {path} not found; the replay needs row {item['id']!r}")
    fields = item["fields"]
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if str(row.get(fields["id"])) == item["id"]:
            source, target = row[fields["source"]], row[fields["target"]]
            for name, text in (("source", source), ("target", target)):
                if sha256(text) != item[f"{name}_sha256"]:
                    raise ReplayDataChanged(
                        f"{fixture_name}: the {name} of row {item['id']!r} in {path} is not the text the fixture was "
                        f"recorded on (sha256 {sha256(text)}, recorded {item[f'{name}_sha256']}); re-record with "
                        "`python benchmarks/record_replays.py`"
                    )
            return source, target
    raise ReplayDataMissing(f"{fixture_name}: row {item['id']!r} not found in {path}")


def load_stored(path: Path | str) -> dict[str, Any]:
    """A fixture as stored: no dataset text, request texts with placeholders (enough for its method and options)."""
    return json.loads(Path(path).read_text())


def load_fixture(path: Path | str, data: Path | None = None) -> dict[str, Any]:
    """A fixture ready to replay: the item's source and target read from the shared data (``data``, default
    :func:`data_dir`) and put back into ``item`` and into every request text."""
    path = Path(path)
    stored = load_stored(path)
    if stored.get("format") != FORMAT:
        raise ValueError(
            f"{path}: not a {FORMAT} fixture (convert it with `python benchmarks/record_replays.py --convert`)"
        )
    source, target = read_item(stored["item"], data, fixture_name=str(path))
    fixture = _map_request_texts(stored, lambda text: fill_text(text, source, target))
    fixture["item"] = {**stored["item"], "source": source, "target": target}
    return fixture


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

    model = ReplayModel(
        fixture["calls"],
        fixture["model"],
        context_window=fixture.get("context_window"),
        structured_output=fixture.get("structured_output", "schema"),
        token_counts=fixture.get("token_counts"),
    )
    params = GenerateParams(**fixture.get("params", {}))
    llm = LLM(model, cache=None, default_params=params)
    item = fixture["item"]
    report = get_method(fixture["method"], llm=llm, **fixture["options"]).check(item["source"], item["target"])
    return report, model
