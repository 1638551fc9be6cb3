"""``benchmarks/cost.py`` resumes a stopped run: rows already measured are kept, only the missing (system,
item) rows reach the endpoint, and a resume under other settings is refused. Against a stub endpoint on
loopback (geval only, no peers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_cache_backends import StubEndpoint

REPO = Path(__file__).resolve().parents[1]


def write_items(path: Path, n: int) -> Path:
    """Generic-format items graded like QAGS: the stub rates odd claims 5 and even ones 2, the human score is
    1 for odd and 0 for even, so the Spearman correlation is exactly 1."""
    path.write_text("".join(json.dumps({"id": f"q{i}", "source": f"Source {i}: the cat sat on the mat.",
                                        "target": f"Claim number {i}.", "human_score": i % 2}) + "\n"
                            for i in range(n)))
    return path


def cost(stub: StubEndpoint, data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "benchmarks" / "cost.py"), "--dataset", str(data), "--out", str(out),
           "--base-url", stub.base_url, "--model", "stub", "--methods", "geval", "--no-peers", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_cost_resumes_without_measuring_a_row_twice(tmp_path):
    data = write_items(tmp_path / "items.jsonl", 3)
    out = tmp_path / "cost"
    with StubEndpoint() as stub:
        first = cost(stub, data, out, "--limit", "2")
        assert first.returncode == 0, first.stderr
        assert len(stub.arrived) == 2
        assert [json.loads(line)["item"] for line in (out / "rows.jsonl").read_text().splitlines()] == ["q0", "q1"]

        more = cost(stub, data, out, "--limit", "3")
        assert more.returncode == 0, more.stderr
        assert len(stub.arrived) == 3 and "resuming: 2 rows" in more.stderr
        result = json.loads((out / "cost.json").read_text())
        assert result["meta"]["items_run"] == 3
        assert result["summary"][0]["system"] == "geval" and result["summary"][0]["calls_per_item"] == 1.0
        assert result["summary"][0]["tokens_per_item"] == 15.0  # the stub's usage: 10 + 5 per call
        accuracy = result["summary"][0]["accuracy"]
        assert accuracy["scored"] == 3 and accuracy["spearman"]["value"] == 1.0 and accuracy["spearman"]["n"] == 3
        rows_now = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
        assert [r["gold_human_score"] for r in rows_now] == [0.0, 1.0, 0.0]
        assert "Spearman 1.000" in (out / "cost.md").read_text()

        again = cost(stub, data, out, "--limit", "3")
        assert again.returncode == 0 and len(stub.arrived) == 3
        assert json.loads((out / "cost.json").read_text())["summary"] == result["summary"]

        # a kill mid-write leaves a cut-off last line: that row alone is measured again
        rows = out / "rows.jsonl"
        lines = rows.read_text().splitlines()
        rows.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
        cut = cost(stub, data, out, "--limit", "3")
        assert cut.returncode == 0 and len(stub.arrived) == 4
        assert len(rows.read_text().splitlines()) == 3

        other = cost(stub, data, out, "--limit", "3", "--max-tokens", "64")
        assert other.returncode != 0 and "other settings" in other.stderr and len(stub.arrived) == 4

        fresh = cost(stub, data, out, "--limit", "3", "--max-tokens", "64", "--fresh")
        assert fresh.returncode == 0 and len(stub.arrived) == 7
        assert json.loads((out / "run.json").read_text())["max_tokens"] == 64


def test_cost_records_labels_and_gives_auc_per_domain_and_a_larger_limit_keeps_the_rows(tmp_path):
    data = tmp_path / "labelled.jsonl"
    data.write_text("".join(json.dumps({"id": f"{d}{i}", "source": "The cat sat on the mat.",
                                        "target": f"Claim number {i}.", "label": i % 2, "meta": {"domain": d}}) + "\n"
                            for d in ("news", "chat") for i in range(4)))
    out = tmp_path / "cost"
    with StubEndpoint() as stub:
        first = cost(stub, data, out, "--limit", "2")
        assert first.returncode == 0, first.stderr
        measured = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
        assert len(measured) == 4 and sorted({r["domain"] for r in measured}) == ["chat", "news"]
        assert all(r["gold_label"] == int(r["item"][-1]) % 2 for r in measured)

        more = cost(stub, data, out, "--limit", "4")
        assert more.returncode == 0, more.stderr
        assert len(stub.arrived) == 8  # the 4 rows already measured were kept, 4 new ones measured
        accuracy = json.loads((out / "cost.json").read_text())["summary"][0]["accuracy"]
        assert accuracy["auc"]["value"] == 1.0 and accuracy["auc"]["n"] == 8  # the stub rates odd claims higher
        assert set(accuracy["auc_per_domain"]) == {"chat", "news"}
        assert all(ci["value"] == 1.0 and ci["n"] == 4 for ci in accuracy["auc_per_domain"].values())


def _cost_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cost_bench", REPO / "benchmarks" / "cost.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("cost_bench", module)  # dataclasses look their module up there
    spec.loader.exec_module(sys.modules["cost_bench"])
    return sys.modules["cost_bench"]


def test_final_rows_are_matched_by_the_named_judge_and_summarized():
    from halluscope.llm import LLM, FakeModel
    from halluscope.records import Example

    cost_mod = _cost_module()
    judge = LLM(FakeModel(['{"reasoning": "P1 is G1", "matches": {"P1": "G1", "P2": null}}', "no idea", "still no"],
                          name="judge-x"), cache=None)
    flagged = Example(id="final-1", source="s", target="The cat sat.", label=0, descriptions=["wrong cat", "wrong mat"])
    match = cost_mod.judge_row(judge, flagged, ["the cat is wrong", "made up"])
    assert match == {"judge": "judge-x", "n_gold": 2, "n_pred": 2, "matched_gold": 1, "unscored_reason": None}
    unusable = cost_mod.judge_row(judge, flagged, ["something"])  # two unusable replies: unscored, not "no match"
    assert unusable["matched_gold"] is None and "unusable" in unusable["unscored_reason"]

    rows = [cost_mod.Row(system="localize", item="final-1", scored=True, score=0.0, gold_label=0, match=match),
            cost_mod.Row(system="localize", item="final-2", scored=True, score=1.0, gold_label=1,
                         match={"judge": "judge-x", "n_gold": 0, "n_pred": 0, "matched_gold": 0}),
            cost_mod.Row(system="localize", item="final-3", scored=True, score=0.0, gold_label=0, match=unusable),
            # an unscored row states no verdict: even a match recorded on it (older rows) is not counted
            cost_mod.Row(system="localize", item="final-4", scored=False, gold_label=0,
                         match={"judge": "judge-x", "n_gold": 3, "n_pred": 0, "matched_gold": 0})]
    accuracy = cost_mod.accuracy(rows)
    assert accuracy["items"] == 4 and accuracy["scored"] == 3 and accuracy["auc"]["value"] == 1.0
    final = accuracy["final_match"]
    assert final["judge"] == "judge-x" and final["unmatched_items"] == 1
    assert (final["precision"], final["recall"]) == (0.5, 0.5) and final["f1"]["n"] == 2
    table = cost_mod.markdown(cost_mod.summarize(rows, ["localize"]),
                              {"items_run": 4, "endpoint": "stub", "max_tokens": 8, "dataset": "final:dev"})
    assert "FINAL matching F1 0.500" in table and "judge judge-x" in table


def test_memo_answers_an_identical_request_once_and_still_counts_it(tmp_path):
    """``--memo``: a second system that sends byte-identical temperature-0 requests (here ``geval`` run twice,
    as two labels of the same method would be) gets the endpoint's earlier answer, counted as its call; the
    rows say how many were replayed, and ``--report-only`` rebuilds the table without reaching the endpoint."""
    data = write_items(tmp_path / "items.jsonl", 2)
    out = tmp_path / "cost"
    with StubEndpoint() as stub:
        first = cost(stub, data, out, "--limit", "2", "--memo")
        assert first.returncode == 0, first.stderr
        assert len(stub.arrived) == 2
        memo_lines = (out / "memo.jsonl").read_text().splitlines()
        assert len(memo_lines) == 2
        # the same rows measured again under another folder name would reach the endpoint; with the memo kept
        # in --out, re-measuring a discarded row is answered from it
        rows = out / "rows.jsonl"
        rows.write_text(rows.read_text().splitlines()[0] + "\n")
        again = cost(stub, data, out, "--limit", "2", "--memo")
        assert again.returncode == 0, again.stderr
        assert len(stub.arrived) == 2  # nothing new reached the endpoint
        remeasured = json.loads(rows.read_text().splitlines()[-1])
        assert remeasured["item"] == "q1" and remeasured["calls"] == 1
        assert remeasured["notes"]["memo_replayed_calls"] == 1
        assert remeasured["prompt_tokens"] == 10 and remeasured["completion_tokens"] == 5

        report = cost(stub, data, out, "--limit", "2", "--memo", "--report-only")
        assert report.returncode == 0, report.stderr
        assert len(stub.arrived) == 2
        summary = json.loads((out / "cost.json").read_text())["summary"]
        assert summary[0]["system"] == "geval" and summary[0]["memo_replayed_calls"] == 1
        assert "geval 1 of 2" in (out / "cost.md").read_text()


def test_the_plan_puts_the_baselines_and_each_cascade_beside_its_method():
    """The no-LLM baselines and a ``gate=lexical`` row per claim method are measured with the others."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import cost as cost_module
    finally:
        sys.path.pop(0)
    labels = [label for label, _, _ in cost_module.method_plan(4)]
    assert {"rouge", "gate", "factscore gate=lexical", "dcr gate=lexical"} <= set(labels)
    assert dict((label, opts) for label, _, opts in cost_module.method_plan(4))["factscore gate=lexical"] == {
        "gate": "lexical"}


def test_a_folder_measured_with_embedded_decoding_refuses_the_default_decoding(tmp_path):
    """``--server-decoding embedded`` is part of a folder's identity both ways: resuming it with the default
    (which leaves the key out, so folders older than the option still resume) is refused, not mixed in."""
    data = write_items(tmp_path / "items.jsonl", 1)
    out = tmp_path / "cost"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"server_decoding": "embedded"}))
    cmd = [sys.executable, str(REPO / "benchmarks" / "cost.py"), "--dataset", str(data), "--out", str(out),
           "--methods", "rouge", "--no-peers", "--limit", "1"]
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "--server-decoding embedded" in refused.stderr
    assert not (out / "rows.jsonl").exists()
