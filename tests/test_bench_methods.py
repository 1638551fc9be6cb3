"""``halluscope bench --methods``: several methods on the same items, one resumable sub-folder each, and the
quality-and-cost table of all of them (statistic with its CI, coverage, calls, tokens, seconds per item). The LLM
method runs on the package's scripted fake model; the peers (RAGAS, DeepEval) are not installed here and must be
skipped with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluscope.bench.harness import folder_name, parse_methods
from halluscope.cli.main import app

GEVAL = [{"reason": "r", "score": s} for s in (2, 5, 2, 5, 2, 5)]


def write_items(path: Path, n: int) -> Path:
    """Graded like QAGS: the script rates even items 2 and odd ones 5, the human score is 1 for odd items, so
    geval's Spearman is exactly 1. Each target differs in how much it shares with its source."""
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{i}",
                    "source": "The cat sat on the mat near the door.",
                    "target": "The cat sat on the mat" + " quietly" * i + ".",
                    "human_score": i % 2,
                }
            )
            + "\n"
            for i in range(n)
        )
    )
    return path


def bench(tmp_path: Path, script: dict, *args: str):
    """The scripted replies are consumed in request order: one item at a time, so item i gets reply i."""
    (tmp_path / "script.json").write_text(json.dumps(script))
    return CliRunner().invoke(
        app,
        [
            "bench",
            "-d",
            str(tmp_path / "items.jsonl"),
            "--model",
            f"fake:{tmp_path / 'script.json'}",
            "--no-cache",
            "--no-progress",
            "--bootstrap",
            "100",
            "--concurrency",
            "1",
            "-O",
            str(tmp_path / "out"),
            *args,
        ],
    )


def items_of(folder: Path) -> list[str]:
    return [json.loads(line)["example_id"] for line in (folder / "items.jsonl").read_text().splitlines()]


def test_the_methods_see_the_same_items_and_the_table_has_each_ones_figures(tmp_path) -> None:
    write_items(tmp_path / "items.jsonl", 5)
    result = bench(tmp_path, {"GevalReply": GEVAL}, "--methods", "rouge,gate,geval", "--limit", "4")
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    assert [items_of(out / s) for s in ("rouge", "gate", "geval")] == [["q0", "q1", "q2", "q3"]] * 3

    quality = json.loads((out / "quality.json").read_text())
    assert quality["meta"]["items_run"] == 4 and quality["meta"]["dataset"] == "items"
    summary = {s["system"]: s for s in quality["summary"]}
    assert list(summary) == ["rouge", "gate", "geval"]
    assert [summary[s]["calls_per_item"] for s in summary] == [0.0, 0.0, 1.0]
    assert summary["geval"]["prompt_tokens_per_item"] > 0 and summary["geval"]["completion_tokens_per_item"] > 0
    assert all(s["accuracy"]["scored"] == 4 and s["accuracy"]["items"] == 4 for s in summary.values())
    spearman = summary["geval"]["accuracy"]["spearman"]
    assert spearman["value"] == pytest.approx(1.0) and spearman["n"] == 4 and spearman["low"] is not None

    table = (out / "quality.md").read_text()
    geval = next(line for line in table.splitlines() if line.startswith("| geval |"))
    assert "Spearman 1.000 [1.000, 1.000]" in geval and "| 4/4 | 1.0 |" in geval
    assert next(line for line in table.splitlines() if line.startswith("| rouge |")).count("| 0.0 |") == 1
    assert table in result.output

    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [(r["system"], r["item"]) for r in rows] == [
        (s, f"q{i}") for s in ("rouge", "gate", "geval") for i in range(4)
    ]
    assert [r["gold_human_score"] for r in rows[:4]] == [0.0, 1.0, 0.0, 1.0]
    assert json.loads((out / "run.json").read_text())["model"] == f"fake:{tmp_path / 'script.json'}"


def test_a_second_run_makes_no_new_call_and_a_larger_limit_only_the_missing_ones(tmp_path) -> None:
    write_items(tmp_path / "items.jsonl", 4)
    first = bench(tmp_path, {"GevalReply": GEVAL}, "--methods", "rouge,geval", "--limit", "3")
    assert first.exit_code == 0, first.output
    out = tmp_path / "out"
    before = (out / "rows.jsonl").read_text()

    # a script with no reply left: any call the resumed run made would leave its item unscored
    again = bench(tmp_path, {}, "--methods", "rouge,geval", "--limit", "3")
    assert again.exit_code == 0, again.output
    assert json.loads((out / "geval" / "results.json").read_text())["usage_this_run"]["calls"] == 0
    assert (out / "rows.jsonl").read_text() == before
    assert items_of(out / "geval") == ["q0", "q1", "q2"]

    more = bench(tmp_path, {"GevalReply": GEVAL[3:]}, "--methods", "rouge,geval", "--limit", "4")
    assert more.exit_code == 0, more.output
    geval = json.loads((out / "geval" / "results.json").read_text())
    assert geval["usage_this_run"]["calls"] == 1 and geval["usage_this_run"]["items_run"] == 1
    assert items_of(out / "geval") == items_of(out / "rouge") == ["q0", "q1", "q2", "q3"]
    summary = {s["system"]: s for s in json.loads((out / "quality.json").read_text())["summary"]}
    assert summary["geval"]["accuracy"]["scored"] == 4 and summary["geval"]["calls_per_item"] == 1.0


