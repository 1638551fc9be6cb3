"""``halluscope reproduce``: the papers' numbers load and validate, the table puts them beside ours, rows that
cannot be computed say why, and a re-run resumes without a single LLM call. Offline: scripted fake model and
the model-free ROUGE rows."""

from __future__ import annotations

import json
import re

import pytest
from scipy import stats
from typer.testing import CliRunner

from halluscope.bench.datasets import write_examples
from halluscope.bench.judge import MatchReply
from halluscope.bench.reproduce import (
    PAPERS,
    PROTOCOLS,
    PaperResults,
    ReproduceContext,
    ReproduceError,
    get_protocol,
    load_paper_results,
    run_reproduce,
)
from halluscope.bench.reproduce.core import main_table, select_rows
from halluscope.cli.main import app
from halluscope.config import Config
from halluscope.llm import LLM, FakeModel
from halluscope.llm.fake import TEXT_REPLY
from halluscope.methods.localize import FINAL_MARKER, HintedLocalizationReply, LocalizationReply
from halluscope.records import Example
from tests.prompt_data import fenced

HEADER = (
    "| row | metric | paper | ours, all items [95% CI] | ours, scored items | coverage | judge | "
    "calls / tokens per item | note |"
)


# --- the published numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("paper", PAPERS)
def test_paper_results_load_and_every_row_name_matches_a_protocol_row(paper):
    results = load_paper_results(paper)
    protocol = get_protocol(paper)
    protocol_rows = {r.paper_row for r in protocol.rows}
    assert set(results.rows()) <= protocol_rows, "a paper row no protocol row shows"
    for row in protocol.rows:
        if row.method is None or not row.analogue:
            # every metric the row shows has a published number for that row, or the row has none at all
            found = [m.key for m in row.metrics if results.lookup(row.paper_row, m.key)]
            assert found or row.paper_row not in results.rows(), (row.id, row.paper_row)


@pytest.mark.parametrize("paper", PAPERS)
def test_every_metric_reads_a_key_its_suite_computes_and_every_paper_key_is_shown(paper):
    from halluscope.bench import suite_probe

    protocol = get_protocol(paper)
    results = load_paper_results(paper)
    shown: dict[str, set[str]] = {}  # paper row -> metric keys some protocol row shows for it
    for row in protocol.rows:
        for metric in row.metrics:
            if metric.suite == "probe_steps":
                assert metric.path[0] in suite_probe.METRIC_KEYS, (row.id, metric.path)
        shown.setdefault(row.paper_row, set()).update(m.key for m in row.metrics)
    for entry in results.entries:
        assert set(entry.values) <= shown[entry.row], (entry.row, entry.table, set(entry.values) - shown[entry.row])


def test_paper_numbers_are_transcribed_with_their_source():
    dove = load_paper_results("dove").lookup("DoveScore", "auc_average")
    assert (dove.value, dove.printed, dove.model, dove.table) == (0.6525, 65.25, "gpt-4o-mini-2024-07-18", "Table 4")
    final = load_paper_results("final")
    assert final.lookup("E2E CoT", "f1").value == 0.59  # GPT-4o, the reference model
    assert final.lookup("E2E CoT", "f1", model="claude-3.5-sonnet-20241022").value == 0.67
    assert final.lookup("Oracle + CoT&Hint", "recall", model="gemma-3-12b").table == "Table 7"
    dcr = load_paper_results("dcr")
    assert dcr.lookup("DCE-AMC", "pearson").value == 0.699
    assert dcr.lookup("DCE-AMC", "pearson", model="gpt-4").table == "Table 5"
    assert dcr.lookup("DCR with RAI (sentence level)", "n_flagged").display() == "111"
    bound = load_paper_results("probe").lookup("Direct prompting", "recall")
    assert (bound.qualifier, bound.display()) == ("<", "< 0.400")
    assert load_paper_results("longdoc").lookup("MiniCheck", "mean_negated").value == 0.30
    assert load_paper_results("dove").lookup("DoveScore", "f1") is None


