"""FINAL's dev-split protocol: prompt-variant selection by FINAL F1 and the 2-step filter threshold by F1,
chosen on hand-built data with the scripted fake model and checked against brute force."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from halluscope.bench.calibration import selection_items
from halluscope.bench.datasets import Dataset
from halluscope.bench.judge import MatchReply
from halluscope.bench.runner import ITEMS_FILE, RUN_FILE, ItemStore, run_bench
from halluscope.llm import LLM, FakeModel
from halluscope.llm.fake import TEXT_REPLY
from halluscope.methods import get_method
from halluscope.methods.localize import FINAL_MARKER, Localize
from halluscope.methods.localize.prompts import LOCALIZE_PROMPTS
from halluscope.methods.localize.protocol import (
    PROTOCOL_DIR,
    VariantScore,
    best_f1_threshold,
    choose_variant,
    needs_selection,
)
from halluscope.records import Example, Finding, Report
from tests.conftest import fake_llm
from tests.prompt_data import fenced, user_text

# ------------------------------------------------------------------------------------------- thresholds


def _f1_at(labels: np.ndarray, scores: np.ndarray, t: float) -> float:
    """F1 of the inconsistent class (label 0), predicted when score < t, counted by hand."""
    pred = scores < t
    gold = labels == 0
    tp, fp, fn = int((pred & gold).sum()), int((pred & ~gold).sum()), int((~pred & gold).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def _every_cut(scores: np.ndarray) -> list[float]:
    u = np.unique(scores)
    return [float(u[0]) - 1.0, *((u[:-1] + u[1:]) / 2).tolist(), float(u[-1]) + 1.0]


@pytest.mark.parametrize("seed", range(25))
def test_best_f1_threshold_matches_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    labels = np.array([rng.randint(0, 1) for _ in range(n)])
    labels[0], labels[-1] = 0, 1  # both classes
    # few distinct values on some seeds, so that ties between cuts happen
    scores = np.array([round(rng.random(), 1 if seed % 2 else 4) for _ in range(n)])
    t, f1 = best_f1_threshold(labels.tolist(), scores.tolist())
    brute = {cut: _f1_at(labels, scores, cut) for cut in _every_cut(scores)}
    best = max(brute.values())
    assert f1 == pytest.approx(best) and _f1_at(labels, scores, t) == pytest.approx(best)
    # ties go to the cut that flags the fewest items
    fewest = min(int((scores < cut).sum()) for cut, v in brute.items() if v == pytest.approx(best))
    assert int((scores < t).sum()) == fewest


def test_best_f1_threshold_on_a_hand_built_case():
    labels = [0, 0, 1, 0, 1, 1]
    scores = [0.1, 0.3, 0.35, 0.5, 0.8, 0.9]
    # cuts: flag {0.1}: F1 .5; {..0.3}: .8; {..0.35}: 2*2/(4+1+1)=.667; {..0.5}: 2*3/(6+1)=.857; {..0.8}: .75
    t, f1 = best_f1_threshold(labels, scores)
    assert t == pytest.approx(0.65) and f1 == pytest.approx(6 / 7)
    assert best_f1_threshold([1, 1], [0.2, 0.4]) is None and best_f1_threshold([0], [0.3]) is None
    t, f1 = best_f1_threshold([0, 1], [0.7, 0.7])  # one score value: flag everything (F1 2/3) beats nothing
    assert t > 0.7 and f1 == pytest.approx(2 / 3)


# ------------------------------------------------------------------------------------------- variant choice


def test_choose_variant():
    v = lambda variant, final=None, item=None, unscored=0: VariantScore(  # noqa: E731
        variant=variant, final_f1=final, item_f1=item, n_unscored=unscored
    )
    assert choose_variant([v(1, 0.4, 0.9), v(2, 0.6, 0.1)]) == (2, "final_f1")  # FINAL F1 decides, not item F1
    assert choose_variant([v(1, 0.5, unscored=3), v(2, 0.5, unscored=1)]) == (2, "final_f1")  # tie: fewer unscored
    assert choose_variant([v(1, 0.5), v(2, 0.5)]) == (1, "final_f1")  # full tie: variant 1
    assert choose_variant([v(1, None, 0.2), v(2, None, 0.7)]) == (2, "item_f1")  # no judge
    assert choose_variant([v(1), v(2)]) == (1, "none")
    with pytest.raises(ValueError):
        choose_variant([])


def test_needs_selection():
    assert needs_selection(Localize(llm=fake_llm()))  # variant=auto by default
    assert not needs_selection(Localize(llm=fake_llm(), variant=1))
    assert not needs_selection(Localize(llm=fake_llm(), variant=2, filter="self"))
    assert needs_selection(Localize(llm=fake_llm(), variant=1, filter="rouge"))
    assert not needs_selection(Localize(llm=fake_llm(), variant=1, filter="rouge", filter_threshold=0.4))
    assert not needs_selection(get_method("rouge"))


def test_selection_items():
    exs = [Example(id=f"e{i}", source="s", target="t", split="dev" if i < 2 else "test") for i in range(5)]
    items, name = selection_items(Dataset("x", None, exs), exs)
    assert [e.id for e in items] == ["e0", "e1"] and "split dev" in name
    items, name = selection_items(Dataset("x", None, exs[2:]), exs[2:])
    assert [e.id for e in items] == ["e2", "e3", "e4"] and "in-sample" in name
    other = Dataset("final", "dev", [Example(id="d", source="s", target="t")])
    items, name = selection_items(Dataset("x", None, exs), exs, other)
    assert [e.id for e in items] == ["d"] and name == "final:dev"


# ------------------------------------------------------------------------------------------- through the bench

# FINAL-like items: each inconsistent target changes one word of its source; gold descriptions name it.
ITEMS = [
    (
        "a",
        "Alice founded Acme in 2001 in Paris.",
        "Alice founded Acme in 1999 in Paris.",
        ["The summary gives the year 1999, but the source says 2001."],
    ),
    (
        "b",
        "Bob sold 40 cars in May at the fair.",
        "Bob sold 50 cars in May at the fair.",
        ["The summary says 50 cars were sold; the source says 40."],
    ),
    ("c", "The museum opened in June after repairs.", "The museum opened in June after repairs.", []),
    (
        "d",
        "Cleo swam 5 km on Sunday with her club.",
        "Cleo swam 5 km on Monday with her club.",
        ["Monday is wrong: the source says Sunday."],
    ),
]
WRONG = {"a": "1999", "b": "50", "d": "Monday"}


def _examples() -> list[Example]:
    return [Example(id=i, source=s, target=t, descriptions=d, label=0 if d else 1, split="dev") for i, s, t, d in ITEMS]


def _variant(messages) -> int:
    """The localize prompt variant a request was rendered from: the chain-of-thought template that, given the
    request's fenced source and target, renders the same user message (no instruction wording is searched)."""
    values = {"source": fenced(messages, "source"), "target": fenced(messages, "target")}
    user = user_text(messages)
    found = [v for v in (1, 2) if LOCALIZE_PROMPTS[("cot", False, v)].render(**values)[-1]["content"] == user]
    assert len(found) == 1, "the request is neither localize chain-of-thought variant"
    return found[0]


