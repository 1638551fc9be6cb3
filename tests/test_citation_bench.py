"""``halluscope bench-citations`` with the verdict-first scorer on the scripted judge (tests/citation_oracle.py):
every figure the table needs, --limit/--sample, the cache off by default, resuming, and a different run refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from halluscope.bench.citation_set import (
    CitationSetConfig,
    build_citation_set,
    save_citation_set,
    select_items,
    summarize,
)
from tests.citation_oracle import Oracle

ARTICLES = [
    " ".join(
        f"Article {a} reports that event number {a * 100 + i} happened in the town of Place{a}x{i}." for i in range(12)
    )
    for a in range(6)
]


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch) -> tuple[Oracle, list[Any]]:
    """The model the bench builds is the scripted judge; the configs it was built from are kept."""
    import halluscope.llm

    oracle, configs = Oracle(), []

    def get_llm(config: Any = None, api: Any = None) -> Any:
        configs.append(config)
        return oracle.llm()

    monkeypatch.setattr(halluscope.llm, "get_llm", get_llm)
    return oracle, configs


def bench(*args: str) -> tuple[int, str]:
    from halluscope.cli.main import app

    result = CliRunner().invoke(app, ["bench-citations", *args])
    return result.exit_code, result.output


def test_select_items_limits_and_samples_with_a_seed() -> None:
    items = [{"id": str(n)} for n in range(10)]
    assert select_items(items, limit=3) == items[:3]
    sampled = select_items(items, sample=4, seed=1)
    assert len(sampled) == 4 and sampled == select_items(items, sample=4, seed=1)
    assert [int(i["id"]) for i in sampled] == sorted(int(i["id"]) for i in sampled)  # set order kept
    assert sampled != select_items(items, sample=4, seed=2)
    assert select_items(items, sample=4, limit=2, seed=1) == sampled[:2]


def test_the_bench_with_the_verdict_first_scorer_reports_every_figure(
    tmp_path: Path, judge: tuple[Oracle, list[Any]]
) -> None:
    oracle, configs = judge
    config = CitationSetConfig(seed=3, items=5, p_swap=0.5, p_irrelevant=0.2, p_drop=0.1)
    items = build_citation_set(ARTICLES, config)
    save_citation_set(tmp_path / "set.jsonl", items, config)
    results = tmp_path / "results.jsonl"
    args = ["--set", str(tmp_path / "set.jsonl"), "--results", str(results), "--stream", "--token-interval", "0"]
    code, out = bench(*args, "--limit", "3")
    assert code == 0, out
    summary = json.loads(out)
    assert configs[0].cache is False  # timings of real calls: the response cache is off unless --cache
    assert summary["scorer"] == "verdict-first" and summary["model"] == "fake"
    assert summary["answers"] == 3 and summary["items_in_set"] == 5 and summary["errors"] == 0
    assert summary["wrong_citations"] > 0 and summary["wrong_citation_f1"] == 1.0  # the judge is exact here
    assert summary["wrong_citation_precision"] == summary["wrong_citation_recall"] == 1.0
    assert summary["named_chunk_right"] == 1.0
    assert summary["citation_recall_estimated"] == summary["citation_recall_gold"]
    assert summary["unsupported_removed"] == 1.0 and summary["supported_wrongly_removed"] == 0.0
    assert summary["unscored_sentences"] == 0
    # calls: every question the check asks is one call of the scorer, and the stream asks them again
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert lines[0]["run"] == {
        "scorer": "verdict_first",
        "model": "fake",
        "threshold": 0.5,
        "stream": True,
        "token_interval": 0.0,
    }
    rows = lines[1:]
    assert [r["calls"] for r in rows] == [r["questions"] for r in rows]
    assert [r["stream_calls"] for r in rows] == [r["calls"] for r in rows]
    assert sum(r["calls"] + r["stream_calls"] for r in rows) == len(oracle.asked)
    assert summary["calls_per_answer"] == sum(r["calls"] for r in rows) / 3
    for key in ("seconds_per_answer", "release_latency_s_mean", "release_latency_s_max", "sentence_check_s_mean"):
        assert summary[key] is not None and summary[key] >= 0, key
    assert 0.0 <= summary["released_within_check_plus_10pct"] <= 1.0
    assert all(len(r["release_latency_s"]) == len(r["sentences"]) == len(r["sentence_check_s"]) for r in rows)

    # resumed: the two answers left are checked, the three done are not asked again
    asked = len(oracle.asked)
    code, out = bench(*args)
    assert code == 0 and json.loads(out)["answers"] == 5
    assert len(results.read_text().splitlines()) == 1 + 5
    again = len(oracle.asked) - asked
    assert again == sum(r["calls"] + r["stream_calls"] for r in map(json.loads, results.read_text().splitlines()[4:]))

    # another run (another threshold) is refused, not mixed in
    code, out = bench(*args, "--threshold", "0.7")
    assert code == 2 and "holds a different run" in out and "threshold" in out


def test_the_cache_is_used_when_asked_and_a_sample_is_drawn(tmp_path: Path, judge: tuple[Oracle, list[Any]]) -> None:
    _, configs = judge
    config = CitationSetConfig(seed=3, items=5, p_swap=0.5)
    items = build_citation_set(ARTICLES, config)
    save_citation_set(tmp_path / "set.jsonl", items, config)
    code, out = bench(
        "--set", str(tmp_path / "set.jsonl"), "--results", str(tmp_path / "r.jsonl"), "--sample", "2", "--cache",
    )  # fmt: skip
    assert code == 0, out
    assert configs[0].cache is True
    ids = [json.loads(line)["id"] for line in (tmp_path / "r.jsonl").read_text().splitlines()[1:]]
    assert ids == [i["id"] for i in select_items(items, sample=2, seed=13)]
    assert "release_latency_s" not in json.loads((tmp_path / "r.jsonl").read_text().splitlines()[1])


def test_release_within_goal_compares_each_sentence_with_its_own_check() -> None:
    gold = {"text": "x", "supported_by": 0, "cited": [0], "kind": "correct"}
    items = [{"id": "a", "sentences": [gold], "chunks": ["x"], "answer": "x [1]"}]
    checked = {"kind": "correct", "gold_chunk": 0, "status": "supported", "named": None, "removed": False}
    row = {
        "id": "a",
        "sentences": [checked],
        "recall": None,
        "precision": None,
        "seconds": 1.0,
        "calls": 2,
        "release_latency_s": [1.0, 1.2],
        "sentence_check_s": [1.0, 1.0],
        "release_wait_s": [0.9, 1.05],
    }
    summary = summarize([row], items)
    assert summary["released_within_check_plus_10pct"] == 0.5
    assert summary["released_within_check_plus_10pct_after_complete"] == 1.0
    assert summary["sentence_check_s_mean"] == 1.0