def test_paper_results_validation_rejects_bad_numbers():
    good = json.loads(json.dumps(load_paper_results("dcr").model_dump(mode="json")))
    PaperResults.model_validate(good)
    bad_value = json.loads(json.dumps(good))
    bad_value["entries"][0]["values"]["pearson"] = 57.6  # a percentage in a fraction file
    with pytest.raises(ValueError, match="not a fraction"):
        PaperResults.model_validate(bad_value)
    bad_table = json.loads(json.dumps(good))
    bad_table["entries"][0]["table"] = "Table 9"
    with pytest.raises(ValueError, match="not described"):
        PaperResults.model_validate(bad_table)
    with pytest.raises(KeyError):
        load_paper_results("nope")


def test_row_selection_embedded_subset_and_errors():
    final = get_protocol("final")
    rows, why = select_rows(final, None, embedded=True)
    assert [r.id for r in rows] == ["zero_shot"] and "embedded" in why
    rows, _ = select_rows(final, None, embedded=False)
    assert "trueteacher_cot" not in {r.id for r in rows} and len(rows) == 8  # paper-only rows never run
    rows, _ = select_rows(final, ["cot,oracle_cot"], embedded=True)
    assert [r.id for r in rows] == ["cot", "oracle_cot"]
    rows, _ = select_rows(get_protocol("dove"), ["rouge"], embedded=True)  # a method name picks all its rows
    assert [r.id for r in rows] == ["rouge1", "rouge2", "rougeL"]
    with pytest.raises(ReproduceError, match="no row or method 'bogus'"):
        select_rows(final, ["bogus"], embedded=False)
    assert set(PROTOCOLS) == set(PAPERS)


# --- runs with the scripted fake model ------------------------------------------------------------------------


def _qags(tmp_path):
    human = [0.0, 0.3, 0.6, 1.0, 0.5]
    examples = [
        Example(
            id=f"q{i}",
            source=f"Source {i}: the council met on Tuesday and approved the budget.",
            target=f"Claim number {i}. The council met.",
            human_score=h,
        )
        for i, h in enumerate(human)
    ]
    path = tmp_path / "qags_tiny.jsonl"
    write_examples(path, examples)
    return path, human


def _rating(messages) -> str:
    i = int(re.match(r"Claim number (\d)\.", fenced(messages, "target")).group(1))
    return str([1, 2, 3, 5, 4][i])


# the reproduce rows use G-Eval's score-only form (prompt=paper): a free-text request; anything else (DCR's
# prompts) gets no usable reply
RATINGS = {TEXT_REPLY: _rating}
UNUSABLE = "I cannot answer that."


def _ctx(tmp_path, model: FakeModel, **kw) -> ReproduceContext:
    return ReproduceContext(
        out_dir=tmp_path / "out",
        config=Config(cache=False, max_concurrency=1),
        progress=False,
        llm=LLM(model, cache=None, max_concurrency=1),
        **kw,
    )