def _localizer(variant_two_finds: bool, variant_one_finds: str = "wrong"):
    """A script keyed by reply type: variant 2's requests get the right descriptions; variant 1's get
    ``variant_one_finds``: ``wrong`` descriptions (about words that are fine) or ``nothing``."""

    def respond(messages):
        target = fenced(messages, "target")
        item = next(i for i, _, t, _ in ITEMS if t == target)
        v2 = _variant(messages) == 2
        if item not in WRONG:
            found = []
        elif v2 and variant_two_finds:
            found = [f'The text says "{WRONG[item]}", which the source contradicts.']
        elif not v2 and variant_one_finds == "wrong":
            first = target.split()[0]
            found = [f'The text names "{first}", which the source does not mention.']
        else:
            found = []
        return f"Checked each statement.\n{FINAL_MARKER}\n{json.dumps({'inconsistencies': found})}"

    return {TEXT_REPLY: respond}  # the chain-of-thought localizer asks for free text


def _judge(messages):
    """Matches a candidate to G1 when the word it quotes appears in the reference description."""
    reference = fenced(messages, "gold")
    candidates = re.findall(r"^P(\d+)\. (.*)$", fenced(messages, "predicted"), re.M)
    matches = {}
    for number, text in candidates:
        quoted = re.search(r'"([^"]+)"', text)
        matches[f"P{number}"] = "G1" if quoted and quoted.group(1) in reference else None
    return json.dumps({"reasoning": "compared quoted words", "matches": matches})


