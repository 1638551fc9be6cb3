"""Every script in ``benchmarks/`` runs: each one not exercised by a test of its own is run here in its smallest
mode (a few items, the scripted fake model or a stub endpoint on 127.0.0.1, a local Ray instance or a
redis-server on a loopback port where it needs one) and its output is checked, so a maintained tool cannot rot
unnoticed. The other scripts have their own tests: ``compare_bench_runs.py`` (test_compare_bench_runs),
``cost.py`` (test_cost_bench), ``explain_reports.py`` (test_bench_explain), ``lazy_llama_server.py``
(test_lazy_grammar), ``quality_table.py`` (test_quality_table), ``repeat_tests.sh`` (test_repeat_tests);
``test_every_script_is_run_by_a_test`` keeps this list complete."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluscope.cli.main import app

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
ELSEWHERE = {
    "compare_bench_runs.py": "test_compare_bench_runs.py",
    "cost.py": "test_cost_bench.py",
    "explain_reports.py": "test_bench_explain.py",
    "lazy_llama_server.py": "test_lazy_grammar.py",
    "quality_table.py": "test_quality_table.py",
    "repeat_tests.sh": "test_repeat_tests.py",
}


def script(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, str(BENCH / name), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )


def fake_script(path: Path, script_: dict) -> str:
    path.write_text(json.dumps(script_))
    return f"fake:{path}"


def write_pairs(path: Path, n: int) -> Path:
    """``n`` pairs, labels alternating: a consistent one copies its source's first sentence, an inconsistent one
    changes the verb; each its own domain, so balanced picks take from all."""
    rows = []
    for i in range(n):
        source = f"The council of town {i} approved the ferry line by 7 votes to 2. The line opens in May."
        target = (
            f"The council of town {i} approved the ferry line by 7 votes to 2."
            if i % 2
            else f"The council of town {i} rejected a bridge across the river."
        )
        rows.append({"id": f"p{i}", "source": source, "target": target, "label": i % 2, "meta": {"domain": f"d{i}"}})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_every_script_is_run_by_a_test():
    here = Path(__file__).read_text()
    for path in sorted([*BENCH.glob("*.py"), *BENCH.glob("*.sh")]):
        if path.name in ELSEWHERE:
            assert path.name in (REPO / "tests" / ELSEWHERE[path.name]).read_text(), path.name
        else:
            assert re.search(rf'script\(\s*"{re.escape(path.name)}"', here), f"{path.name} is run by no test"


def test_gzip_bomb_is_refused_without_inflating_it_in_memory():
    done = script("gzip_bomb.py", "--inflated-mb", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"wire \d+ KB, inflates to 2 MB; .* peak RSS \d+ -> \d+ MB; LLMError: ", done.stdout), done.stdout


def test_long_source_checks_a_synthetic_source_claim_by_claim(tmp_path):
    model = fake_script(tmp_path / "yes.json", {"default": "Yes", "logprobs": {"yes": 0.8, "no": 0.2}})
    out = tmp_path / "long.json"
    done = script(
        "long_source.py", "--model", model, "--synthetic", "--words", "300", "--claims", "4", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout)
    assert printed["source"] == "synthetic" and printed["source_words"] >= 300 and printed["claims"] == 4
    assert printed["method"] == "dcr" and printed["options"]["retrieval"] == "always"
    assert printed["calls"] == 4 and printed["score"] == pytest.approx(0.8)  # one short verdict call per claim
    # every fourth claim is made false; the fake model answers yes with P 0.8 to all, so it tells none apart
    assert printed["made_false"] == {"false": 1, "false_flagged": 0, "true_flagged": 0, "auc_support_probability": 0.5}
    saved = json.loads(out.read_text())
    assert saved["report"]["score"] == printed["score"] and len(saved["report"]["verdicts"]) == 4


def test_verdict_first_measures_each_system_and_resumes(tmp_path):
    data = write_pairs(tmp_path / "pairs.jsonl", 6)
    model = fake_script(
        tmp_path / "fake.json",
        {
            "default": "Yes",
            "logprobs": {"yes": 0.8, "no": 0.2},
            "GevalReply": {"reason": "The verb differs.", "score": 3},
        },
    )
    out = tmp_path / "vf"
    args = (
        "--model",
        model,
        "--dataset",
        str(data),
        "--per-class",
        "2",
        "--systems",
        "dcr order=verdict_first",
        "geval",
        "--out",
        str(out),
    )
    done = script("verdict_first.py", *args)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and {r["system"] for r in rows} == {"dcr order=verdict_first", "geval"}
    assert sorted(r["gold"] for r in rows) == [0] * 4 + [1] * 4
    dcr = [r for r in rows if r["system"] == "dcr order=verdict_first"]
    assert all(r["score_kind"] is not None and r["probability_score"] == pytest.approx(0.8) for r in dcr)
    summary = {s["system"]: s for s in json.loads((out / "summary.json").read_text())}
    assert summary["dcr order=verdict_first"]["probability_n"] == 4 and summary["geval"]["calls_per_item"] == 1.0
    again = script("verdict_first.py", *args)  # every (system, item) row is there: nothing is measured again
    assert again.returncode == 0 and len((out / "rows.jsonl").read_text().splitlines()) == 8


def test_combiner_cascade_counts_the_skipped_llm_runs_and_keeps_every_label(tmp_path):
    from halluscope.bench.combiner import write_combiner
    from halluscope.methods.ensemble import CombinerFeature, CombinerFile, CombinerMember

    data = write_pairs(tmp_path / "pairs.jsonl", 6)
    model = fake_script(tmp_path / "geval.json", {"GevalReply": {"reason": "Checked.", "score": 3}})
    for method in ("rouge", "geval"):
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "-d",
                str(data),
                "--method",
                method,
                "--model",
                model,
                "--bootstrap",
                "0",
                "--no-progress",
                "-O",
                str(tmp_path / method),
            ],
        )
        assert result.exit_code == 0, result.output
    combiner = CombinerFile(  # rouge (no LLM) far from its mean settles the label whatever geval says
        kind="binary",
        estimator={"class": "hand-written for a test"},
        intercept=0.0,
        threshold=0.5,
        members=[
            CombinerMember(name="rouge", method="rouge"),
            CombinerMember(name="geval", method="geval", uses_llm=True, model="fake"),
        ],
        features=[
            CombinerFeature(
                name="rouge.score", member="rouge", source="score", mean=0.6, scale=0.1, min=0.0, max=1.0, weight=1.0
            ),
            CombinerFeature(
                name="geval.score", member="geval", source="score", mean=0.5, scale=0.25, min=0.0, max=1.0, weight=0.5
            ),
        ],
    )
    write_combiner(combiner, tmp_path / "combiner.json")
    done = script(
        "combiner_cascade.py",
        str(tmp_path / "combiner.json"),
        f"rouge={tmp_path / 'rouge'}",
        f"geval={tmp_path / 'geval'}",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(
        r"(\d+) items, LLM members geval: the cascade skips (\d+) of (\d+) LLM-member runs; its label "
        r"equals the all-members label on (\d+) of (\d+) items",
        done.stdout,
    )
    assert found, done.stdout
    items, skipped, runs, same, of = map(int, found.groups())
    assert items == runs == same == of == 6 and 0 < skipped <= 6


def test_fuzz_table_counts_no_score_and_no_crash(tmp_path):
    out = tmp_path / "fuzz.json"
    done = script("fuzz_table.py", "--methods", "geval,dcr", "--mixed-runs", "3", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    table = json.loads(out.read_text())
    assert set(table) == {"geval", "dcr", "dcr amc=rule", "dcr level=paragraph", "all"}
    assert table["all"]["checks"] > 0 and table["all"]["replies"] > 0
    assert all(table["all"].get(k, 0) == 0 for k in ("scored", "scored_verdicts", "findings", "crashes"))


def test_fuzz_table_stage_by_stage_reaches_every_attacked_stage(tmp_path):
    out = tmp_path / "stages.json"
    done = script("fuzz_table.py", "--stage-by-stage", "--methods", "geval", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    total = json.loads(out.read_text())["all"]
    assert total["checks"] > 0 and total["reached"] == total["checks"]
    assert total["scores_from_attack"] == 0 and total["crashes"] == 0


def test_refactor_snapshot_compares_two_snapshots(tmp_path):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps({"methods": {"geval": {"score": 0.5, "calls": [1, 2]}}}))
    after.write_text(json.dumps({"methods": {"geval": {"score": 0.5, "calls": [1, 2]}}}))
    same = script("refactor_snapshot.py", "--compare", str(before), str(after))
    assert same.returncode == 0 and same.stdout.strip() == "identical"
    after.write_text(json.dumps({"methods": {"geval": {"score": 0.75, "calls": [1, 2]}}}))
    changed = script("refactor_snapshot.py", "--compare", str(before), str(after))
    assert changed.returncode == 1 and "/methods/geval/score: 0.5 != 0.75" in changed.stdout


def test_golden_reports_are_deterministic_and_cover_the_default_and_the_cli(tmp_path, data_dir):
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    for out in outs:
        args = ("--parts", "methods,cli", "--only", "(default),rouge", "--data", str(data_dir), "--out", str(out))
        done = script("golden_reports.py", *args)
        assert done.returncode == 0, done.stderr[-2000:]
    golden = json.loads(outs[0].read_text())
    assert set(golden["methods"]) == {f"{c} [{f}]" for c in ("(default)", "rouge") for f in ("logprobs", "plain")}
    for reports in golden["methods"].values():  # 3 items of each of the three dev sets
        assert len(reports) == 9 and all("crash" not in r and r["score"] is not None for r in reports.values())
    text = golden["cli"]["check --format text [plain]"]
    assert text["exit"] == 1 and "threshold 0.500" in text["output"] and "<elapsed>" in text["output"]
    assert script("golden_reports.py", "--compare", *map(str, outs)).stdout.strip() == "identical"


def test_refactor_snapshot_records_every_method_and_replays_every_fixture(tmp_path, data_dir):
    out = tmp_path / "snapshot.json"  # the fuzz part is the stage-by-stage table: its quick run is tested above
    done = script("refactor_snapshot.py", "--parts", "methods,replays", "--data", str(data_dir), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    snapshot = json.loads(out.read_text())
    methods, replays = snapshot["methods"], snapshot["replays"]
    assert {"rouge", "geval", "dcr", "dcr batch_size=3", "factscore batch_size=3", "probe"} <= set(methods)
    for config, reports in methods.items():  # the 5 shortest items of each of the three dev sets
        assert len(reports) == 15 and all(r["score"] is not None for r in reports.values()), config
        with_calls = sum(bool(r["calls"]) for r in reports.values())
        if config in ("rouge", "gate"):
            assert with_calls == 0, config  # no model
        else:  # the lexical gate settles some items with no call; every other LLM configuration calls on each
            assert with_calls == 15 or ("gate=lexical" in config and with_calls > 0), config
    assert set(replays) == {p.stem for p in (REPO / "tests" / "replays").glob("*.json")}
    assert all(r["unmatched"] == [] for r in replays.values())


def test_record_replays_writes_a_fixture_that_replays(tmp_path, data_dir):
    from tests.replay_model import load_fixture, replay

    model = fake_script(tmp_path / "geval.json", {"GevalReply": {"reason": "The year differs.", "score": 2}})
    out = tmp_path / "replays"
    done = script("record_replays.py", "--model", model, "--only", "geval", "--out", str(out), "--data", str(data_dir))
    assert done.returncode == 0, done.stderr[-2000:]
    assert [p.name for p in out.iterdir()] == ["geval.json"] and "geval: 1 calls, score 0.25" in done.stdout
    fixture = load_fixture(out / "geval.json", data_dir)
    report, replayed = replay(fixture)
    assert replayed.unmatched == [] and report.score == fixture["outcome"]["score"] == 0.25


@pytest.mark.server
def test_service_load_answers_or_refuses_every_request(tmp_path):
    pytest.importorskip("uvicorn", reason="the server extra is not installed: pip install -e '.[server]'")
    out = tmp_path / "load.json"
    done = script(
        "service_load.py", "--only", "concurrent", "limits", "--concurrent", "24", "--out", str(out), timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    for name in ("concurrent", "limits"):
        scenario = result[name]
        assert scenario["requests"] == 24 and sum(scenario["statuses"].values()) == 24, scenario
        assert set(scenario["statuses"]) <= {"200", "429", "503"} and scenario["errors"] == []
        assert scenario["refusals_without_retry_after"] == 0
    assert result["concurrent"]["statuses"] == {"200": 24}  # the default limits take them all


@pytest.mark.server
def test_replica_throughput_shares_one_job_between_replicas_once(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed (Debian: apt-get install redis-server)")
    for module in ("redis", "uvicorn"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: pip install -e '.[server,redis]'")
    out = tmp_path / "replicas.json"
    done = script(
        "replica_throughput.py",
        "--items",
        "6",
        "--latency-ms",
        "0",
        "--concurrency",
        "2",
        "--replicas",
        "1,2",
        "--out",
        str(out),
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads(out.read_text())
    assert [r["replicas"] for r in runs] == [1, 2]
    for run in runs:
        assert run["status"] == "done" and run["done"] == 6 and sum(run["items_done_by_replica"]) == 6
        assert run["llm_requests"] == 6 and len(run["items_done_by_replica"]) == run["replicas"]


@pytest.mark.ray
def test_ray_throughput_runs_the_local_and_the_ray_engine(tmp_path):
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("pyarrow") is None:
        pytest.skip("Ray Data is not installed: pip install -e '.[ray]'")
    out = tmp_path / "ray.json"
    done = script(
        "ray_throughput.py",
        "--items",
        "8",
        "--latency-ms",
        "5",
        "--concurrency",
        "2",
        "--actors",
        "2",
        "--rounds",
        "1",
        "--skip-fault",
        "--out",
        str(out),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["setup"]["items"] == 8 and result["setup"]["actors"] == [2]
    assert [r["engine"] for r in result["throughput"]] == ["local", "ray 2x1"]
    assert all(r["wall_s"] > 0 and r["first_item_s"] <= r["wall_s"] for r in result["throughput"])
    assert "| local |" in done.stdout and "| ray 2x1 |" in done.stdout