def test_a_method_with_options_of_its_own_gets_its_own_row_and_folder(tmp_path) -> None:
    write_items(tmp_path / "items.jsonl", 3)
    result = bench(tmp_path, {}, "--methods", "rouge,rouge+variant=rouge1")
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    assert (
        json.loads((out / "rouge+variant=rouge1" / "results.json").read_text())["method_options"]["variant"] == "rouge1"
    )
    assert [s["system"] for s in json.loads((out / "quality.json").read_text())["summary"]] == [
        "rouge",
        "rouge variant=rouge1",
    ]

    # a method added to the folder later runs on the same items; another dataset in the folder is refused
    added = bench(tmp_path, {"GevalReply": GEVAL}, "--methods", "rouge,geval")
    assert added.exit_code == 0, added.output
    assert items_of(out / "geval") == items_of(out / "rouge") == ["q0", "q1", "q2"]
    assert json.loads((out / "run.json").read_text())["model"] == f"fake:{tmp_path / 'script.json'}"
    other = tmp_path / "other.jsonl"
    other.write_text((tmp_path / "items.jsonl").read_text())
    refused = CliRunner().invoke(
        app, ["bench", "-d", str(other), "--methods", "rouge", "--no-progress", "-O", str(out)]
    )
    assert refused.exit_code == 2 and "other settings" in refused.output


def test_the_peers_are_skipped_with_the_reason_when_they_cannot_run(tmp_path) -> None:
    write_items(tmp_path / "items.jsonl", 2)
    result = bench(tmp_path, {}, "--methods", "rouge", "--peers", "ragas,deepeval")
    assert result.exit_code == 0, result.output
    skipped = json.loads((tmp_path / "out" / "quality.json").read_text())["meta"]["skipped"]
    assert set(skipped) == {"ragas faithfulness", "deepeval faithfulness"}
    assert all("endpoint" in why for why in skipped.values())  # no --base-url: nothing for a peer to call
    assert "ragas faithfulness: skipped" in (tmp_path / "out" / "quality.md").read_text()


def test_a_peer_that_is_not_installed_says_so() -> None:
    from halluscope.bench.peers import Endpoint, PeerUnavailable, make_peer

    endpoint = Endpoint("http://127.0.0.1:9/v1", "m", "k", 64)
    for key, module in (("ragas", "ragas"), ("deepeval", "deepeval")):
        try:
            __import__(module)
        except ImportError:
            with pytest.raises(PeerUnavailable, match=f"{module} is not installed.*'peers' dependency group"):
                make_peer(key, endpoint)
        else:
            pytest.skip(f"{module} is installed")
    with pytest.raises(ValueError, match="unknown peer 'trulens'"):
        make_peer("trulens", endpoint)


def test_the_methods_list_is_parsed_and_checked() -> None:
    specs = parse_methods("rouge, dcr+batch_size=4+gate=lexical ,geval")
    assert [(s.name, s.options, s.label, s.folder) for s in specs] == [
        ("rouge", {}, "rouge", "rouge"),
        (
            "dcr",
            {"batch_size": "4", "gate": "lexical"},
            "dcr batch_size=4 gate=lexical",
            "dcr+batch_size=4+gate=lexical",
        ),
        ("geval", {}, "geval", "geval"),
    ]
    assert folder_name("ragas faithfulness") == "ragas+faithfulness"
    with pytest.raises(ValueError, match="twice"):
        parse_methods("rouge,rouge")
    with pytest.raises(ValueError, match=r"\+key=value"):
        parse_methods("dcr+batch_size")
    with pytest.raises(ValueError, match="no method"):
        parse_methods(" , ")
    assert parse_methods("none") == []  # the peers alone


@pytest.mark.parametrize(
    "args, message",
    [
        (["--method", "rouge", "--methods", "rouge"], "not both"),
        ([], "give --method NAME"),
        (["--method", "rouge", "--peers", "ragas"], "--peers goes with --methods"),
        (["--methods", "rouge,nosuchmethod"], "nosuchmethod"),
        (["--methods", "rouge", "--peers", "trulens"], "unknown peer"),
        (["--methods", "none"], "name them with --peers"),
    ],
)
def test_bad_method_lists_are_refused_clearly(tmp_path, args, message) -> None:
    write_items(tmp_path / "items.jsonl", 2)
    result = bench(tmp_path, {}, *args)
    assert result.exit_code == 2 and message in result.output