JUDGE = {MatchReply: _judge}


async def test_bench_picks_the_variant_with_the_better_final_f1_and_records_it(tmp_path):
    model = FakeModel(by_reply=_localizer(variant_two_finds=True))
    judge_model = FakeModel(by_reply=JUDGE, name="judge")
    method = Localize(llm=LLM(model, cache=None))
    out = tmp_path / "run"
    results = await run_bench(
        method,
        Dataset("final", "dev", _examples()),
        out,
        judge=LLM(judge_model, cache=None),
        progress=False,
        n_bootstrap=0,
    )
    protocol = results["final_protocol"]
    by_variant = {c["variant"]: c for c in protocol["variant"]["candidates"]}
    assert by_variant[2]["final_f1"] == 1.0 and by_variant[1]["final_f1"] == 0.0
    # the selection's cost is recorded: one localizer call per item and variant; the judge asked where both exist
    assert [by_variant[v]["usage"]["calls"] for v in (1, 2)] == [4, 4]
    assert [by_variant[v]["usage"]["judge_calls"] for v in (1, 2)] == [3, 3]
    assert protocol["variant"]["chosen"] == 2 and protocol["variant"]["criterion"] == "final_f1"
    assert protocol["overlap"] == 4 and "in-sample" in protocol["selected_on"]  # no other split: labelled so
    # the run itself used variant 2, and says so
    assert results["method_options"]["variant"] == 2
    assert results["prompt_version"].startswith("localize_cot_v2@")
    assert results["metrics"]["final_matching"]["f1"]["value"] == 1.0
    identity = json.loads((out / RUN_FILE).read_text())
    assert identity["final_protocol"]["variant"] == 2 and identity["method_options"]["variant"] == 2
    assert "prompt variant (cot): **2** by FINAL F1 (the paper's criterion)" in (out / "results.md").read_text()
    assert (out / PROTOCOL_DIR).is_dir()
    # a re-run repeats no LLM call: the selection runs resume like any bench run
    calls, judged = len(model.requests), len(judge_model.requests)
    again = await run_bench(
        Localize(llm=LLM(model, cache=None)),
        Dataset("final", "dev", _examples()),
        out,
        judge=LLM(judge_model, cache=None),
        progress=False,
        n_bootstrap=0,
    )
    assert again["final_protocol"]["variant"]["chosen"] == 2
    assert (len(model.requests), len(judge_model.requests)) == (calls, judged)


async def test_without_a_judge_the_variant_is_chosen_by_item_f1(tmp_path):
    model = FakeModel(by_reply=_localizer(variant_two_finds=True, variant_one_finds="nothing"))
    results = await run_bench(
        Localize(llm=LLM(model, cache=None), style="cot"),
        Dataset("final", "dev", _examples()),
        tmp_path / "r",
        judge=None,
        progress=False,
        n_bootstrap=0,
    )
    variant = results["final_protocol"]["variant"]
    assert variant["criterion"] == "item_f1" and variant["chosen"] == 2
    assert {c["variant"]: c["item_f1"] for c in variant["candidates"]} == {1: 0.0, 2: 1.0}
    assert all(c["final_f1"] is None for c in variant["candidates"])


async def test_when_no_selection_item_is_scored_variant_1_is_kept_and_the_note_says_why(tmp_path):
    model = FakeModel(default="I looked at the text and it seems fine to me.")  # never the Final Output line
    judge_model = FakeModel(by_reply=JUDGE, name="judge")
    results = await run_bench(
        Localize(llm=LLM(model, cache=None)),
        Dataset("final", "dev", _examples()),
        tmp_path / "r",
        judge=LLM(judge_model, cache=None),
        progress=False,
        n_bootstrap=0,
    )
    variant = results["final_protocol"]["variant"]
    assert variant["criterion"] == "none" and variant["chosen"] == 1
    assert "no item scored" in variant["note"] and "4/4 with variant 1, 4/4 with variant 2" in variant["note"]
    assert results["n_unscored"] == 4 and not judge_model.requests


