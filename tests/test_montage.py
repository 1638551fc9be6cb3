"""Montage-lie generator (DoveScore paper §3.1): difficulty bins, exact inversions, incremental lies, CLI."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter

import pytest
from typer.testing import CliRunner

from halluscope.cli.main import app
from halluscope.generators.montage import (
    CONSTRUCTION,
    DIFFICULTIES,
    MontageGenerator,
    parse_appended_story,
    parse_event_list,
    parse_paraphrase,
    plan_lies,
)
from halluscope.llm import LLM, FakeModel
from halluscope.permutations import DIFFICULTY_BINS, count_inversions
from halluscope.records import Example
from halluscope.text import ParseError, split_sentences
from tests.garble import garbled_replies
from tests.prompt_data import fenced

SOURCE = "A long story about Mia."
SENTENCES = [
    "Mia woke before dawn.",
    "She packed a small bag.",
    "The bus to the coast was late.",
    "Mia reached the harbour at noon.",
    "A fisherman offered her a ride.",
    "They crossed to the island.",
    "Mia found her grandmother's house empty.",
    "She waited on the porch until dark.",
]
TARGET = "\n".join(SENTENCES)


def run(coro):
    return asyncio.run(coro)


def test_plan_lies_hits_each_bin_exactly():
    plans, skipped = plan_lies(12, DIFFICULTIES, random.Random(1))
    assert not skipped and [p.difficulty for p in plans] == list(DIFFICULTIES)
    for plan in plans:
        low, high = DIFFICULTY_BINS[plan.difficulty]
        assert count_inversions(plan.permutation) == plan.inversions
        assert float(low) <= plan.shuffle_degree <= float(high)
        assert plan.shuffle_degree == plan.inversions / 66


def test_plan_lies_skips_bins_a_short_list_cannot_hit():
    plans, skipped = plan_lies(3, DIFFICULTIES, random.Random(0))  # C(3,2)=3: ShuffleD in {0, 1/3, 2/3, 1}
    assert [p.difficulty for p in plans] == ["hard"] and plans[0].inversions == 1
    assert set(skipped) == {"easy", "medium", "extreme"}
    assert "no integer inversion count" in skipped["easy"]
    with pytest.raises(ValueError):
        plan_lies(5, ["impossible"], random.Random(0))


def test_sentence_level_group():
    result = run(MontageGenerator(seed=3, level="sentence").generate(SOURCE, TARGET, "g1", split="dev"))
    truth, *lies = result.examples
    assert (truth.label, truth.difficulty, truth.group) == (1, "truth", "g1")
    assert truth.target == " ".join(SENTENCES)  # re-rendered like the lies: layout cannot leak the label
    assert truth.meta["inversions"] == 0 and truth.meta["events"] == SENTENCES
    assert [lie.difficulty for lie in lies] == list(DIFFICULTIES)
    for lie in lies:
        assert lie.label == 0 and lie.group == "g1" and lie.split == "dev" and lie.source == SOURCE
        perm = lie.meta["permutation"]
        assert lie.target == " ".join(SENTENCES[i] for i in perm)
        assert count_inversions(perm) == lie.meta["inversions"]
        low, high = DIFFICULTY_BINS[lie.difficulty]
        assert float(low) <= lie.meta["shuffle_degree"] <= float(high)
        assert Counter(s.text for s in split_sentences(lie.target)) == Counter(SENTENCES)
    assert not result.calls and not result.skipped
    # every row says it is not the paper's construction
    assert {e.meta["construction"] for e in result.examples} == {CONSTRUCTION["sentence"]}
    assert CONSTRUCTION["sentence"].startswith("sentence-level (not the paper's)")


def test_the_default_is_the_papers_event_level_construction():
    generator = MontageGenerator(LLM(FakeModel(by_reply=SCRIPT)))
    assert generator.level == "event" and generator.needs_llm
    result = run(generator.generate(SOURCE, "Mia's day.", "g"))
    assert len(result.examples) == 5 and len(result.calls) == 1 + 4 * (len(EVENTS) - 1)
    assert {e.meta["construction"] for e in result.examples} == {CONSTRUCTION["event"]}
    assert "not the paper's" not in CONSTRUCTION["event"]


def test_sentence_level_is_seeded_per_group():
    a = run(MontageGenerator(seed=3, level="sentence").generate(SOURCE, TARGET, "g1"))
    b = run(MontageGenerator(seed=3, level="sentence").generate(SOURCE, TARGET, "g1"))
    c = run(MontageGenerator(seed=4, level="sentence").generate(SOURCE, TARGET, "g1"))
    assert [e.target for e in a.examples] == [e.target for e in b.examples]
    assert [e.target for e in a.examples] != [e.target for e in c.examples]


def test_too_short_target_gives_no_group():
    result = run(MontageGenerator(level="sentence").generate(SOURCE, "Only one sentence here.", "g"))
    assert not result.examples and len(result.skipped) == 4


EVENTS = ["Mia woke up.", "Mia ate breakfast.", "Mia walked to school.", "Mia met Leo.", "Mia and Leo played chess."]


def is_decomposition(messages) -> bool:
    """Montage's three stages all ask for free text (reply type ``"text"``): the decomposition is the request that
    fences a ``target``, the append one fences the ``paragraph`` so far and the next ``event``, the paraphrase one
    the ``text`` to retell. The data each prompt fences tells them apart, never its wording."""
    return bool(fenced(messages, "target", ""))


def montage_reply(messages) -> str:
    """The events of :data:`EVENTS`; an append that tells the story so far, then the event; a flashback retelling."""
    if is_decomposition(messages):
        return json.dumps(EVENTS)
    if event := fenced(messages, "event", ""):
        return f"{fenced(messages, 'paragraph')} {event}"
    text = fenced(messages, "text")  # a paraphrase request (anything else fails the test: no such stage)
    return f"Original technique: chronological order\nChosen technique: flashback\nRewritten: In the end, {text}"


SCRIPT = {"text": montage_reply}


def test_event_level_builds_lies_incrementally():
    fake = FakeModel(by_reply=SCRIPT)
    generator = MontageGenerator(LLM(fake), level="event", seed=0)
    result = run(generator.generate(SOURCE, "Mia woke up, ate, walked to school, met Leo and played chess.", "g"))
    truth, *lies = result.examples
    assert truth.target.startswith("Mia woke up, ate") and truth.meta["events"] == EVENTS
    assert {lie.difficulty for lie in lies} == {"easy", "medium", "hard", "extreme"}
    for lie in lies:
        assert lie.target == " ".join(EVENTS[i] for i in lie.meta["permutation"])
    assert len(fake.requests) == 1 + 4 * (len(EVENTS) - 1)  # one call per appended event
    assert len(result.calls) == len(fake.requests)


def test_event_level_with_paraphrase():
    generator = MontageGenerator(LLM(FakeModel(by_reply=SCRIPT)), level="event", paraphrase=True)
    result = run(generator.generate(SOURCE, "Mia's day.", "g"))
    para = [e for e in result.examples if e.meta["variant"] == "paraphrase"]
    assert len(para) == 5 and all(e.group == "g:paraphrase" for e in para)
    assert all(e.target.startswith("In the end,") and e.meta["chosen_technique"] == "flashback" for e in para)
    assert {e.label for e in para} == {0, 1}


def test_failed_append_skips_the_lie_with_a_reason():
    lazy = FakeModel(by_reply={"text": lambda m: json.dumps(EVENTS) if is_decomposition(m) else "Sure!"})
    result = run(MontageGenerator(LLM(lazy), level="event").generate(SOURCE, "t", "g"))
    assert not result.examples
    assert len(result.skipped) == 4 and all("appending event" in s["reason"] for s in result.skipped)


def test_unparseable_decomposition_is_reported():
    result = run(MontageGenerator(LLM(FakeModel(default="???")), level="event").generate(SOURCE, "t", "g"))
    assert not result.examples and "decomposition" in result.skipped[0]["reason"]


def test_parsers_on_garbled_replies():
    for reply in garbled_replies(1000):
        for parse in (
            parse_event_list,
            lambda r: parse_appended_story(r, "Mia woke up.", "Mia ate."),
            parse_paraphrase,
        ):
            try:
                parse(reply)
            except ParseError as exc:
                assert str(exc)


def test_parser_forms():
    assert parse_event_list('```json\n["A left.", "B came."]\n```') == ["A left.", "B came."]
    assert parse_event_list("Here are the events:\n1. A left.\n2. B came.") == ["A left.", "B came."]
    assert parse_event_list('{"events": ["A left."]}') == ["A left."]
    assert (
        parse_appended_story("Updated story: Mia woke up. Mia ate.", "Mia woke up.", "Mia ate.")
        == "Mia woke up. Mia ate."
    )
    with pytest.raises(ParseError):
        parse_appended_story("Mia ate.", "Mia woke up.", "Mia ate.")
    with pytest.raises(ParseError):
        parse_paraphrase("Original technique: flashback\nRewritten:")


def test_cli_writes_harness_jsonl(tmp_path):
    data = tmp_path / "in.jsonl"
    item = {"id": "s1", "document": SOURCE, "plot_summaries": [TARGET, "Mia left. Mia came back."]}
    data.write_text(json.dumps(item) + "\n")
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "montage",
            str(data),
            "-O",
            str(out),
            "--source-field",
            "document",
            "--target-field",
            "plot_summaries",
            "-d",
            "easy",
            "-d",
            "extreme",
            "--level",
            "sentence",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [Example.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [(r.group, r.difficulty) for r in rows] == [("s1#0", "truth"), ("s1#0", "easy"), ("s1#0", "extreme")]
    assert all(r.meta["construction"] == CONSTRUCTION["sentence"] for r in rows)
    assert "skipped" in result.output  # the 2-sentence second summary cannot hit either bin
    assert "not the paper's construction" in result.output
    bad = CliRunner().invoke(app, ["generate", "montage", str(data), "-O", str(out), "--level", "sentence"])
    assert bad.exit_code != 0 and "lacks the field" in bad.output


def test_cli_default_writes_event_level_lies(tmp_path, monkeypatch):
    import halluscope.generators.montage as montage

    fake = FakeModel(by_reply=SCRIPT)
    monkeypatch.setattr(montage, "get_llm", lambda config: LLM(fake, cache=None))  # the model the CLI would build
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "s1", "source": SOURCE, "target": "Mia's day."}) + "\n")
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["generate", "montage", str(data), "-O", str(out)])
    assert result.exit_code == 0, result.output
    rows = [Example.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [r.difficulty for r in rows] == ["truth", *DIFFICULTIES]
    assert all(r.meta["level"] == "event" and r.meta["construction"] == CONSTRUCTION["event"] for r in rows)
    assert len(fake.requests) == 1 + 4 * (len(EVENTS) - 1)  # decomposition, then one call per appended event
    for lie in rows[1:]:
        assert lie.target == " ".join(EVENTS[i] for i in lie.meta["permutation"])
    assert "not the paper's" not in result.output


def test_squality_sentence_montage(data_dir):
    line = (data_dir / "squality" / "dev.jsonl").read_text().splitlines()[0]
    item = json.loads(line)
    result = run(
        MontageGenerator(seed=0, level="sentence").generate(item["document"], item["plot_summaries"][0], item["id"])
    )
    assert [e.difficulty for e in result.examples] == ["truth", *DIFFICULTIES]
    truth_sentences = Counter(result.examples[0].meta["events"])
    for lie in result.examples[1:]:
        assert Counter(result.examples[0].meta["events"][i] for i in lie.meta["permutation"]) == truth_sentences


def test_max_events_cuts_truth_and_lies_alike():
    result = run(MontageGenerator(seed=1, max_events=5, level="sentence").generate(SOURCE, TARGET, "g"))
    truth, *lies = result.examples
    assert truth.target == " ".join(SENTENCES[:5]) and truth.meta["max_events"] == 5
    assert all(sorted(lie.meta["permutation"]) == list(range(5)) for lie in lies)
    events = run(
        MontageGenerator(LLM(FakeModel(by_reply=SCRIPT)), level="event", max_events=4).generate(
            SOURCE, "Mia's day.", "g"
        )
    ).examples
    assert events[0].target == " ".join(EVENTS[:4])  # rebuilt incrementally from the kept events
    with pytest.raises(ValueError):
        MontageGenerator(max_events=1)


def test_event_level_on_garbled_replies_never_raises():
    """Garbled decompositions and appends: every lie is written or skipped with a reason, nothing escapes."""
    replies = iter(garbled_replies(1000))
    used = 0

    def garbled(messages):
        nonlocal used
        if is_decomposition(messages) and used % 3 == 0:
            used += 1
            return json.dumps(EVENTS)  # sometimes a valid decomposition, so the append path gets garbage too
        used += 1
        return next(replies, "")

    generator = MontageGenerator(LLM(FakeModel(by_reply={"text": garbled})), level="event", paraphrase=True)
    n = 0
    while used < 1000:
        result = run(generator.generate(SOURCE, "Mia's day.", f"g{n}"))
        n += 1
        assert all(s["reason"] for s in result.skipped)
        for ex in result.examples:
            assert ex.label in (0, 1) and ex.target.strip()
