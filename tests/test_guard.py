"""The guard (filter, fix, raise, annotate), its CLI and route, and the streaming guard: offline, with the scripted
verdict-first judge of tests/citation_oracle.py (a claim is supported when the source states its numbers)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import halluscope
from halluscope.config import Config
from halluscope.llm.client import LLM
from halluscope.llm.fake import FakeModel
from halluscope.methods.guard import GuardError, aguard_stream
from tests.citation_oracle import CHUNKS, Oracle

ANSWER = (
    "The tower was completed in 1889 [2]. It is 330 metres tall [1][2]. It was painted gold in 1950 [1]. "
    "The company also finished a viaduct in 1884."
)


def actions(result: Any) -> list[tuple[str, str]]:
    return [(s.action, s.status) for s in result.sentences]


def test_filter_removes_unsupported_sentences_and_keeps_citations_consistent() -> None:
    result = halluscope.guard(CHUNKS, ANSWER, "filter", llm=Oracle().llm())
    assert result.text == (
        "The tower was completed in 1889 [1]. It is 330 metres tall [2]. "
        "The company also finished a viaduct in 1884 [3]."
    )
    assert actions(result) == [
        ("recited", "wrong_citation"),
        ("recited", "supported"),
        ("removed", "unsupported"),
        ("recited", "supported"),
    ]
    assert result.report.subscores["citation_recall"] == 0.25
    assert [row["action"] for row in result.report.details["guard"]["sentences"]] == [
        "recited",
        "recited",
        "removed",
        "recited",
    ]


def test_filter_keeps_a_clean_answer_unchanged() -> None:
    answer = "The tower was completed in 1889 [1]. It is 330 metres tall [2]."
    result = halluscope.guard(CHUNKS, answer, llm=Oracle().llm())
    assert result.text == answer and not result.changed


def test_filter_drops_footnote_definitions_no_sentence_cites() -> None:
    answer = "It is 330 metres tall.[^2] It was painted gold in 1950.[^1]\n\n[^1]: Chunk one\n[^2]: Chunk two"
    result = halluscope.guard(CHUNKS, answer, llm=Oracle().llm())
    assert result.text == "It is 330 metres tall.[^2]\n\n[^2]: Chunk two"


def test_an_answer_without_markers_is_checked_against_every_chunk_and_gets_no_markers() -> None:
    answer = "The tower was completed in 1889. It was painted gold in 1950."
    result = halluscope.guard(CHUNKS, answer, llm=Oracle().llm())
    assert result.text == "The tower was completed in 1889."
    assert actions(result) == [("kept", "supported"), ("removed", "unsupported")]


def test_fix_applies_only_a_fix_that_passes_re_verification() -> None:
    answer = "It was painted gold in 1950 [1]. It opened in 1900 [1]. It is 330 metres tall [2]."
    # the first fix is supported by chunk 1; the second is not (no chunk states 1905)
    oracle = Oracle(fixes=["It was completed in 1889.", "It opened in 1905."])
    result = halluscope.guard(CHUNKS, answer, "fix", llm=oracle.llm())
    assert result.text == "It was completed in 1889 [1]. It is 330 metres tall [2]."
    assert actions(result) == [("fixed", "unsupported"), ("removed", "unsupported"), ("kept", "supported")]
    assert "did not pass re-verification" in result.sentences[1].reason
    # each fix was re-scored against the chunk the sentence cites
    assert ("It was completed in 1889.", CHUNKS[0]) in oracle.asked
    assert ("It opened in 1905.", CHUNKS[0]) in oracle.asked


def test_raise_throws_with_the_findings_and_passes_a_clean_answer() -> None:
    with pytest.raises(GuardError) as raised:
        halluscope.guard(CHUNKS, ANSWER, "raise", llm=Oracle().llm())
    assert "sentence 3 (unsupported)" in str(raised.value)
    kinds = [f.description.split(":")[0] for f in raised.value.findings]
    assert "wrong citation" in kinds and "unsupported claim" in kinds
    clean = "It is 330 metres tall [2]."
    assert halluscope.guard(CHUNKS, clean, "raise", llm=Oracle().llm()).text == clean


def test_annotate_marks_the_failing_spans() -> None:
    result = halluscope.guard(CHUNKS, ANSWER, "annotate", llm=Oracle().llm())
    assert result.text == (
        '<mark class="halluscope-wrong-citation">The tower was completed in 1889 [2].</mark> '
        "It is 330 metres tall [1][2]. "
        '<mark class="halluscope-unsupported">It was painted gold in 1950 [1].</mark> '
        "The company also finished a viaduct in 1884."
    )


def test_nothing_unscored_ships() -> None:
    result = halluscope.guard(CHUNKS, "It is 330 metres tall [2].", llm=LLM(FakeModel(default="maybe"), cache=None))
    assert result.text == ""
    assert actions(result) == [("removed", "unscored")]


def test_uncited_flag_removes_uncited_sentences() -> None:
    answer = "It is 330 metres tall [2]. The company also finished a viaduct in 1884."
    result = halluscope.guard(CHUNKS, answer, uncited="flag", llm=Oracle().llm())
    assert result.text == "It is 330 metres tall [2]."


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="on_fail must be one of"):
        halluscope.guard(CHUNKS, ANSWER, "drop", llm=Oracle().llm())


# --- CLI and service ------------------------------------------------------------------------------------------


@pytest.fixture
def oracle_model(monkeypatch: pytest.MonkeyPatch) -> Oracle:
    import halluscope.llm

    oracle = Oracle()
    monkeypatch.setattr(halluscope.llm, "get_llm", lambda config=None, api=None: oracle.llm())
    return oracle


def test_the_cli_prints_the_shipped_text_and_writes_the_report(tmp_path: Path, oracle_model: Oracle) -> None:
    from halluscope.cli.main import app

    (tmp_path / "chunks.json").write_text(json.dumps(CHUNKS))
    (tmp_path / "answer.txt").write_text(ANSWER)
    args = ["guard", "--context", str(tmp_path / "chunks.json"), "--target", str(tmp_path / "answer.txt")]
    result = CliRunner().invoke(app, [*args, "--report", str(tmp_path / "report.json")])
    assert result.exit_code == 1, result.output
    assert result.stdout.strip() == (
        "The tower was completed in 1889 [1]. It is 330 metres tall [2]. "
        "The company also finished a viaduct in 1884 [3]."
    )
    assert "sentence 3 removed (unsupported)" in result.stderr
    report = halluscope.Report.model_validate_json((tmp_path / "report.json").read_text())
    assert report.details["guard"]["policy"] == "filter"
    refused = CliRunner().invoke(app, [*args, "--on-fail", "raise"])
    assert refused.exit_code == 1 and refused.stdout == "" and "refused:" in refused.stderr
    bad = CliRunner().invoke(app, [*args, "--on-fail", "drop"])
    assert bad.exit_code == 2


def test_post_guard(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from halluscope.server import ServerSettings, create_app

    app = create_app(Config(cache=False), ServerSettings(jobs_db=tmp_path / "jobs.sqlite"), llm=Oracle().llm())
    with TestClient(app) as client:
        answer = client.post("/guard", json={"contexts": CHUNKS, "answer": ANSWER})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["text"].startswith("The tower was completed in 1889 [1].") and body["changed"] is True
        assert [s["action"] for s in body["sentences"]][2] == "removed"
        assert body["report"]["method"] == "citations"
        refused = client.post("/guard", json={"contexts": CHUNKS, "answer": ANSWER, "on_fail": "raise"})
        assert refused.status_code == 422 and refused.json()["findings"]
        mixed = client.post("/guard", json={"contexts": CHUNKS, "answer": "A 1889 [1]. B 330 [^2]."})
        assert mixed.status_code == 422 and "mixes citation styles" in mixed.text


# --- streaming ------------------------------------------------------------------------------------------------

STREAM = [
    "The tower", " was completed", " in 1889", ".", " [", "1", "]", " It was", " painted gold",
    " in 1950 [1].", " It is 330", " metres tall", " [2]", ".",
]  # fmt: skip


class Events:
    """An event log; its length is the clock the stream's latencies are measured with (in events, not seconds)."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def add(self, event: str) -> None:
        self.log.append(event)

    def clock(self) -> float:
        return float(len(self.log))