async def test_fixed_variant_runs_no_selection(tmp_path):
    model = FakeModel(by_reply=_localizer(variant_two_finds=True))
    results = await run_bench(
        Localize(llm=LLM(model, cache=None), variant=1),
        Dataset("final", "dev", _examples()),
        tmp_path / "r",
        judge=None,
        progress=False,
        n_bootstrap=0,
    )
    assert results["final_protocol"] is None and len(model.requests) == 4
    assert not (tmp_path / "r" / PROTOCOL_DIR).exists()


# Consistent targets copy their source; inconsistent ones change words, so ROUGE precision separates them,
# but not perfectly (item "f" is a consistent paraphrase, item "g" an inconsistent near-copy).
FILTER_ITEMS = [
    ("a", "Alice founded Acme in 2001 in Paris.", "Alice founded Acme in 1999 in Rome.", 0),
    ("b", "Bob sold 40 cars in May at the fair.", "Bob bought 50 trucks in June.", 0),
    ("c", "The museum opened in June after repairs.", "The museum opened in June after repairs.", 1),
    ("d", "Cleo swam 5 km on Sunday with her club.", "Cleo swam 5 km on Sunday with her club.", 1),
    ("e", "Dan painted the red door on Friday morning.", "Dan painted the red door on Friday morning.", 1),
    ("f", "Eve baked bread for the village school.", "Eve made loaves for the school in the village.", 1),
    ("g", "Finn read two books during the long holiday.", "Finn read three books during the long holiday.", 0),
    ("h", "Gus planted tomatoes in the back garden.", "Gus planted roses beside a lake in spring.", 0),
]


async def test_filter_threshold_is_chosen_on_dev_by_f1(tmp_path):
    examples = [Example(id=i, source=s, target=t, label=lab, split="dev") for i, s, t, lab in FILTER_ITEMS]
    llm = fake_llm(default=f"Checked.\n{FINAL_MARKER}\n" + json.dumps({"inconsistencies": ['"x" is wrong.']}))
    method = Localize(llm=llm, variant=1, filter="rouge")
    out = tmp_path / "r"
    results = await run_bench(method, Dataset("toy", None, examples), out, judge=None, progress=False, n_bootstrap=0)
    chosen = results["final_protocol"]["filter_threshold"]
    assert chosen["criterion"] == "dev_f1" and chosen["method"] == "rouge" and chosen["n"] == 8
    assert results["final_protocol"]["variant"] is None  # variant fixed: nothing else chosen
    # brute force over every cut of the filter's own scores on the dev items
    store = ItemStore(next((out / PROTOCOL_DIR).iterdir()) / "filter-rouge" / ITEMS_FILE).load()
    scores = np.array([store[e.id].score for e in examples])
    labels = np.array([e.label for e in examples])
    best = max(_f1_at(labels, scores, cut) for cut in _every_cut(scores))
    assert chosen["f1"] == pytest.approx(best) and _f1_at(labels, scores, chosen["threshold"]) == pytest.approx(best)
    assert chosen["threshold"] != chosen["default_threshold"]
    assert _f1_at(labels, scores, chosen["default_threshold"]) < best  # the method's default is worse here
    # the run used that threshold: each item's filter decision is score >= threshold
    assert results["method_options"]["filter_threshold"] == chosen["threshold"]
    reports = ItemStore(out / ITEMS_FILE).load()
    for e in examples:
        info = reports[e.id].details["filter"]
        assert info["threshold"] == chosen["threshold"]
        assert info["consistent"] == (info["score"] >= chosen["threshold"])


