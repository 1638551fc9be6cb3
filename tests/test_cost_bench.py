"""The quality-and-cost figures (``halluscope.bench.quality_table``) and ``benchmarks/cost.py``, the thin wrapper
that runs ``halluscope bench --methods`` against an endpoint: against a stub endpoint on loopback (geval only, no
peers), a stopped run resumes without asking the endpoint again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.test_cache_backends import StubEndpoint

REPO = Path(__file__).resolve().parents[1]


def write_items(path: Path, n: int) -> Path:
    """Generic-format items graded like QAGS: the stub rates odd claims 5 and even ones 2, the human score is
    1 for odd and 0 for even, so the Spearman correlation is exactly 1."""
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{i}",
                    "source": f"Source {i}: the cat sat on the mat.",
                    "target": f"Claim number {i}.",
                    "human_score": i % 2,
                }
            )
            + "\n"
            for i in range(n)
        )
    )
    return path


def cost(stub: StubEndpoint, data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "cost.py"),
        "--dataset",
        str(data),
        "--out",
        str(out),
        "--base-url",
        stub.base_url,
        "--model",
        "stub",
        "--methods",
        "geval",
        "--no-peers",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def test_cost_runs_the_bench_on_the_endpoint_and_resumes_without_asking_twice(tmp_path):
    data = write_items(tmp_path / "items.jsonl", 3)
    out = tmp_path / "cost"
    with StubEndpoint() as stub:
        first = cost(stub, data, out, "--limit", "2")
        assert first.returncode == 0, first.stderr
        assert len(stub.arrived) == 2

        more = cost(stub, data, out, "--limit", "3")
        assert more.returncode == 0, more.stderr
        assert len(stub.arrived) == 3  # the two items already scored were kept
        quality = json.loads((out / "quality.json").read_text())
        assert quality["meta"]["items_run"] == 3
        geval = quality["summary"][0]
        assert geval["system"] == "geval" and geval["calls_per_item"] == 1.0
        assert geval["tokens_per_item"] == 15.0  # the stub's usage: 10 + 5 per call
        assert geval["accuracy"]["scored"] == 3 and geval["accuracy"]["spearman"]["value"] == 1.0
        rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
        assert [r["gold_human_score"] for r in rows] == [0.0, 1.0, 0.0]
        assert "Spearman 1.000" in (out / "quality.md").read_text()

        again = cost(stub, data, out, "--limit", "3")
        assert again.returncode == 0 and len(stub.arrived) == 3


def test_the_plan_puts_the_baselines_and_each_cascade_beside_its_method():
    """The no-LLM baselines and a ``gate=lexical`` row per claim method are run with the others; ``--methods``
    picks by label or by method."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import cost as cost_module
    finally:
        sys.path.pop(0)
    plan = dict(cost_module.method_plan(4))
    assert {"rouge", "gate", "factscore gate=lexical", "dcr gate=lexical"} <= set(plan)
    assert plan["factscore gate=lexical"] == "factscore+gate=lexical"
    printed = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "cost.py"),
            "--print-command",
            "--methods",
            "rouge,dcr batch_size=4,probe",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    assert "--methods rouge,dcr+batch_size=4,probe" in printed.stdout and "--peers ragas,deepeval" in printed.stdout


def test_final_rows_are_summarized_with_the_named_judges_matching():
    from halluscope.bench.quality_table import Row, accuracy, dataset_markdown, summarize

    match = {"judge": "judge-x", "n_gold": 2, "n_pred": 2, "matched_gold": 1, "unscored_reason": None}
    unusable = {"judge": "judge-x", "n_gold": 2, "n_pred": 1, "matched_gold": None, "unscored_reason": "unusable"}
    rows = [
        Row(system="localize", item="final-1", scored=True, score=0.0, gold_label=0, match=match),
        Row(
            system="localize",
            item="final-2",
            scored=True,
            score=1.0,
            gold_label=1,
            match={"judge": "judge-x", "n_gold": 0, "n_pred": 0, "matched_gold": 0},
        ),
        Row(system="localize", item="final-3", scored=True, score=0.0, gold_label=0, match=unusable),
        # an unscored row states no verdict: even a match recorded on it is not counted
        Row(
            system="localize",
            item="final-4",
            scored=False,
            gold_label=0,
            match={"judge": "judge-x", "n_gold": 3, "n_pred": 0, "matched_gold": 0},
        ),
    ]
    result = accuracy(rows)
    assert result["items"] == 4 and result["scored"] == 3 and result["auc"]["value"] == 1.0
    final = result["final_match"]
    assert final["judge"] == "judge-x" and final["unmatched_items"] == 1
    assert (final["precision"], final["recall"]) == (0.5, 0.5) and final["f1"]["n"] == 2
    table = dataset_markdown(summarize(rows, ["localize"]), {"items_run": 4, "model": "m", "dataset": "final:dev"})
    assert "| localize | matching F1 (judge judge-x) 0.500" in table and "| 3/4 |" in table
    assert "FINAL matching F1 0.500" in table


def test_the_matches_the_bench_stored_become_the_rows_matches(tmp_path):
    """``collect_rows`` reads each system's Reports and the FINAL matches its bench run stored with the judge."""
    from halluscope.bench.folder import ItemStore
    from halluscope.bench.harness import collect_rows
    from halluscope.bench.judge import MatchResult
    from halluscope.records import Example, Finding, Report

    examples = [
        Example(id="f1", source="s", target="The cat sat.", label=0, descriptions=["wrong cat"]),
        Example(id="f2", source="s", target="The mat.", label=1, descriptions=[]),
    ]
    folder = tmp_path / "localize"
    folder.mkdir()
    with ItemStore(folder / "items.jsonl").open() as fh:
        ItemStore.write(fh, "f1", Report(method="localize", score=0.0, findings=[Finding(description="the cat")]))
        ItemStore.write(fh, "f2", Report(method="localize", score=None, unscored_reason="no reply"))
    (folder / "final_matches.jsonl").write_text(
        MatchResult(example_id="f1", key="k", n_gold=1, n_pred=1, matches={0: 0}, matched_gold=1).model_dump_json()
        + "\n"
    )
    rows = collect_rows(["localize"], examples, tmp_path, "final:dev", "judge-x")
    assert [(r.item, r.scored, r.match) for r in rows] == [
        ("f1", True, {"judge": "judge-x", "n_gold": 1, "n_pred": 1, "matched_gold": 1, "unscored_reason": None}),
        ("f2", False, None),
    ]
    assert rows[0].gold_descriptions == ["wrong cat"] and rows[0].predicted_descriptions == ["the cat"]