async def tokens(events: Events) -> Any:
    for n, token in enumerate(STREAM):
        events.add(f"token {n}")
        yield token
        await asyncio.sleep(0)


def test_guard_stream_checks_each_sentence_as_it_completes_and_releases_in_order() -> None:
    events = Events()
    oracle = Oracle(hook=lambda claim: events.add(f"scored {claim}"))

    async def run() -> list[Any]:
        out = []
        stream = aguard_stream(CHUNKS, tokens(events), llm=oracle.llm(), clock=events.clock)
        async for released in stream:
            events.add(f"released {released.sentence.index}")
            out.append(released)
        return out

    released = asyncio.run(run())
    log = events.log
    print("\nstream events:", *log, sep="\n  ")
    print("release latency per sentence (events from its last token):", [r.latency_s for r in released])
    assert [r.sentence.index for r in released] == [0, 1, 2]
    assert "".join(r.piece for r in released) == "The tower was completed in 1889. [1] It is 330 metres tall [2]."
    assert [r.sentence.action for r in released] == ["kept", "removed", "kept"]
    # nothing is released before its check: each sentence's score precedes its release
    claims = ["The tower was completed in 1889.", "It was painted gold in 1950.", "It is 330 metres tall."]
    for r, claim in zip(released, claims):
        assert log.index(f"scored {claim}") < log.index(f"released {r.sentence.index}")
    # the first sentence was checked while the answer was still streaming, not after it
    assert log.index("scored The tower was completed in 1889.") < log.index(f"token {len(STREAM) - 1}")
    # its marker "[1]" arrived in three tokens after the full stop and still belongs to it
    assert released[0].sentence.original == "The tower was completed in 1889. [1]"
    assert all(r.latency_s >= 0 for r in released)
    # each check's own time holds its score event; it started once the sentence was complete, after its last token
    for r in released:
        assert r.check_s is not None and r.check_s >= 1
        assert r.completed_at is not None and r.last_token_at <= r.completed_at <= r.released_at
        assert r.released_at - r.completed_at >= r.check_s
    # the first sentence is known complete at the token after its marker: " It was" (token 7)
    assert released[0].completed_at == log.index("token 7") + 1