async def test_dcr_protocol_table_paper_column_unscored_row_and_resume(tmp_path):
    path, human = _qags(tmp_path)
    with pytest.raises(ReproduceError, match="top_kk belong to none of the selected rows' methods"):
        await run_reproduce(
            get_protocol("dcr"),
            _ctx(tmp_path, FakeModel(), dataset=str(path)),
            methods=["geval"],
            options={"top_kk": 1},
            echo=lambda _: None,
        )
    first = FakeModel(by_reply=RATINGS, default=UNUSABLE)
    result = await run_reproduce(
        get_protocol("dcr"),
        _ctx(tmp_path, first, dataset=str(path)),
        methods=["geval", "dcr"],
        n_bootstrap=50,
        echo=lambda _: None,
    )
    geval, dcr = result["rows"]
    assert [m["key"] for m in geval["metrics"]] == ["pearson", "spearman", "kendall"]
    scores = [(r - 1) / 4 for r in [1, 2, 3, 5, 4]]
    expected = {
        "pearson": stats.pearsonr(scores, human).statistic,
        "spearman": stats.spearmanr(scores, human).statistic,
        "kendall": stats.kendalltau(scores, human).statistic,
    }
    for m in geval["metrics"]:
        assert m["ours"]["value"] == pytest.approx(expected[m["key"]])
        assert m["ours"]["low"] is not None and m["ours"]["n"] == 5 and m["reason"] is None
        assert m["paper"]["model"] == "gpt-3.5-turbo" and m["paper"]["table"] == "Table 2"
    assert geval["metrics"][0]["paper"]["value"] == 0.477
    assert geval["cost"]["calls_per_item"] == 1.0 and geval["n_unscored"] == 0
    # DCR's replies were unusable: every metric says why, none is a number
    assert dcr["status"] == "unscored" and dcr["n_unscored"] == 5
    assert all(m["ours"] is None and m["reason"].startswith("all 5 items unscored") for m in dcr["metrics"])
    assert dcr["metrics"][0]["paper"]["value"] == 0.699  # the paper column is filled all the same

    table = main_table(result).splitlines()
    assert table[0] == HEADER and len(table) == 2 + 6
    assert table[2].startswith(
        f"| G-Eval (geval) | Pearson r | 0.477 (gpt-3.5-turbo, Table 2) | {expected['pearson']:.3f} ["
    )
    assert "| DCE-AMC (dcr) | Kendall tau | 0.596 (gpt-3.5-turbo, Table 2) | cannot compute | - | 0/5 | - |" in table[7]
    assert "| 5/5 |" in table[2]  # coverage beside every value
    md = (tmp_path / "out" / "reproduce.md").read_text()
    assert "## Paper rows halluscope does not implement" in md and "| BERTScore |" in md
    assert "`improve`" in md  # rows not run are listed
    saved = json.loads((tmp_path / "out" / "reproduce.json").read_text())
    assert saved["rows"][0]["metrics"] == geval["metrics"]
    assert [r["id"] for r in saved["paper_only_rows"]] == ["bertscore", "moverscore", "unieval"]

    # a re-run resumes from items.jsonl: no request reaches the model, the numbers are the same
    second = FakeModel()  # no script: any request would raise
    again = await run_reproduce(
        get_protocol("dcr"),
        _ctx(tmp_path, second, dataset=str(path)),
        methods=["geval", "dcr"],
        n_bootstrap=50,
        echo=lambda _: None,
    )
    assert second.requests == []
    assert again["rows"][0]["metrics"] == geval["metrics"]
    assert again["rows"][0]["cost"]["calls_this_run"] == 0


_FOUND = json.dumps({"inconsistencies": ['The TEXT says "Monday", but the SOURCE says the vote was on Tuesday.']})
FINAL_SCRIPT = {
    MatchReply: json.dumps({"reasoning": "same error", "matches": {"P1": "G1"}}),  # the matching judge
    LocalizationReply: _FOUND,  # zero-shot localization
    HintedLocalizationReply: _FOUND,
    TEXT_REPLY: f"The day differs.\n{FINAL_MARKER}\n{_FOUND}",  # chain of thought: reasoning, then the answer
}


async def test_final_protocol_matches_with_the_judge_and_resumes(tmp_path):
    examples = [
        Example(
            id="f1",
            source="The vote was held on Tuesday.",
            target="The vote was on Monday.",
            descriptions=["The day of the vote is wrong: it was Tuesday."],
            label=0,
        ),
        Example(id="f2", source="The vote was held on Tuesday.", target="The vote was held.", descriptions=[], label=1),
    ]
    path = tmp_path / "final_tiny.jsonl"
    write_examples(path, examples)
    model = FakeModel(by_reply=FINAL_SCRIPT)
    result = await run_reproduce(
        get_protocol("final"),
        _ctx(tmp_path, model, dataset=str(path)),
        methods=["zero_shot", "oracle_cot_hint"],
        n_bootstrap=0,
        echo=lambda _: None,
    )
    zero = {m["key"]: m for m in result["rows"][0]["metrics"]}
    # one gold matched; two predictions (one on the consistent item): R = 1, P = 1/2, F1 = 2/3
    assert zero["recall"]["ours"]["value"] == 1.0
    assert zero["precision"]["ours"]["value"] == 0.5
    assert zero["f1"]["ours"]["value"] == pytest.approx(2 / 3)
    assert zero["f1"]["paper"]["display"] == "0.470" and zero["f1"]["paper"]["cite"] == "gpt-4o-2024-11-20, Table 4"
    assert result["rows"][0]["cost"]["judge_calls_per_item"] == 0.5  # the judge is asked only where both lists exist
    assert result["judge_model"] == "fake"
    # the oracle localizes only the inconsistent item: one prediction, matched
    oracle = {m["key"]: m["ours"]["value"] for m in result["rows"][1]["metrics"]}
    assert oracle == {"recall": 1.0, "precision": 1.0, "f1": 1.0}
    assert model.requests  # (the bench also picks FINAL's prompt variant on the items: more calls than items)
    silent = FakeModel()
    again = await run_reproduce(
        get_protocol("final"),
        _ctx(tmp_path, silent, dataset=str(path)),
        methods=["zero_shot", "oracle_cot_hint"],
        n_bootstrap=0,
        echo=lambda _: None,
    )
    assert silent.requests == []  # localizations, variant selection and judge matches all resume
    assert [r["metrics"] for r in again["rows"]] == [r["metrics"] for r in result["rows"]]


