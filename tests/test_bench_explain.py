"""The explanation benchmark: one injected error per item with its gold (no LLM), scoring reports of any version
(check --input result rows and whole reports, old ones without the new fields), and the bench-explain command."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from halluscope.bench.explain_score import restores, score_reports, words
from halluscope.bench.explain_set import ExplainSetConfig, build_explain_set, read_explain_set, write_targets
from halluscope.generators.single_error import (
    check_injection,
    inject_donor,
    swap_date,
    swap_name,
    swap_negation,
    swap_number,
)
from halluscope.records import Example, Span

SOURCE = (
    "The council met on Monday in Harbourville. Mayor Elena Ruiz said the new bridge will cost 40 million euros. "
    "The region will pay 12 million euros of the cost. Work was delayed by the storm in March. "
    "Engineer Tomas Berg was not consulted about the design."
)
TARGET = "The new bridge will cost 40 million euros, Elena Ruiz said. Work was delayed by the storm in March."


# --- the generators -------------------------------------------------------------------------------------------


def _checked(found: Any) -> Any:
    assert found is not None
    assert check_injection(SOURCE, TARGET, found) is None
    assert found.target[found.span.start : found.span.end] == found.injected
    assert TARGET[found.original_span.start : found.original_span.end] == found.original
    return found


def test_a_number_swap_keeps_its_span_original_and_the_source_sentence_stating_it() -> None:
    found = _checked(swap_number(SOURCE, TARGET, random.Random(1)))
    assert found.generator == "swap.number" and found.relation == "contradicts" and found.original == "40"
    assert found.injected != "40" and found.injected not in SOURCE
    assert found.source_sentence == "Mayor Elena Ruiz said the new bridge will cost 40 million euros."
    assert found.source_span == Span(start=43, end=107)
    assert swap_number(SOURCE, TARGET, random.Random(1)) == found  # seeded


def test_date_name_and_negation_swaps_contradict_the_source_sentence_they_come_from() -> None:
    date = _checked(swap_date(SOURCE, TARGET, random.Random(2)))
    assert date.original == "March" and date.injected not in SOURCE
    assert date.source_sentence == "Work was delayed by the storm in March."
    name = _checked(swap_name(SOURCE, TARGET, random.Random(3)))
    assert name.original == "Elena Ruiz" and name.injected == "Tomas Berg"
    assert name.source_sentence == "Mayor Elena Ruiz said the new bridge will cost 40 million euros."
    negation = _checked(swap_negation(SOURCE, TARGET, random.Random(4)))
    assert (negation.original, negation.injected) in (("will", "will not"), ("was", "was not"))
    assert negation.source_sentence in SOURCE and negation.relation == "contradicts"


def test_a_donor_sentence_is_not_mentioned_and_has_no_gold_sentence() -> None:
    example = Example(id="a", source=SOURCE, target=TARGET)
    donor = Example(id="b", source="Another story.", target="A festival of kites drew nine thousand visitors.")
    found = inject_donor(example, [example, donor], random.Random(0))
    assert found is not None and check_injection(SOURCE, TARGET, found) is None
    assert found.relation == "not_mentioned" and found.source_span is None and found.original == ""
    assert found.injected == "A festival of kites drew nine thousand visitors."


# --- the set ----------------------------------------------------------------------------------------------------


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    topics = [
        "A rare orchid bloomed in the botanical garden after twelve years.",
        "Heavy snowfall closed every mountain pass for a whole week.",
        "The museum opened a new wing devoted to ancient maps and globes.",
        "Local bakers protested against the rising price of imported flour.",
        "A volunteer crew rebuilt the old lighthouse stairs by hand.",
        "Scientists tagged forty sea turtles along the southern beaches.",
        "The orchestra cancelled its winter tour because of illness.",
        "A cyber attack disrupted ticket sales at the central railway station.",
    ]
    stories = [
        (
            f"The club signed {n + 3} players on Tuesday in Town{n}. {topic} Coach Anna Lind{n} said the team "
            f"will train in May. Striker Paul Gray{n} was not injured in the final. The stadium holds {n + 20},000 "
            "fans.",
            f"The club signed {n + 3} players on Tuesday. {topic}",
        )
        for n, topic in enumerate(topics)
    ]
    _write(
        root / "summedits" / "news.jsonl",
        [
            {"id": f"s{n}_og", "domain": "news", "doc": d, "summary": s, "label": 1}
            for n, (d, s) in enumerate(stories[:3])
        ]
        + [{"id": "s9_1", "domain": "news", "doc": stories[0][0], "summary": "Wrong.", "label": 0}],
    )
    for domain in ("samsum", "scitldr", "sales_call"):
        _write(root / "summedits" / f"{domain}.jsonl", [])
    _write(
        root / "qags" / "cnndm_dev.jsonl",
        [{"id": f"q{n}", "source": d, "summary": s, "consistency": 1.0} for n, (d, s) in enumerate(stories[3:6])]
        + [{"id": "q9", "source": stories[3][0], "summary": "Half right.", "consistency": 0.5}],
    )
    _write(
        root / "final" / "dev.jsonl",
        [{"doc_id": n, "text": d, "summary": s, "human_descriptions": []} for n, (d, s) in enumerate(stories[6:])]
        + [{"doc_id": 99, "text": stories[6][0], "summary": "Bad.", "human_descriptions": ["wrong"]}],
    )
    return root


def test_the_set_is_seeded_saved_and_resumable(tmp_path: Path, data_dir: Path) -> None:
    whole = build_explain_set(tmp_path / "a.jsonl", ExplainSetConfig(seed=5, items=6), data_dir)
    assert whole == build_explain_set(tmp_path / "b.jsonl", ExplainSetConfig(seed=5, items=6), data_dir)
    assert len(whole) == 6 and {i["dataset"] for i in whole} == {"summedits", "qags", "final"}
    assert {i["relation"] for i in whole} == {"contradicts", "not_mentioned"}
    for item in whole:
        span = item["span"]
        assert item["target"][span["start"] : span["end"]] == item["injected"]
        assert item["target"] != item["original_target"]
        if item["relation"] == "contradicts":
            gold = item["source_span"]
            assert item["source"][gold["start"] : gold["end"]] == item["source_sentence"]
        else:
            assert item["generator"] == "inject.donor" and item["source_span"] is None
    part = tmp_path / "c.jsonl"
    assert build_explain_set(part, ExplainSetConfig(seed=5, items=2), data_dir) == whole[:2]
    assert build_explain_set(part, ExplainSetConfig(seed=5, items=6), data_dir) == whole  # extended, not rebuilt
    assert len(read_explain_set(part)[1]) == 6
    with pytest.raises(ValueError, match="other settings"):
        build_explain_set(part, ExplainSetConfig(seed=6, items=6), data_dir)
    targets = tmp_path / "targets.jsonl"
    write_targets(targets, whole)
    from halluscope.bench.datasets import read_examples

    examples = read_examples(targets)  # the generic Example format
    assert [(e.id, e.target) for e in examples] == [(i["id"], i["target"]) for i in whole]


# --- scoring ----------------------------------------------------------------------------------------------------

SWAPPED = "The new bridge will cost 45 million euros, Elena Ruiz said."
ITEM = {
    "id": "explain-0000",
    "generator": "swap.number",
    "source": SOURCE,
    "target": SWAPPED,
    "span": {"start": 25, "end": 27},
    "injected": "45",
    "original": "40",
    "relation": "contradicts",
    "source_span": {"start": 43, "end": 107},
    "source_sentence": SOURCE[43:107],
}
INVENTED = "Work was delayed. The bridge won a design prize."
ITEM2 = {
    "id": "explain-0001",
    "generator": "inject.donor",
    "source": SOURCE,
    "target": INVENTED,
    "span": {"start": 18, "end": 48},
    "injected": "The bridge won a design prize.",
    "original": "",
    "relation": "not_mentioned",
    "source_span": None,
    "source_sentence": None,
}


def _row(item_id: str, findings: list[dict[str, Any]], score: float | None = 0.2) -> dict[str, Any]:
    """A result row as `check --input ... --output` writes it."""
    return {
        "id": item_id,
        "score": score,
        "unscored_reason": None if score is not None else "no reply",
        "findings": findings,
        "method": "dcr",
        "model": "fake",
        "calls": 4,
        "prompt_tokens": 300,
        "completion_tokens": 20,
        "elapsed_s": 1.5,
    }


def _finding(start: int, end: int, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "contradicted",
        "description": "The source says 40.",
        "spans": [{"start": start, "end": end}],
    } | extra


GOOD = _finding(
    25,
    27,
    evidence=[{"text": SOURCE[43:107], "relation": "contradicts", "start": 43, "end": 107}],
    evidence_relation="contradicts",
    fix="The new bridge will cost 40 million euros, Elena Ruiz said.",
    fix_verified=True,
)


def test_a_report_that_hits_the_span_scores_one_and_one_that_misses_scores_zero() -> None:
    hit, _ = score_reports([ITEM], {ITEM["id"]: _row(ITEM["id"], [GOOD])}, n_bootstrap=0)
    m = hit["metrics"]
    assert m["span_hit"]["value"] == 1.0 and m["span_precision"]["value"] == 1.0
    assert m["evidence_hit_at_1"]["value"] == 1.0 and m["relation_accuracy"]["value"] == 1.0
    assert m["fixes_verified"]["value"] == 1.0 and m["fixes_restoring_gold"]["value"] == 1.0
    assert m["markup_leaks"] == 0 and m["calls_per_item"]["value"] == 4.0 and m["seconds_per_item"]["value"] == 1.5
    assert hit["method"] == "dcr" and hit["coverage"]["share"] == 1.0
    as_text = {**_row(ITEM["id"], []), "findings": json.dumps([GOOD])}  # a row read back from CSV
    assert score_reports([ITEM], {ITEM["id"]: as_text}, n_bootstrap=0)[0]["metrics"] == m
    miss, _ = score_reports([ITEM], {ITEM["id"]: _row(ITEM["id"], [_finding(44, 59)])}, n_bootstrap=0)
    m = miss["metrics"]
    assert m["span_hit"]["value"] == 0.0 and m["evidence_hit_at_1"]["value"] == 0.0
    assert m["relation_accuracy"]["value"] == 0.0 and m["span_precision"]["value"] is None
    assert m["fixes_restoring_gold"]["value"] is None and m["fixes_verified"]["value"] is None


def test_a_sentence_wide_finding_has_the_span_share_as_precision_and_a_wrong_passage_misses() -> None:
    wide = _finding(
        0,
        len(SWAPPED),
        evidence=[{"text": SOURCE[:42], "relation": "related", "start": 0, "end": 42}],
        evidence_relation="not_mentioned",
        fix="The new bridge will cost 45 million euros.",
        fix_verified=False,
    )
    summary, [outcome] = score_reports([ITEM], {ITEM["id"]: _row(ITEM["id"], [wide])}, n_bootstrap=0)
    m = summary["metrics"]
    assert m["span_hit"]["value"] == 1.0 and m["span_precision"]["value"] == pytest.approx(2 / len(SWAPPED))
    assert m["evidence_hit_at_1"]["value"] == 0.0 and m["relation_accuracy"]["value"] == 0.0
    assert m["fixes_verified"]["value"] == 0.0 and m["fixes_restoring_gold"]["value"] == 0.0
    assert m["relation_accuracy_given_hit"]["value"] == 0.0 and m["evidence_hit_at_1_given_hit"]["value"] == 0.0
    assert outcome["relation"] == "not_mentioned" and outcome["fix_restores"] is False


def test_markup_in_what_users_read_is_counted_but_the_callers_own_text_is_not() -> None:
    item = {**ITEM, "source": SOURCE + " Ana: <file_gif> sent."}
    leaking = _finding(
        25,
        27,
        description="<claim_d9e042ef58>The new bridge</claim_d9e042ef58> costs 40.",
        evidence=[{"text": "Ana: <file_gif> sent.", "start": len(SOURCE) + 1, "end": len(item["source"])}],
        fix="<corrected sentence>",
    )
    summary, [outcome] = score_reports([item], {item["id"]: _row(item["id"], [leaking])}, n_bootstrap=0)
    assert summary["metrics"]["markup_leaks"] == 2 and summary["metrics"]["items_with_markup_leak"] == 1
    assert [m["field"] for m in outcome["markup"]] == ["description", "fix"]
    assert summary["markup_examples"][0] == {"id": item["id"], "field": "description", "found": "a data fence tag"}


def test_an_old_report_without_the_new_fields_is_scored_and_its_gaps_counted() -> None:
    old = {
        "id": ITEM["id"],
        "report": {
            "method": "dcr",
            "model": "embedded:qwen",
            "score": 0.5,
            "findings": [
                {
                    "description": "The cost is wrong.",
                    "kind": "unsupported",
                    "target_spans": [{"start": 0, "end": 27}],
                    "evidence": [{"text": "a paraphrase", "span": None, "relation": "related"}],
                    "fix": "The new bridge will cost 40 million euros, Elena Ruiz said.",
                }
            ],
            "usage": {"calls": 2, "prompt_tokens": 100, "completion_tokens": 50},
            "elapsed_s": 3.0,
        },
    }
    summary, _ = score_reports([ITEM], {ITEM["id"]: old}, n_bootstrap=0)
    m = summary["metrics"]
    assert m["span_hit"]["value"] == 1.0 and m["span_precision"]["value"] == pytest.approx(2 / 27)
    assert m["relation_accuracy"]["value"] == 0.0 and m["evidence_hit_at_1"]["value"] == 0.0
    assert m["fixes_verified"]["value"] == 0.0 and m["fixes_restoring_gold"]["value"] == 1.0
    assert summary["not_reported"] == {"evidence_relation": 1, "fix_verified": 1, "evidence_offsets": 1, "usage": 0}
    assert m["calls_per_item"]["value"] == 2.0 and m["prompt_tokens_per_item"]["value"] == 100.0


def test_missing_and_unscored_reports_count_as_misses_beside_the_scored_only_value() -> None:
    items = [ITEM, ITEM2, {**ITEM, "id": "explain-0002"}]
    rows = {
        ITEM["id"]: _row(ITEM["id"], [GOOD]),
        ITEM2["id"]: _row(ITEM2["id"], [], score=None),
    }
    summary, outcomes = score_reports(items, rows, n_bootstrap=200)
    assert [o["status"] for o in outcomes] == ["scored", "unscored", "missing"]
    assert summary["coverage"] == {"scored": 1, "total": 3, "share": 0.3333}
    assert summary["missing"] == 1 and summary["unscored"] == 1
    span = summary["metrics"]["span_hit"]
    assert span["value"] == pytest.approx(1 / 3) and span["scored_only"] == 1.0
    assert span["low"] is not None and span["low"] <= span["value"] <= span["high"]
    assert summary["metrics"]["relation_accuracy_given_hit"]["value"] == 1.0  # the one item with a hit
    evidence = summary["metrics"]["evidence_hit_at_1"]
    assert evidence["n"] == 2 and evidence["value"] == 0.5  # the invented item has no gold sentence
    assert summary["relations"] == {"contradicts": 2, "not_mentioned": 1}


def test_the_restore_rule() -> None:
    assert words("It didn't cost 1,013 euros") == ["it", "did", "not", "cost", "1013", "euros"]
    assert restores("The bridge will cost 40 million euros.", ITEM)
    assert not restores("The bridge will cost 45 million euros.", ITEM)
    assert not restores("The bridge will cost a lot.", ITEM)
    inserted = {**ITEM, "original": "was", "injected": "was not", "relation": "contradicts"}
    assert restores("Work was delayed.", inserted) and not restores("Work wasn't delayed.", inserted)
    dropped = {**ITEM, "original": "didn't", "injected": "did"}
    assert restores("He did not sign.", dropped) and not restores("He did sign.", dropped)
    assert restores("Work was delayed.", ITEM2) and restores("", ITEM2)
    assert not restores("Work was delayed; the bridge won a prize.", ITEM2)


# --- the command ------------------------------------------------------------------------------------------------


def _invoke(*args: str) -> Any:
    from halluscope.cli.main import app

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_bench_explain_builds_runs_a_method_and_scores_two_report_files(tmp_path: Path, data_dir: Path) -> None:
    set_path, targets, out = tmp_path / "set.jsonl", tmp_path / "targets.jsonl", tmp_path / "out"
    built = _invoke(
        "bench-explain", "build", "--set", str(set_path), "--targets", str(targets), "--items", "4",
        "--data-dir", str(data_dir),
    )  # fmt: skip
    assert json.loads(built.output)["items"] == 4
    _invoke("bench-explain", "run", "--set", str(set_path), "--output", str(out), "--method", "gate",
            "--bootstrap", "0", "--no-progress")  # fmt: skip
    rows = [json.loads(line) for line in (out / "reports.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all("evidence_relation" in f for r in rows for f in r["findings"])
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps({"id": r["id"], "score": None, "unscored_reason": "x"}) + "\n" for r in rows))
    scored = _invoke("bench-explain", "score", "--set", str(set_path), "--reports", f"before={old}",
                     "--reports", f"after={out / 'reports.jsonl'}", "--output", str(tmp_path / "table"),
                     "--bootstrap", "0")  # fmt: skip
    lines = [line for line in scored.output.splitlines() if line.startswith("| before") or line.startswith("| after")]
    assert len(lines) == 2 and lines[0].startswith("| before | 4 (0) | 0.000")
    runs = json.loads((tmp_path / "table" / "explain.json").read_text())["runs"]
    assert [r["label"] for r in runs] == ["before", "after"] and runs[1]["coverage"]["scored"] == 4
    assert (tmp_path / "table" / "explain.md").read_text().count("\n") == 4


def test_bench_explain_score_refuses_a_missing_set(tmp_path: Path) -> None:
    from halluscope.cli.main import app

    result = CliRunner().invoke(
        app, ["bench-explain", "score", "--set", str(tmp_path / "nope.jsonl"), "--reports", str(tmp_path / "r")]
    )
    assert result.exit_code == 2 and "build it first" in result.output


def test_explain_reports_writes_whole_reports_of_any_version_and_resumes(tmp_path: Path) -> None:
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    targets, reports = tmp_path / "targets.jsonl", tmp_path / "reports.jsonl"
    write_targets(targets, [ITEM, ITEM2])

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(repo / "benchmarks" / "explain_reports.py"), "--targets", str(targets),
             "--output", str(reports), "--method", "gate"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(repo / "src")},
        )  # fmt: skip

    done = run()
    assert done.returncode == 0, done.stderr[-2000:]
    lines = reports.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [ITEM["id"], ITEM2["id"]]
    assert json.loads(lines[0])["report"]["method"] == "gate"
    assert run().returncode == 0 and reports.read_text().splitlines() == lines  # nothing checked twice
    summary, _ = score_reports([ITEM, ITEM2], {json.loads(x)["id"]: json.loads(x) for x in lines}, n_bootstrap=0)
    assert summary["coverage"]["scored"] == 2 and summary["metrics"]["span_hit"]["value"] == 1.0


def test_halluscope_bench_on_the_targets_file_runs_the_explanation_suite(tmp_path: Path, data_dir: Path) -> None:
    set_path, targets = tmp_path / "set.jsonl", tmp_path / "targets.jsonl"
    _invoke("bench-explain", "build", "--set", str(set_path), "--targets", str(targets), "--items", "3",
            "--data-dir", str(data_dir))  # fmt: skip
    _invoke("bench", "--dataset", str(targets), "--method", "gate", "--output", str(tmp_path / "bench"),
            "--no-progress", "--bootstrap", "0")  # fmt: skip
    suite = json.loads((tmp_path / "bench" / "results.json").read_text())["metrics"]["explanations"]
    _invoke("bench-explain", "run", "--set", str(set_path), "--output", str(tmp_path / "run"), "--method", "gate",
            "--bootstrap", "0", "--no-progress")  # fmt: skip
    [run] = json.loads((tmp_path / "run" / "explain.json").read_text())["runs"]
    assert suite["items"] == 3 and suite["coverage"] == run["coverage"]
    for key in ("span_hit", "span_precision", "evidence_hit_at_1", "relation_accuracy"):
        assert suite["metrics"][key]["value"] == run["metrics"][key]["value"], key
    assert suite["metrics"]["span_hit"]["value"] > 0


def test_a_check_input_row_of_this_version_carries_the_relation_and_the_verified_fix() -> None:
    from halluscope.records import Evidence, Finding, Report
    from halluscope.tabular import result_row

    report = Report(
        method="dcr",
        model="fake",
        score=0.3,
        findings=[
            Finding(
                description="The source says 40 million.",
                kind="contradicted",
                target_spans=[Span(start=25, end=27)],
                evidence=[Evidence(text=SOURCE[43:107], span=Span(start=43, end=107), relation="contradicts")],
                evidence_relation="contradicts",
                fix="The new bridge will cost 40 million euros, Elena Ruiz said.",
                fix_verified=True,
                fix_probability=0.9,
            )
        ],
    )
    row = {"id": ITEM["id"], **result_row(report, SOURCE, SWAPPED)}
    assert row["findings"][0]["evidence_relation"] == "contradicts" and row["findings"][0]["fix_probability"] == 0.9
    summary, _ = score_reports([ITEM], {ITEM["id"]: json.loads(json.dumps(row))}, n_bootstrap=0)
    m = summary["metrics"]
    assert [m[k]["value"] for k in ("span_hit", "evidence_hit_at_1", "relation_accuracy", "fixes_verified")] == [
        1.0,
        1.0,
        1.0,
        1.0,
    ]
    assert summary["not_reported"] == {"evidence_relation": 0, "fix_verified": 0, "evidence_offsets": 0, "usage": 0}
