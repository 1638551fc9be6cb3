"""`bench`: a method with no model never loads a judge model unasked (it says which judge it would need);
`--judge-model none` skips FINAL's matching judge; judging shows a progress bar and its own time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluscope.cli.main import app
from halluscope.records import Example

SOURCE = "The ferry runs every 30 minutes. Tickets cost 3 pounds."


def _dataset(tmp_path: Path) -> Path:
    items = [
        Example(id="a", source=SOURCE, target="The ferry runs every 20 minutes.", label=0, descriptions=["20, not 30"]),
        Example(id="b", source=SOURCE, target="Tickets cost 3 pounds.", label=1, descriptions=[]),
    ]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(e.model_dump_json() + "\n" for e in items))
    return path


def _no_model_may_be_built(monkeypatch: pytest.MonkeyPatch) -> None:
    import halluscope.llm

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was built")

    monkeypatch.setattr(halluscope.llm, "get_llm", refuse)


def _bench(tmp_path: Path, *extra: str) -> tuple[int, str, str, dict]:
    out = tmp_path / "run"
    args = ["bench", "-d", str(_dataset(tmp_path)), "--bootstrap", "0", "--no-progress", "--output", str(out)]
    result = CliRunner().invoke(app, [*args, *extra])
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").is_file() else {}
    return result.exit_code, result.stdout, result.stderr, results


def test_a_method_with_no_model_loads_no_judge_and_says_which_it_would_need(tmp_path, monkeypatch) -> None:
    _no_model_may_be_built(monkeypatch)
    code, stdout, stderr, results = _bench(tmp_path, "--method", "gate")
    assert code == 0, stdout + stderr
    assert "use no model" in stderr and "--judge-model" in stderr
    assert results["judge_model"] is None and not results["metrics"].get("final_matching")
    assert "Not computed" in stdout


def test_judge_model_none_skips_the_matching_judge(tmp_path, monkeypatch) -> None:
    _no_model_may_be_built(monkeypatch)
    code, stdout, stderr, results = _bench(tmp_path, "--method", "gate", "--judge-model", "none")
    assert code == 0, stdout + stderr
    assert "--judge-model none" in stderr and results["judge_model"] is None


def test_judging_shows_a_progress_bar_and_its_own_time(tmp_path, monkeypatch) -> None:
    import halluscope.bench.progress as progress

    shown: list[tuple[str, object]] = []

    class Bar:
        def __init__(self, enabled: bool) -> None:
            shown.append(("enabled", enabled))

        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            shown.append(("closed", None))

        def add_task(self, description: str, total: int) -> int:
            shown.append((description, total))
            return 0

        def advance(self, task: int) -> None:
            shown.append(("advance", task))

    monkeypatch.setattr(progress, "progress_bar", Bar)
    script = tmp_path / "judge.json"
    script.write_text(json.dumps({"MatchReply": {"reasoning": "same number", "matches": {"P1": "G1"}}}))
    code, stdout, stderr, results = _bench(tmp_path, "--method", "gate", "--judge-model", f"fake:{script}")
    assert code == 0, stdout + stderr
    judged = [entry for entry in shown if entry[0].startswith("FINAL matching judge")]
    assert len(judged) == 1 and judged[0][1] == 2  # both items matched: one needs the judge, one has nothing to match
    assert ("advance", 0) in shown and shown[-1] == ("closed", None)
    matching = results["metrics"]["final_matching"]
    assert matching["judge_time_s"] >= 0 and matching["judge_items_this_run"] == 2
    assert "FINAL matching judge (" in stdout and "2 items matched now, 1 LLM calls" in stdout