def _stories(tmp_path, n_sentences: int):
    sentences = [
        "Ann found a map.",
        "She crossed the river.",
        "She met a guard.",
        "The guard let her pass.",
        "She reached the tower.",
        "She opened the chest.",
    ]
    aside = "The old lighthouse keeper repainted the harbour wall every spring with blue paint from the village shop."
    examples = [
        Example(
            id=f"s{k}",
            source=" ".join(sentences) + f" {aside} The story ends here ({k}).",
            target=" ".join(sentences[:n_sentences]),
            group=f"story{k}",
            split="dev",
        )
        for k in range(3)
    ]
    path = tmp_path / f"stories{n_sentences}.jsonl"
    write_examples(path, examples)
    return path


async def test_dove_protocol_builds_montage_without_llm_and_explains_missing_difficulties(tmp_path):
    path = _stories(tmp_path, 4)  # 4 events: no integer inversion count lands in the medium or extreme bins
    ctx = ReproduceContext(out_dir=tmp_path / "out", config=Config(cache=False), dataset=str(path), progress=False)
    result = await run_reproduce(get_protocol("dove"), ctx, methods=["rougeL"], n_bootstrap=20, echo=lambda _: None)
    (row,) = result["rows"]
    metrics = {m["key"]: m for m in row["metrics"]}
    assert metrics["auc_easy"]["ours"]["value"] == 1.0  # ROUGE-L precision drops when the order is shuffled
    assert metrics["auc_easy"]["paper"]["value"] == pytest.approx(0.5391)
    assert metrics["auc_medium"]["ours"] is None
    assert "builder skipped medium lies: 3 x 4 events" in metrics["auc_medium"]["reason"]
    assert result["protocol"]["build"]["datasets"]["main"]["n"] == 9  # 3 truths + 3 easy + 3 hard
    assert any("reorder the target's sentences" in d for d in result["protocol"]["build"]["departures"])
    assert result["model"] is None  # no LLM row ran
    # resume: the built set and the row are reused as they are
    again = await run_reproduce(
        get_protocol("dove"),
        ReproduceContext(out_dir=tmp_path / "out", config=Config(cache=False), dataset=str(path), progress=False),
        methods=["rougeL"],
        n_bootstrap=20,
        echo=lambda _: None,
    )
    assert again["rows"][0]["metrics"] == row["metrics"]
    # a parts line cut short by a crash is dropped, that base item rebuilt, and the file left clean
    parts = tmp_path / "out" / "data" / "montage.parts.jsonl"
    lines = parts.read_text().splitlines()
    parts.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])
    await run_reproduce(
        get_protocol("dove"),
        ReproduceContext(out_dir=tmp_path / "out", config=Config(cache=False), dataset=str(path), progress=False),
        methods=["rougeL"],
        n_bootstrap=20,
        echo=lambda _: None,
    )
    assert parts.read_text().splitlines()[:2] == lines[:2]
    assert sorted(parts.read_text().splitlines()) == sorted(lines)
    # a different build in the same folder is refused, not mixed in
    other = ReproduceContext(
        out_dir=tmp_path / "out",
        config=Config(cache=False),
        dataset=str(path),
        progress=False,
        build_options={"max_events": 3},
    )
    with pytest.raises(Exception, match="built differently"):
        await run_reproduce(get_protocol("dove"), other, methods=["rougeL"], echo=lambda _: None)