async def test_one_class_dev_items_keep_the_methods_default_threshold(tmp_path):
    examples = [Example(id=i, source=s, target=t, label=1) for i, s, t, lab in FILTER_ITEMS if lab == 1]
    method = Localize(
        llm=fake_llm(default=f"{FINAL_MARKER}\n" + json.dumps({"inconsistencies": []})), variant=2, filter="rouge"
    )
    results = await run_bench(
        method, Dataset("toy", None, examples), tmp_path / "r", judge=None, progress=False, n_bootstrap=0
    )
    chosen = results["final_protocol"]["filter_threshold"]
    assert chosen["criterion"] == "method_default" and chosen["threshold"] == 0.5 and "one class" in chosen["reason"]
    assert results["method_options"]["filter_threshold"] == 0.5


async def test_selection_on_another_dataset_is_recorded_as_separate(tmp_path):
    model = FakeModel(by_reply=_localizer(variant_two_finds=True, variant_one_finds="nothing"))
    dev = Dataset("final", "dev", _examples())
    test = Dataset("final", "test", [e.model_copy(update={"id": f"t-{e.id}", "split": "test"}) for e in _examples()])
    results = await run_bench(
        Localize(llm=LLM(model, cache=None)),
        test,
        tmp_path / "r",
        judge=None,
        progress=False,
        n_bootstrap=0,
        select_on=dev,
    )
    protocol = results["final_protocol"]
    assert protocol["selected_on"] == "final:dev" and protocol["n_selection"] == 4 and protocol["overlap"] == 0
    assert protocol["variant"]["chosen"] == 2 and results["method_options"]["variant"] == 2


async def test_the_run_reuses_the_chosen_variants_replies_from_the_cache(tmp_path):
    from halluscope.llm import ResponseCache

    model = FakeModel(by_reply=_localizer(variant_two_finds=True, variant_one_finds="nothing"))
    llm = LLM(model, cache=ResponseCache(tmp_path / "cache.sqlite"))
    results = await run_bench(
        Localize(llm=llm),
        Dataset("final", "dev", _examples()),
        tmp_path / "r",
        judge=None,
        progress=False,
        n_bootstrap=0,
    )
    assert results["method_options"]["variant"] == 2
    assert len(model.requests) == 8  # 4 items x 2 variants; the run's own 4 calls were cache hits
    assert results["usage"]["cache_hits"] == 4 and results["usage"]["calls"] == 0


async def test_select_holdout_chooses_on_items_the_run_does_not_score(tmp_path):
    model = FakeModel(by_reply=_localizer(variant_two_finds=True))
    judge_model = FakeModel(by_reply=JUDGE, name="judge")
    results = await run_bench(
        Localize(llm=LLM(model, cache=None)),
        Dataset("final", "dev", _examples()),
        tmp_path / "run",
        judge=LLM(judge_model, cache=None),
        progress=False,
        n_bootstrap=0,
        select_holdout=0.5,
    )
    protocol = results["final_protocol"]
    assert protocol["overlap"] == 0 and protocol["n_selection"] == 2 and "held-out" in protocol["selected_on"]
    assert results["n"] == 2  # only the other half is scored
    fm = results["metrics"]["final_matching"]
    assert fm["judge_model"] == "judge" and fm["judge_is_evaluated_model"] is False
    assert fm["f1"]["coverage"]["total"] == 2 and "f1_all" in fm


async def test_final_matching_counts_an_unscored_item_as_no_match(tmp_path):
    from halluscope.bench.builtin_suites import final_matching_suite
    from halluscope.bench.suites import SuiteContext

    exs = [e for e in _examples() if e.descriptions][:2]
    found = Report(method="localize", score=0.5, findings=[Finding(description=f'The text says "{WRONG[exs[0].id]}".')])
    reports = [found, Report(method="localize", unscored_reason="no Final Output line")]
    ctx = SuiteContext(
        out_dir=tmp_path,
        method="localize",
        model="fake",
        dataset="final",
        judge=LLM(FakeModel(by_reply=JUDGE, name="fake"), cache=None),
        n_bootstrap=0,
    )
    res = await final_matching_suite(exs, reports, ctx)
    m = res.metrics
    assert m["recall"]["value"] == 1.0 and m["recall_all"]["value"] == 0.5
    assert m["judge_is_evaluated_model"] is True and "(the evaluated model judges itself)" in res.tables[0][0]
