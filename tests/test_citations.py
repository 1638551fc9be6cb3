"""Citation markers and the citation check: offline, with a scripted verdict-first judge (tests/citation_oracle.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import halluscope
from halluscope.llm.client import LLM
from halluscope.llm.fake import FakeModel
from halluscope.text.citations import CitationStyleError, detect_style, parse_citations, render_marker
from tests.citation_oracle import CHUNKS, Oracle

# --- markers --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, style, cited",
    [
        ("It opened in 1889 [1]. It is 330 metres tall [2][3].", "brackets", [(0,), (1, 2)]),
        ("It opened in 1889 [1, 2]. It is 330 metres tall [1-3].", "brackets", [(0, 1), (0, 1, 2)]),
        ("It opened in 1889.[^1] It is 330 metres tall [^2].\n\n[^1]: a\n[^2]: b", "footnote", [(0,), (1,)]),
        ("It opened in 1889 (Source 2). It is 330 metres tall (sources 1, 3).", "source", [(1,), (0, 2)]),
    ],
)
def test_each_marker_style_is_read(answer: str, style: str, cited: list[tuple[int, ...]]) -> None:
    parsed = parse_citations(answer)
    assert parsed.style == style
    assert [s.cited for s in parsed.sentences] == cited
    assert [s.claim for s in parsed.sentences] == ["It opened in 1889.", "It is 330 metres tall."]


def test_a_marker_after_the_full_stop_belongs_to_the_sentence_before() -> None:
    parsed = parse_citations("It opened in 1889. [1] It is 330 metres tall. [2][3]")
    assert [(s.text, s.cited) for s in parsed.sentences] == [
        ("It opened in 1889. [1]", (0,)),
        ("It is 330 metres tall. [2][3]", (1, 2)),
    ]
    assert [s.span.of(parsed.text) for s in parsed.sentences] == [s.text for s in parsed.sentences]


def test_mixed_styles_are_refused_with_the_way_out() -> None:
    with pytest.raises(CitationStyleError) as refused:
        parse_citations("It opened in 1889 [1]. It is 330 metres tall [^2].")
    message = str(refused.value)
    assert "mixes citation styles" in message and "[1]" in message and "[^2]" in message
    assert "--citations" in message


def test_a_named_style_reads_only_its_markers() -> None:
    parsed = parse_citations("It opened in 1889 [1]. It is 330 metres tall [^2].", style="footnote")
    assert [s.cited for s in parsed.sentences] == [(), (1,)]
    assert parsed.sentences[0].claim == "It opened in 1889 [1]."


def test_chunk_zero_and_unknown_styles_are_refused() -> None:
    with pytest.raises(CitationStyleError, match="from 1"):
        parse_citations("It opened in 1889 [0].")
    with pytest.raises(CitationStyleError, match="unknown citation style"):
        parse_citations("x", style="harvard")


def test_no_marker_means_no_style() -> None:
    assert detect_style("It opened in 1889.") is None
    assert parse_citations("It opened in 1889. It is tall.").style is None


def test_markers_render_back_in_their_style() -> None:
    assert render_marker("brackets", (0, 2)) == "[1][3]"
    assert render_marker("footnote", (1,)) == "[^2]"
    assert render_marker("source", (0, 1)) == "(Sources 1, 2)"


# --- the check ------------------------------------------------------------------------------------------------


def sentences(report: halluscope.Report) -> list[dict]:
    return report.details["citations"]["sentences"]


def test_a_wrong_citation_names_the_chunk_that_supports_the_sentence() -> None:
    oracle = Oracle()
    answer = "The tower was completed in 1889 [2]. It is 330 metres tall [2]."
    report = halluscope.check_citations(CHUNKS, answer, llm=oracle.llm())
    [finding] = report.findings
    assert finding.description.startswith("wrong citation: sentence 1 cites [2]")
    assert "chunk [1] does" in finding.description
    assert [(e.chunk, e.relation, e.text) for e in finding.evidence] == [(0, "supports", CHUNKS[0])]
    assert finding.target_spans[0].of(answer) == "The tower was completed in 1889 [2]."
    assert finding.fix == "The tower was completed in 1889 [1]."
    assert finding.confidence == pytest.approx(0.8)
    assert [s["status"] for s in sentences(report)] == ["wrong_citation", "supported"]
    assert report.subscores == {"citation_recall": 0.5, "citation_precision": 0.5}
    assert report.score == 0.5 and report.label == "inconsistent"
    # the cited chunk, then every other chunk on its own; the supported sentence once
    assert sorted(src for claim, src in oracle.asked if "1889" in claim) == sorted(CHUNKS)
    assert [src for claim, src in oracle.asked if "330" in claim] == [CHUNKS[1]]


def test_citation_precision_is_alces_a_citation_not_needed() -> None:
    oracle = Oracle()
    report = halluscope.check_citations(CHUNKS, "It is 330 metres tall [1][2].", llm=oracle.llm())
    row = sentences(report)[0]
    assert row["status"] == "supported" and row["needed"] == {"1": False, "2": True}
    assert report.subscores == {"citation_recall": 1.0, "citation_precision": 0.5}
    [finding] = report.findings
    assert finding.description.startswith("citation not needed: sentence 1 cites chunk [1]")
    assert [e.chunk for e in finding.evidence] == [0]


def test_citations_needed_together_are_both_needed() -> None:
    answer = "It was completed in 1889 and is 330 metres tall [1][2]."
    report = halluscope.check_citations(CHUNKS, answer, llm=Oracle().llm())
    assert sentences(report)[0]["needed"] == {"1": True, "2": True}
    assert report.subscores == {"citation_recall": 1.0, "citation_precision": 1.0}
    assert report.findings == [] and report.label == "consistent"


def test_a_sentence_no_chunk_supports_is_an_unsupported_claim() -> None:
    report = halluscope.check_citations(CHUNKS, "It was painted gold in 1950 [1].", llm=Oracle().llm())
    [finding] = report.findings
    assert finding.kind == "unsupported"
    assert finding.description == "unsupported claim: no chunk supports sentence 1 (it cites [1])"
    assert report.subscores == {"citation_recall": 0.0, "citation_precision": 0.0}


@pytest.mark.parametrize(
    "uncited, statuses, recall, calls",
    [
        ("flag", ["supported", "uncited"], 0.5, 1),
        ("check", ["supported", "supported"], 0.5, 4),
        ("ignore", ["supported", "ignored"], 1.0, 1),
    ],
)
def test_the_uncited_policy(uncited: str, statuses: list[str], recall: float, calls: int) -> None:
    oracle = Oracle()
    answer = "It is 330 metres tall [2]. Eiffel's company finished a viaduct in 1884."
    report = halluscope.check_citations(CHUNKS, answer, uncited=uncited, llm=oracle.llm())
    assert [s["status"] for s in sentences(report)] == statuses
    assert report.subscores["citation_recall"] == recall
    assert len(oracle.asked) == calls
    descriptions = [f.description for f in report.findings]
    if uncited == "flag":
        assert descriptions == ["uncited sentence: sentence 2 cites no chunk"]
    elif uncited == "check":
        assert descriptions == ["missing citation: sentence 2 cites no chunk; chunk [3] supports it"]
        assert report.findings[0].evidence[0].chunk == 2
    else:
        assert descriptions == []


def test_a_marker_past_the_last_chunk_is_a_finding() -> None:
    report = halluscope.check_citations(CHUNKS, "It is 330 metres tall [2][7].", llm=Oracle().llm())
    assert [f.description for f in report.findings] == [
        "unknown chunk cited: sentence 1 cites [7], but there are only 3 chunks"
    ]
    assert report.subscores["citation_precision"] == 0.5  # the unknown citation is one citation, not correct


def test_the_threshold_applies_to_the_probability() -> None:
    report = halluscope.check_citations(CHUNKS, "It is 330 metres tall [2].", threshold=0.95, llm=Oracle().llm())
    assert sentences(report)[0]["status"] == "unsupported"  # answered yes at P = 0.9 < 0.95


def test_an_unreadable_reply_is_unscored_never_supported() -> None:
    llm = LLM(FakeModel(default="perhaps"), cache=None)
    report = halluscope.check_citations(CHUNKS, "It is 330 metres tall [2].", llm=llm)
    assert sentences(report)[0]["status"] == "unscored"
    assert report.score is None and "could be scored" in (report.unscored_reason or "")
    assert report.subscores == {"citation_recall": None, "citation_precision": None}


def test_the_report_round_trips_as_json() -> None:
    report = halluscope.check_citations(CHUNKS, "It was built in 1889 [2].", llm=Oracle().llm())
    again = halluscope.Report.model_validate_json(report.model_dump_json())
    assert again == report
    assert json.loads(report.model_dump_json())["details"]["citations"]["style"] == "brackets"


# --- halluscope check --context ... -------------------------------------------------------------------------


@pytest.fixture
def oracle_model(monkeypatch: pytest.MonkeyPatch) -> Oracle:
    """Every model the CLI builds is the scripted judge."""
    import halluscope.llm
    import halluscope.methods.base

    oracle = Oracle()
    monkeypatch.setattr(halluscope.methods.base, "get_llm", lambda config=None, api=None: oracle.llm())
    monkeypatch.setattr(halluscope.llm, "get_llm", lambda config=None, api=None: oracle.llm())
    return oracle


def cli(*args: str) -> tuple[int, str]:
    from halluscope.cli.main import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_check_names_the_wrong_citation_and_the_chunk_file(tmp_path: Path, oracle_model: Oracle) -> None:
    (tmp_path / "a.txt").write_text(CHUNKS[0])
    (tmp_path / "b.txt").write_text(CHUNKS[1])
    (tmp_path / "answer.txt").write_text("The tower was completed in 1889 [2]. It is 330 metres tall [2].")
    code, out = cli(
        "check", "--context", str(tmp_path / "a.txt"), "--context", str(tmp_path / "b.txt"),
        "--target", str(tmp_path / "answer.txt"),
    )  # fmt: skip
    assert code == 1, out
    assert "wrong citation: sentence 1 cites [2], which does not support it; chunk [1] does" in out
    assert f"evidence (supports) at {tmp_path / 'a.txt'}:1:1 (chunk 0)" in out
    assert "fix: The tower was completed in 1889 [1]." in out
    assert "citations: 0.500 of the cited sentences are supported by what they cite (recall)" in out


def test_check_refuses_mixed_styles_and_honours_citations(tmp_path: Path, oracle_model: Oracle) -> None:
    (tmp_path / "a.txt").write_text(CHUNKS[0])
    (tmp_path / "answer.txt").write_text("It was completed in 1889 [1]. It is 330 metres tall [^1].")
    args = ["check", "--context", str(tmp_path / "a.txt"), "--target", str(tmp_path / "answer.txt")]
    code, out = cli(*args)
    assert code == 2 and "mixes citation styles" in out
    code, out = cli(*args, "--citations", "brackets", "--format", "json")
    assert code == 1, out
    report = json.loads(out)
    assert [s["cited"] for s in report["details"]["citations"]["sentences"]] == [[1], []]


def test_the_readme_example_names_the_wrong_citation(tmp_path: Path, oracle_model: Oracle) -> None:
    examples = Path(__file__).resolve().parents[1] / "examples"
    code, out = cli(
        "check", "--context", str(examples / "chunk1.txt"), "--context", str(examples / "chunk2.txt"),
        "--target", str(examples / "cited_answer.txt"),
    )  # fmt: skip
    assert code == 1, out
    assert "wrong citation: sentence 1 cites [2], which does not support it; chunk [1] does" in out
    assert f"evidence (supports) at {examples / 'chunk1.txt'}:1:1 (chunk 0)" in out
    assert "fix: The council approved a new ferry line to Gull Island by 7 votes to 2 [1]." in out
    assert out.count("wrong citation") == 1
    assert "citations: 0.667 of the cited sentences are supported by what they cite (recall), 0.667" in out
    # the command run here is the one the README and docs/citations.md show
    command = (
        "halluscope check --context examples/chunk1.txt --context examples/chunk2.txt "
        "--target examples/cited_answer.txt"
    )
    repo = examples.parent
    assert command in " ".join((repo / "README.md").read_text(encoding="utf-8").split())
    assert command in (repo / "docs" / "citations.md").read_text(encoding="utf-8")


# --- the citation benchmark -----------------------------------------------------------------------------------

ARTICLES = [
    " ".join(
        f"Article {a} reports that event number {a * 100 + i} happened in the town of Place{a}x{i}." for i in range(12)
    )
    for a in range(6)
]


def test_the_citation_set_is_seeded_and_keeps_its_gold() -> None:
    from halluscope.bench.citation_set import CitationSetConfig, build_citation_set, gold_recall_precision

    config = CitationSetConfig(seed=3, items=4, p_swap=0.5, p_irrelevant=0.2, p_drop=0.1)
    items = build_citation_set(ARTICLES, config)
    assert items == build_citation_set(ARTICLES, config) and len(items) == 4
    assert items != build_citation_set(ARTICLES, CitationSetConfig(seed=4, items=4, p_swap=0.5))
    for item in items:
        assert len(item["chunks"]) == config.chunks_per_item + 1
        parsed = parse_citations(item["answer"])
        assert [s.cited for s in parsed.sentences] == [tuple(s["cited"]) for s in item["sentences"]]
        for s in item["sentences"]:
            if s["supported_by"] is not None:
                assert s["text"] in item["chunks"][s["supported_by"]]
            else:
                assert all(s["text"] not in chunk for chunk in item["chunks"])
        recall, _ = gold_recall_precision(item)
        assert recall == sum(s["kind"] == "correct" for s in item["sentences"]) / len(item["sentences"])


def test_the_citation_bench_runs_with_the_gate_and_resumes(tmp_path: Path) -> None:
    import asyncio

    from halluscope.bench.citation_set import (
        CitationSetConfig,
        GateScorer,
        build_citation_set,
        run_citation_bench,
    )

    items = build_citation_set(ARTICLES, CitationSetConfig(seed=3, items=3, p_swap=0.6))
    results = tmp_path / "results.jsonl"
    summary = asyncio.run(run_citation_bench(items, GateScorer(), results, stream=True, token_interval=0))
    assert summary["answers"] == 3 and summary["errors"] == 0
    assert summary["wrong_citations"] > 0 and summary["wrong_citation_f1"] == 1.0
    assert summary["unsupported_removed"] == 1.0 and summary["supported_wrongly_removed"] == 0.0
    assert summary["citation_recall_estimated"] == summary["citation_recall_gold"]
    assert summary["release_latency_s_mean"] is not None
    lines = results.read_text().splitlines()
    again = asyncio.run(run_citation_bench(items, GateScorer(), results, stream=True, token_interval=0))
    assert results.read_text().splitlines() == lines  # nothing checked twice
    assert again["wrong_citation_f1"] == summary["wrong_citation_f1"]


def test_a_no_model_method_leaves_citations_unchecked_unless_asked(tmp_path: Path, oracle_model: Oracle) -> None:
    (tmp_path / "a.txt").write_text(CHUNKS[0])
    (tmp_path / "b.txt").write_text(CHUNKS[1])
    (tmp_path / "answer.txt").write_text("The tower was completed in 1889 [2]. It is 330 metres tall [2].")
    args = ["check", "--context", str(tmp_path / "a.txt"), "--context", str(tmp_path / "b.txt")]
    args += ["--target", str(tmp_path / "answer.txt"), "--method", "gate", "--format", "json"]
    code, out = cli(*args)
    assert "uses no model" in json.loads(out)["details"]["citations"]["not_checked"]
    assert oracle_model.asked == []
    code, out = cli(*args, "--citations", "brackets")
    assert code == 1
    report = json.loads(out)
    assert [s["status"] for s in report["details"]["citations"]["sentences"]] == ["wrong_citation", "supported"]


def test_an_empty_answer_is_unscored_with_the_reason() -> None:
    report = halluscope.check_citations(CHUNKS, "", llm=Oracle().llm())
    assert report.score is None and report.unscored_reason is not None and "no sentence" in report.unscored_reason


def test_the_html_report_carries_the_citation_findings(tmp_path: Path, oracle_model: Oracle) -> None:
    (tmp_path / "a.txt").write_text(CHUNKS[0])
    (tmp_path / "b.txt").write_text(CHUNKS[1])
    (tmp_path / "answer.txt").write_text("The tower was completed in 1889 [2]. It is 330 metres tall [2].")
    html = tmp_path / "report.html"
    code, _ = cli(
        "check", "--context", str(tmp_path / "a.txt"), "--context", str(tmp_path / "b.txt"),
        "--target", str(tmp_path / "answer.txt"), "--html", str(html),
    )  # fmt: skip
    assert code == 1
    assert "wrong citation: sentence 1 cites [2]" in html.read_text()