async def test_longdoc_protocol_reports_unbuilt_perturbations(tmp_path, monkeypatch):
    # the stress suite's density bins: TF-IDF instead of loading sentence embeddings (seconds of imports)
    monkeypatch.setattr("halluscope.bench.suite_stress.EmbeddingDensity._embedding", lambda self, source, texts: None)
    path = _stories(tmp_path, 6)
    ctx = ReproduceContext(
        out_dir=tmp_path / "out",
        config=Config(cache=False),
        dataset=str(path),
        progress=False,
        build_options={"insert_with": "tfidf"},
    )
    result = await run_reproduce(get_protocol("longdoc"), ctx, methods=["rouge"], n_bootstrap=0, echo=lambda _: None)
    metrics = {m["key"]: m for m in result["rows"][0]["metrics"]}
    assert metrics["mean_original"]["ours"]["n"] == 3
    assert metrics["mean_original"]["paper"] is None
    assert metrics["mean_original"]["paper_missing"] == "row not in the paper"  # ROUGE: not one of the paper's rows
    assert metrics["mean_original"]["note"] is None  # over the original rows by design: no coverage note
    assert "not built (an LLM rewrite; --builder llm)" in metrics["mean_paraphrased"]["reason"]
    added = metrics["mean_added_source_sentence"]
    assert added["ours"] is not None or "skipped" in added["reason"]


def test_cli_reproduce_prints_paper_and_ours_columns(tmp_path):
    path = _stories(tmp_path, 6)
    out = tmp_path / "cli"
    res = CliRunner().invoke(
        app,
        [
            "reproduce",
            "dove",
            "--dataset",
            str(path),
            "--out",
            str(out),
            "--no-progress",
            "--bootstrap",
            "0",
            "--no-cache",
        ],
    )
    assert res.exit_code == 0, res.output
    assert HEADER in res.output and "| ROUGE-2 (rouge2) | AUC average | 0.547 (Table 3) |" in res.output
    assert "Rows not run (--methods all): geval, geval_weighted, summac_zs, factscore, dove" in res.output
    assert (out / "reproduce.json").is_file() and (out / "reproduce.md").is_file()
    bad = CliRunner().invoke(app, ["reproduce", "nope"])
    assert bad.exit_code == 2 and "unknown paper" in bad.output
    typo = CliRunner().invoke(
        app,
        [
            "reproduce",
            "dove",
            "--dataset",
            str(path),
            "--out",
            str(tmp_path / "typo"),
            "-b",
            "max_event=4",
            "--no-progress",
        ],
    )
    assert (
        typo.exit_code == 2 and "unknown montage builder option(s) max_event; valid: level, max_events" in typo.output
    )


async def test_probe_protocol_injects_donor_facts_and_shows_the_papers_bound(tmp_path):
    topics = [
        (
            "The bakery on Elm Street opened in 1990.",
            "The bakery on Elm Street opened its doors in 1990 and sells rye bread every morning.",
            "The owner bakes rye bread before dawn for the neighbours.",
        ),
        (
            "The river flooded the valley last spring.",
            "Heavy rain made the river flood the whole valley last spring.",
            "Farmers in the valley lost most of their early wheat crop.",
        ),
        (
            "The museum shows old maps of the harbour.",
            "The harbour museum displays a collection of very old maps.",
            "Visitors can see how the harbour looked three centuries ago.",
        ),
        (
            "The school choir won the regional contest.",
            "The school choir took first place at the regional singing contest.",
            "The choir practised twice a week for the whole autumn term.",
        ),
    ]
    examples = [
        Example(id=f"p{k}", source=f"{a} {b} {c}", target=f"{b} {c}", label=1, split="evaluation")
        for k, (a, b, c) in enumerate(topics)
    ]
    path = tmp_path / "faithful.jsonl"
    write_examples(path, examples)
    model = FakeModel(default=json.dumps({"inconsistencies": []}))
    result = await run_reproduce(
        get_protocol("probe"),
        _ctx(tmp_path, model, dataset=str(path), builder="no-llm", build_options={"complexities": [1]}),
        methods=["direct"],
        n_bootstrap=0,
        echo=lambda _: None,
    )
    build = result["protocol"]["build"]
    assert build["options"]["facts_from"] == "donor" and build["usage"]["calls"] == 0
    injected = [json.loads(x) for x in (tmp_path / "out" / "data" / "injected.jsonl").read_text().splitlines()]
    assert {e["difficulty"] for e in injected} == {"truth", "complexity-1"}
    sources = {x.id: x.source for x in examples}
    for e in (e for e in injected if e["difficulty"] == "complexity-1"):
        (span,) = e["gold_spans"]
        fact = e["target"][span["start"] : span["end"]].strip()
        donors = [x.target for x in examples if x.id != e["group"]]
        assert any(fact in d for d in donors) and fact not in sources[e["group"]]  # another summary's sentence
    recall = result["rows"][0]["metrics"][0]
    assert recall["ours"]["value"] == 0.0  # nothing was flagged
    assert recall["paper"]["display"] == "< 0.400" and "Figure 4b" in recall["paper"]["table"]
    assert any("other targets of the same dataset" in d for d in build["departures"])


