"""``halluscope.bench.quality_table`` (run by ``benchmarks/quality_table.py``) builds the README's dev-data quality
table from ``halluscope bench --methods`` folders: one row per system and model, each dataset's accuracy computed
from the rows, the no-LLM baselines once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _module():
    from halluscope.bench import quality_table

    return quality_table


def _folder(path: Path, model: str, dataset: str, rows: list[dict]) -> Path:
    path.mkdir()
    (path / "run.json").write_text(
        json.dumps(
            {"endpoint": f"llama_cpp.server + {model} (n_ctx=8192, threads=2)", "model": "m", "dataset": dataset}
        )
    )
    (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"system": "cut off')
    return path


def _qags(system: str, scores: list[float | None], calls: int) -> list[dict]:
    return [
        {
            "system": system,
            "item": f"q{i}",
            "calls": calls,
            "prompt_tokens": 100 * calls,
            "completion_tokens": 10 * calls,
            "scored": s is not None,
            "score": s,
            "gold_human_score": float(i),
        }
        for i, s in enumerate(scores)
    ]


def test_one_row_per_system_and_model_with_each_datasets_accuracy(tmp_path) -> None:
    qt = _module()
    rouge = [0.1, 0.3, 0.2, 0.4, 0.5]
    qwen = _folder(
        tmp_path / "qags-qwen",
        "Qwen-1.5B",
        "qags:dev",
        _qags("rouge", rouge, 0) + _qags("geval", [0.0, 0.25, 0.5, 0.75, 1.0], 1),
    )
    smol = _folder(
        tmp_path / "qags-smol",
        "SmolLM2",
        "qags:dev",
        _qags("rouge", rouge, 0) + _qags("geval", [1.0, None, 0.5, None, 0.0], 2),
    )
    labelled = [
        {
            "system": "geval",
            "item": f"s{i}",
            "calls": 1,
            "scored": True,
            "score": i / 4,
            "gold_label": int(i >= 2),
            "domain": "news" if i % 2 else "samsum",
        }
        for i in range(4)
    ]
    summ = _folder(tmp_path / "summedits-qwen", "Qwen-1.5B", "summedits", labelled)

    table = qt.cells([qwen, smol, summ])
    assert set(table) == {("rouge", qt.NO_LLM), ("geval", "Qwen-1.5B"), ("geval", "SmolLM2")}
    assert table[("geval", "Qwen-1.5B")]["qags"]["accuracy"]["spearman"]["value"] == pytest.approx(1.0)
    assert table[("geval", "SmolLM2")]["qags"]["accuracy"]["spearman"]["value"] == pytest.approx(-1.0)
    assert table[("geval", "SmolLM2")]["qags"]["unscored"] == 2
    assert table[("rouge", qt.NO_LLM)]["qags"]["accuracy"]["spearman"]["value"] == pytest.approx(0.9)
    assert table[("geval", "Qwen-1.5B")]["summedits"]["accuracy"]["auc"]["value"] == pytest.approx(1.0)
    # scores 0, 1/4, 1/2, 3/4 against labels 0, 0, 1, 1, read as P(consistent)
    calibration = table[("geval", "Qwen-1.5B")]["summedits"]["accuracy"]["calibration"]
    assert calibration["brier"]["value"] == pytest.approx((0 + 1 / 16 + 1 / 4 + 1 / 16) / 4)
    assert calibration["ece"] == pytest.approx((0 + 0.25 + 0.5 + 0.25) / 4)  # one item per bin

    text = qt.markdown(table)
    row = next(line for line in text.splitlines() if line.startswith("| geval | SmolLM2 |"))
    assert "-1.000" in row and "(3/5 scored)" in row and "not run" in row  # no SummEdits rows for SmolLM2
    assert "qags 2.0 / 220" in row
    assert "news 1.00; samsum 1.00" in text
    assert "<br>Brier 0.094, ECE 0.250" in text


def test_a_baseline_that_differs_between_folders_is_refused(tmp_path) -> None:
    qt = _module()
    a = _folder(tmp_path / "a", "Qwen-1.5B", "qags:dev", _qags("rouge", [0.1, 0.2, 0.3], 0))
    b = _folder(tmp_path / "b", "SmolLM2", "qags:dev", _qags("rouge", [0.1, 0.2, 0.4], 0))
    with pytest.raises(SystemExit, match="rouge has qags rows in two folders"):
        qt.cells([a, b])


def test_a_baseline_still_being_measured_beside_another_model_gives_way_to_the_complete_one(tmp_path) -> None:
    qt = _module()
    whole = _folder(tmp_path / "a", "Qwen-1.5B", "qags:dev", _qags("rouge", [0.1, 0.2, 0.3, 0.5], 0))
    partial = _folder(tmp_path / "b", "SmolLM2", "qags:dev", _qags("rouge", [0.1, 0.2], 0))
    for order in ([whole, partial], [partial, whole]):
        cell = qt.cells(order)[("rouge", qt.NO_LLM)]["qags"]
        assert cell["items"] == 4 and cell["folder"] == str(whole)


def test_the_cli_writes_the_table_and_its_numbers(tmp_path, capsys) -> None:
    qt = _module()
    folder = _folder(tmp_path / "q", "Qwen-1.5B", "qags:dev", _qags("geval", [0.1, 0.2, 0.3], 1))
    qt.main([str(folder), "--out", str(tmp_path / "quality.md")])
    assert (tmp_path / "quality.md").read_text() == capsys.readouterr().out
    numbers = json.loads((tmp_path / "quality.json").read_text())
    assert numbers[0]["system"] == "geval" and numbers[0]["qags"]["items"] == 3
    with pytest.raises(SystemExit, match="no rows.jsonl"):
        qt.main([str(tmp_path)])


def test_the_benchmarks_script_is_the_package_command(tmp_path) -> None:
    import subprocess
    import sys

    folder = _folder(tmp_path / "q", "Qwen-1.5B", "qags:dev", _qags("geval", [0.1, 0.2, 0.3], 1))
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "quality_table.py"), str(folder), "--min-items", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == _module().markdown(_module().cells([folder]), 3)


def test_a_system_that_describes_nothing_gets_its_detection_auc_on_final(tmp_path) -> None:
    qt = _module()
    rows = [
        {
            "system": "rouge",
            "item": f"f{i}",
            "calls": 0,
            "scored": True,
            "score": i / 3,
            "gold_label": int(i >= 2),
            "predicted_descriptions": [],
            "match": {"judge": "j", "n_gold": 1, "n_pred": 0, "matched_gold": 0},
        }
        for i in range(4)
    ]
    rows += [
        {
            "system": "localize",
            "item": f"f{i}",
            "calls": 2,
            "scored": True,
            "score": float(i >= 2),
            "gold_label": int(i >= 2),
            "predicted_descriptions": [] if i >= 2 else ["made up"],
            "match": {
                "judge": "j",
                "n_gold": 0 if i >= 2 else 1,
                "n_pred": 0 if i >= 2 else 1,
                "matched_gold": 0 if i >= 2 else 1,
            },
        }
        for i in range(4)
    ]
    table = qt.cells([_folder(tmp_path / "final", "Qwen-1.5B", "final:dev", rows)])
    text = qt.markdown(table)
    assert "describes no error; detection AUC 1.000" in next(
        line for line in text.splitlines() if line.startswith("| rouge")
    )
    localize = next(line for line in text.splitlines() if line.startswith("| localize"))
    assert "F1 1.000" in localize and "<br>detection AUC 1.000" in localize  # comparable with rouge's cell


def test_a_cell_with_too_few_items_shows_its_count_not_a_figure(tmp_path) -> None:
    qt = _module()
    folder = _folder(tmp_path / "q", "Qwen-1.5B", "qags:dev", _qags("geval", [0.1, 0.2, 0.3], 1))
    assert "1.000" in qt.markdown(qt.cells([folder]), min_items=3)  # Spearman 1 on 3 items, shown
    assert "3 items so far (fewer than 4: no figure)" in qt.markdown(qt.cells([folder]), min_items=4)


def test_a_cell_without_a_statistic_says_why(tmp_path) -> None:
    qt = _module()
    folder = _folder(
        tmp_path / "q",
        "SmolLM2",
        "qags:dev",
        _qags("probe", [0.0, 0.0, 0.0], 2)
        + _qags("localize", [None, None, 0.5], 2)
        + _qags("dcr", [None, 0.5, 0.5, 1.0], 2),
    )
    lines = qt.markdown(qt.cells([folder])).splitlines()
    row = {
        system: next(line for line in lines if line.startswith(f"| {system} |"))
        for system in ("probe", "localize", "dcr")
    }
    assert "no figure: every score 0.00 (3/3 scored)" in row["probe"]
    assert "no figure: too few scored (1/3 scored)" in row["localize"]
    assert "no figure" not in row["dcr"] and "(3/4 scored)" in row["dcr"]
    fewer = next(line for line in qt.markdown(qt.cells([folder]), min_items=4).splitlines() if line.startswith("| dcr"))
    assert "no figure: fewer than 4 scored (3/4 scored)" in fewer  # 4 items run, 3 scored


def test_paired_difference_uses_the_items_both_systems_scored() -> None:
    from halluscope.bench.quality_table import Row, paired_difference

    gold = [1, 0, 1, 0, 1, 0, 1, 0]
    perfect = [
        Row(system="a", item=f"i{k}", scored=True, score=0.9 if g else 0.1, gold_label=g) for k, g in enumerate(gold)
    ]
    reversed_ = [
        Row(system="b", item=f"i{k}", scored=True, score=0.1 if g else 0.9, gold_label=g) for k, g in enumerate(gold)
    ]
    unscored = Row(system="b", item="i8", scored=False, score=None, gold_label=1)
    found = paired_difference([*perfect, *reversed_, unscored], "a", "b", n_resamples=200)
    assert found is not None and found["statistic"] == "AUC" and found["n"] == 8
    assert found["value"] == 1.0 and found["low"] == found["high"] == 1.0  # AUC 1 - AUC 0 on every resample
    human = [
        Row(system=s, item=f"q{k}", scored=True, score=float(k if s == "a" else -k), gold_human_score=float(k))
        for s in ("a", "b")
        for k in range(6)
    ]
    assert paired_difference(human, "a", "b", n_resamples=50)["statistic"] == "Spearman"
    assert paired_difference(human, "a", "b", n_resamples=50)["value"] == 2.0
    assert paired_difference(perfect, "a", "missing") is None


def test_the_run_table_reads_a_score_on_0_1_as_p_consistent_and_leaves_other_scales_alone() -> None:
    qt = _module()
    rows = [
        qt.Row(system="p", item=f"i{i}", scored=True, score=s, gold_label=y)
        for i, (s, y) in enumerate([(0.9, 1), (0.7, 1), (0.4, 0), (0.2, 0)])
    ] + [
        qt.Row(system="logit", item=f"i{i}", scored=True, score=s, gold_label=y)
        for i, (s, y) in enumerate([(3.0, 1), (-2.0, 0)])
    ]
    summary = qt.summarize(rows, ["p", "logit"], n_resamples=50)
    text = qt.dataset_markdown(summary, {"items_run": 4, "dataset": "summedits"})
    line = next(x for x in text.splitlines() if x.startswith("| p | 4/4 |"))
    assert "the score as P(consistent): Brier 0.075" in line and "ECE 0.250" in line  # (0.01+0.09+0.16+0.04)/4
    assert "calibration" not in summary[1]["accuracy"]  # a score off [0, 1] is not read as a probability