def test_guard_stream_waits_for_a_slow_check_and_keeps_the_order() -> None:
    gate = asyncio.Event
    events = Events()

    class Gated(FakeModel):
        """Holds the check of the sentence about 1889 until the test opens the gate."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.gate = gate()

        async def generate(self, messages: Any, params: Any) -> Any:
            if "completed in 1889" in messages[-1]["content"]:
                await self.gate.wait()
            return await super().generate(messages, params)

    oracle = Oracle(hook=lambda claim: events.add(f"scored {claim}"))
    base = oracle.llm()
    fake = Gated(responder=oracle.respond, logprobs=base.api._logprobs)

    async def run() -> list[Any]:
        released: list[Any] = []

        async def consume() -> None:
            async for r in aguard_stream(CHUNKS, tokens(events), llm=LLM(fake, cache=None), clock=events.clock):
                events.add(f"released {r.sentence.index}")
                released.append(r)

        task = asyncio.ensure_future(consume())
        for _ in range(1000):  # bounded: until the later sentences are checked
            await asyncio.sleep(0)
            if "scored It is 330 metres tall." in events.log:
                break
        assert "scored It is 330 metres tall." in events.log
        assert released == []  # the first sentence is unchecked, so nothing is released, not even the later ones
        events.add("gate opened")
        fake.gate.set()
        await asyncio.wait_for(task, timeout=30)
        return released

    released = asyncio.run(run())
    assert [r.sentence.index for r in released] == [0, 1, 2]
    assert events.log.index("gate opened") < events.log.index("released 0")
    assert released[0].latency_s > released[2].latency_s - 1  # the held sentence waited (in events) for its check


def test_sync_guard_stream_with_a_plain_iterator() -> None:
    released = list(halluscope.guard_stream(CHUNKS, iter(STREAM), "annotate", llm=Oracle().llm()))
    assert "".join(r.piece for r in released) == (
        'The tower was completed in 1889. [1] <mark class="halluscope-unsupported">It was painted gold in 1950 '
        "[1].</mark> It is 330 metres tall [2]."
    )


def test_guard_stream_raise_stops_before_the_failing_sentence() -> None:
    seen = []
    with pytest.raises(GuardError, match="sentence 2") as raised:
        for r in halluscope.guard_stream(CHUNKS, iter(STREAM), "raise", llm=Oracle().llm()):
            seen.append(r.sentence.index)
    assert seen == [0]
    assert [f.description for f in raised.value.findings] == [
        "unsupported claim: no chunk supports sentence 2 (it cites [1])"
    ]
