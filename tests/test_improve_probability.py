"""`improve` with probability scores: a rewrite whose every sentence reaches the threshold is fixed (a probability
score stays below 1, so the paper's score == 1 would never count it); ``score=label`` keeps the paper's rule;
``improve --context`` reads chunks as ``check`` does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluscope.llm import LLM, FakeModel
from halluscope.llm.fake import label_logprobs
from halluscope.methods import get_method

SOURCE = (
    "The city will build a ferry. Two thirds of the money comes from a regional transport grant. "
    "The ferry starts in May."
)
TARGET = "The city will build a ferry. The city pays for the whole project from its own budget."
FIXED = "The city will build a ferry. A regional transport grant pays two thirds of the money."
EXPLANATION = {
    "reason": "The source says two thirds come from a regional grant.",
    "evidence": "Two thirds of the money comes from a regional transport grant.",
    "contradicted": True,
    "fix": "A regional transport grant pays two thirds of the money.",
}
P_YES = {"build a ferry": 0.9, "own budget": 0.1, "regional transport grant pays": 0.8}


def fake() -> FakeModel:
    """Verdict first: each yes/no answer carries the scripted P(yes) of the claim it ends with; one rewrite."""
    asked: list[float] = []

    def answer(messages) -> str:
        claim = messages[-1]["content"].split("CLAIM:")[-1]
        asked.append(P_YES[next(k for k in P_YES if k in claim)])
        return "Yes" if asked[-1] >= 0.5 else "No"

    def logprobs(reply: str):
        return label_logprobs({"Yes": asked[-1], "No": 1 - asked[-1]})(reply) if reply in ("Yes", "No") else None

    rewrite = json.dumps({"rewrites": [{"id": 2, "improved_sentence": EXPLANATION["fix"]}]})
    return FakeModel(
        by_reply={"text": answer, "ExplainReply": json.dumps(EXPLANATION), "RewritesReply": rewrite},
        logprobs=logprobs,
    )


def test_a_fully_supported_rewrite_is_fixed_with_probability_scores() -> None:
    report = get_method("improve", llm=LLM(fake()), order="verdict_first", rounds=2).check(SOURCE, TARGET)
    original, rewrite = report.details["rounds"]
    assert report.details["score"]["kind"] == "probability"
    assert (original["consistent"], original["inconsistent_sentences"]) == (False, [2])
    assert rewrite["score"] == pytest.approx((0.9 + 0.8) / 2) and rewrite["score"] < 1.0
    assert rewrite["consistent"] is True  # every sentence at or above the threshold 0.5
    assert report.details["stop_reason"] == "consistent" and report.subscores["rounds_run"] == 1.0
    assert report.details["improved"] and report.details["improved_target"] == FIXED


def test_a_sentence_under_the_threshold_keeps_the_rewrite_unfixed() -> None:
    report = get_method("improve", llm=LLM(fake()), order="verdict_first", rounds=1, threshold=0.85).check(
        SOURCE, TARGET
    )
    rewrite = report.details["rounds"][1]
    assert rewrite["consistent"] is False  # 0.8 < 0.85
    assert report.details["stop_reason"] == "reached the maximum of 1 round(s)"


def test_label_scores_keep_the_papers_score_of_one() -> None:
    report = get_method("improve", llm=LLM(fake()), order="verdict_first", rounds=1, score="label").check(
        SOURCE, TARGET
    )
    rewrite = report.details["rounds"][1]
    assert report.details["score"]["kind"] == "label"
    assert (rewrite["score"], rewrite["consistent"]) == (1.0, True)


def test_reproduce_runs_improve_with_the_papers_label_score() -> None:
    from halluscope.bench.reproduce.running import PAPER_ORDER
    from halluscope.methods.improve import ImproveOptions

    assert PAPER_ORDER["score"] == "label" and "score" in ImproveOptions.model_fields


def test_cli_improve_reads_context_chunks(tmp_path: Path, monkeypatch) -> None:
    import halluscope.methods as methods
    from halluscope.cli.main import app

    real = methods.get_method
    llm = LLM(fake())
    monkeypatch.setattr(
        methods, "get_method", lambda name, **kw: real(name, **{**kw, "llm": llm, "order": "verdict_first"})
    )
    chunks = tmp_path / "chunks.json"
    chunks.write_text(json.dumps(SOURCE.split(". ", 1)))
    (tmp_path / "t.txt").write_text(TARGET)
    out = tmp_path / "fixed.txt"
    result = CliRunner().invoke(
        app, ["improve", "-c", str(chunks), "-t", str(tmp_path / "t.txt"), "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "verified improvement" in result.output and out.read_text() == FIXED
    both = CliRunner().invoke(app, ["improve", "-c", str(chunks), "-s", str(chunks), "-t", str(tmp_path / "t.txt")])
    assert both.exit_code == 2 and "not both" in both.output
    neither = CliRunner().invoke(app, ["improve", "-t", str(tmp_path / "t.txt")])
    assert neither.exit_code == 2 and "--context" in neither.output