async def test_probe_protocol_builds_self_gold_only_when_asked_and_labels_the_rows(tmp_path):
    from tests.test_inject import ITEM, gold_model

    # two faithful items; the second's extra sentence is the fact injected into the first
    extra = " A toll of one penny was charged."
    other = ITEM.model_copy(update={"id": "bridge2", "source": ITEM.source + extra, "target": ITEM.target + extra})
    path = tmp_path / "faithful.jsonl"
    write_examples(path, [ITEM, other])
    llm = gold_model("m", strict=False)
    ctx = ReproduceContext(
        out_dir=tmp_path / "out",
        config=Config(cache=False, max_concurrency=1),
        progress=False,
        llm=llm,
        dataset=str(path),
        builder="no-llm",
        build_options={"complexities": [1], "gold_evidence": "self", "gold_samples": 1},
    )
    result = await run_reproduce(get_protocol("probe"), ctx, methods=["probe"], n_bootstrap=0, echo=lambda _: None)
    build = result["protocol"]["build"]
    assert build["options"]["gold_evidence"] is True and any("SELF-BUILT GOLD" in d for d in build["departures"])
    assert result["rows"][0]["gold"]["built_by"] == "self"
    table = main_table(result)
    assert all(
        "[self-built gold]" in line
        and "self-built gold: built by the scored model" in line
        and "claim matching: lexical" in line
        for line in table.splitlines()[2:]
    )
    injected = [json.loads(x) for x in (tmp_path / "out" / "data" / "injected.jsonl").read_text().splitlines()]
    assert injected and all(e["meta"].get("gold_claims_complete") for e in injected)
    metrics = {m["key"]: m for m in result["rows"][0]["metrics"]}
    for key in ("decomposition_recall", "evidence_finding_partial", "evidence_finding_complete"):
        assert metrics[key]["ours"] is not None, (key, metrics[key]["reason"])  # no longer "cannot compute"
        assert metrics[key]["ours"]["coverage"]["total"] == len(injected)


def _probe_ctx(tmp_path, llm, build_options, gold_llms=()):
    from tests.test_inject import ITEM

    extra = " A toll of one penny was charged."
    other = ITEM.model_copy(update={"id": "bridge2", "source": ITEM.source + extra, "target": ITEM.target + extra})
    path = tmp_path / "faithful.jsonl"
    write_examples(path, [ITEM, other])
    return ReproduceContext(
        out_dir=tmp_path / "out",
        config=Config(cache=False, max_concurrency=1),
        progress=False,
        llm=llm,
        dataset=str(path),
        builder="no-llm",
        build_options={"complexities": [1], **build_options},
        gold_llms=list(gold_llms),
    )


async def test_probe_gold_from_named_models_and_every_row_names_its_claim_matching(tmp_path):
    from tests.test_inject import gold_model

    scored = gold_model("scored", strict=False)
    gold = [gold_model("gold-a", strict=False), gold_model("gold-b", strict=False)]
    ctx = _probe_ctx(tmp_path, scored, {}, gold)
    result = await run_reproduce(
        get_protocol("probe"), ctx, methods=["probe", "direct"], n_bootstrap=0, echo=lambda _: None
    )
    build = result["protocol"]["build"]
    assert build["gold"]["built_by"] == "named" and build["gold"]["models"] == [g.name for g in gold]
    assert build["options"]["gold_models"] == [g.name for g in gold]
    assert not any("SELF-BUILT" in d for d in build["departures"])
    probe, direct = result["rows"]
    assert probe["gold"]["built_by"] == "named" and probe["claim_matching"].startswith("lexical")
    assert direct["claim_matching"].startswith("none") and "gold" not in direct
    metrics = {m["key"]: m for m in probe["metrics"]}
    assert metrics["decomposition_recall"]["ours"] is not None
    lines = main_table(result).splitlines()[2:]
    assert lines and all("claim matching: " in line for line in lines)  # every PROBE row names it
    assert all("self-built" not in line for line in lines)
    assert any(f"gold built by {gold[0].name}, {gold[1].name}" in line for line in lines)


@pytest.mark.parametrize(
    "options,gold_names,needle",
    [
        ({"gold_evidence": "true"}, (), "--gold-model"),  # no gold model named: refused, not built by the scored one
        ({}, ("scored",), "is the scored model"),  # the scored model as the only voter
        ({"gold_voters": "others"}, ("scored", "gold-a"), "gold_voters=others"),  # the self-excluding variant
        ({"gold_voters": "some"}, ("gold-a",), "paper or others"),
        ({"gold_evidence": "self"}, ("gold-a",), "drop --gold-model"),
        ({"gold_evidence": "maybe"}, (), "true, false or self"),
    ],
)
async def test_probe_refuses_a_gold_the_scored_model_writes_unless_asked(tmp_path, options, gold_names, needle):
    from tests.test_inject import gold_model

    ctx = _probe_ctx(
        tmp_path, gold_model("scored", strict=False), options, [gold_model(n, strict=False) for n in gold_names]
    )
    with pytest.raises(ReproduceError, match=re.escape(needle)):
        await run_reproduce(get_protocol("probe"), ctx, methods=["probe"], n_bootstrap=0, echo=lambda _: None)


async def test_probe_gold_voters_may_include_the_scored_model_as_in_the_paper(tmp_path):
    from tests.test_inject import gold_model

    scored = gold_model("scored", strict=False)
    voters = [scored, gold_model("gold-a", strict=False)]
    ctx = _probe_ctx(tmp_path, scored, {}, voters)
    result = await run_reproduce(get_protocol("probe"), ctx, methods=["probe"], n_bootstrap=0, echo=lambda _: None)
    build = result["protocol"]["build"]
    assert build["gold"]["built_by"] == "named" and build["gold"]["models"] == [v.name for v in voters]
    assert scored.name in build["gold"]["models"]
    assert any("the 4 frontier models it then scored" in d for d in build["departures"])


def test_cli_gold_model_names_the_gold_builders_and_refuses_the_scored_model(tmp_path):
    from tests.test_inject import ITEM

    data = tmp_path / "faithful.jsonl"
    write_examples(data, [ITEM])
    script = tmp_path / "script.json"
    script.write_text("{}")  # no reply is ever asked for: every case below stops before an LLM call
    scored = f"fake:{script}"
    base = [
        "reproduce",
        "probe",
        "--model",
        scored,
        "--dataset",
        str(data),
        "--output",
        str(tmp_path / "out"),
        "--no-progress",
        "--no-cache",
    ]
    runner = CliRunner()
    other = runner.invoke(app, ["reproduce", "dcr", "--model", scored, "--gold-model", "x", "--no-cache"])
    assert other.exit_code != 0 and "reproduce probe only" in other.output
    unnamed = runner.invoke(app, [*base, "-b", "gold_evidence=true"])
    assert unnamed.exit_code != 0 and "--gold-model" in unnamed.output and "gold_evidence=self" in unnamed.output
    itself = runner.invoke(app, [*base, "--gold-model", scored])
    assert itself.exit_code != 0 and "is the scored model" in itself.output


async def test_probe_rows_name_semantic_claim_matching_where_embeddings_are(tmp_path, monkeypatch):
    from halluscope.retrieval import embeddings_available
    from tests.test_inject import gold_model

    if not embeddings_available():
        pytest.skip("the embeddings extra is not installed")
    monkeypatch.setenv("HALLUSCOPE_CLAIM_MATCHING", "semantic")
    ctx = _probe_ctx(tmp_path, gold_model("scored", strict=False), {}, [gold_model("gold-a", strict=False)])
    result = await run_reproduce(get_protocol("probe"), ctx, methods=["probe"], n_bootstrap=0, echo=lambda _: None)
    assert result["rows"][0]["claim_matching"].startswith("semantic (all-MiniLM-L6-v2")
    lines = main_table(result).splitlines()[2:]
    assert lines and all("claim matching: semantic" in line for line in lines)
