"""Meaning-preserving perturbations: prompts, reply parsing and checks, skips, no-LLM insertion, CLI."""

from __future__ import annotations

import asyncio
import itertools
import json
import random

import pytest
from typer.testing import CliRunner

from halluscope.generators.perturb import (
    INSERT_PROMPT,
    ORIGINAL,
    PERTURBATIONS,
    REWRITE_PROMPTS,
    InsertSourceSentence,
    PerturbGenerator,
    candidate_sentences,
    check_rewrite,
    choose_unrelated_sentence,
    insert_at_boundary,
    parse_rewritten,
    verify_insertion,
)
from halluscope.llm import LLM, ContextOverflowError, FakeModel
from halluscope.records import Example
from halluscope.text import fence, fence_key, split_sentences
from halluscope.text.parsing import ParseError
from tests.conftest import fake_llm
from tests.garble import garbled_replies
from tests.prompt_data import fenced

SOURCE = (
    "Mara Voss ran the lighthouse on Keel Island for twenty years. Every winter the supply boat came twice. "
    "In 1952 a storm wrecked the boat on the northern reef. Mara rowed out alone and pulled three sailors "
    "from the water. The harbour council later gave her a silver medal for the rescue. "
    "Wild goats graze on the steep western cliffs of the island during the warm summer months. "
    "She kept the medal in a drawer and never spoke about that night."
)
TARGET = (
    "Mara Voss kept the Keel Island lighthouse for twenty years. When a storm wrecked the supply boat in "
    "1952, she rowed out alone and saved three sailors. The harbour council gave her a silver medal."
)
ORIG = Example(id="ex1", source=SOURCE, target=TARGET, split="dev", meta={"k": 1})

GOOD = {
    "paraphrased": (
        "For two decades Mara Voss was the keeper of the lighthouse on Keel Island. After the supply "
        "boat was wrecked by a storm in 1952, she went out by herself in a rowing boat and rescued "
        "three sailors. She received a silver medal from the harbour council."
    ),
    "simplified": (
        "Mara Voss kept the Keel Island lighthouse. She did this for twenty years. In 1952 a storm "
        "wrecked the supply boat. She rowed out alone. She saved three sailors. The harbour council "
        "gave her a silver medal."
    ),
    "synonym_replaced": (
        "Mara Voss tended the Keel Island lighthouse for twenty years. When a storm destroyed "
        "the supply boat in 1952, she rowed out alone and rescued three sailors. The harbour "
        "council awarded her a silver medal."
    ),
    "less_diverse": (
        "Mara Voss kept the Keel Island lighthouse for twenty years. When a storm broke the supply "
        "boat in 1952, she went out alone and got three sailors out. The harbour council gave her "
        "a silver medal."
    ),
    "negated": (
        "Mara Voss did not leave the Keel Island lighthouse for twenty years. When a storm wrecked the "
        "supply boat in 1952, she rowed out with nobody else and saved three sailors. The harbour "
        "council did not fail to give her a silver medal."
    ),
    "compressed": (
        "Mara Voss kept Keel Island lighthouse twenty years; in 1952 she alone rowed out and saved "
        "three sailors from the storm-wrecked supply boat, earning a silver medal."
    ),
}
# a phrase each perturbation's prompt must carry (what it asks for)
PROMPT_KEYS = {
    "paraphrased": "Paraphrase the text",
    "simplified": "easier to read",
    "synonym_replaced": "close synonyms",
    "less_diverse": "more repetitive vocabulary",
    "negated": "logically equivalent",
    "compressed": "more concisely",
}
REWRITES = [p for p in PERTURBATIONS if p in REWRITE_PROMPTS]


def wrap(text: str) -> str:
    return f"Here you go.\n<rewritten>\n{text}\n</rewritten>"


def run(coro):
    return asyncio.run(coro)


# --------------------------------------------------------------------------------------------- prompts


def test_seven_perturbations_each_with_a_template():
    assert len(PERTURBATIONS) == 7
    assert set(REWRITES) | {"added_source_sentence"} == set(PERTURBATIONS)
    names = {p.name for p in REWRITE_PROMPTS.values()} | {INSERT_PROMPT.name}
    assert len(names) == 7  # one distinct, overridable template each


@pytest.mark.parametrize("name", REWRITES)
def test_rewrite_prompt_renders_text_and_format(name):
    messages = REWRITE_PROMPTS[name].render(text=TARGET)
    assert messages[0]["role"] == "system" and "never what it says" in messages[0]["content"]
    user = messages[-1]["content"]
    assert TARGET in user and "<rewritten>" in user and "</rewritten>" in user
    assert PROMPT_KEYS[name].lower() in user.lower()
    assert REWRITE_PROMPTS[name].placeholders() == {"text"}


def test_insert_prompt_renders_source_and_summary():
    user = INSERT_PROMPT.render(text=TARGET, source=SOURCE)[-1]["content"]
    assert SOURCE in user and TARGET in user and "word for word" in user


def test_prompt_override_from_prompts_dir(tmp_path):
    from halluscope.config import Config

    (tmp_path / "perturb_paraphrased.txt").write_text("CUSTOM <rewritten> $text")
    llm = fake_llm(default=wrap(GOOD["paraphrased"]))
    gen = PerturbGenerator(llm, Config(prompts_dir=tmp_path), perturbations=["paraphrased"])
    group = run(gen.perturb_one(ORIG))
    fenced_text = fence("text", TARGET, fence_key({"text": TARGET}))  # the value is fenced as in every prompt
    assert llm.api.requests[0][-1]["content"] == f"CUSTOM <rewritten> {fenced_text}"
    assert group.rows[1].meta["prompt"] == "perturb_paraphrased@1+custom"


# --------------------------------------------------------------------------------------------- parsing


def test_parse_rewritten_takes_last_nonempty_block():
    assert parse_rewritten("<rewritten>a</rewritten> then <REWRITTEN> b c </REWRITTEN>") == "b c"
    assert parse_rewritten("<think>x</think><rewritten>\n```\nhello\n```\n</rewritten>") == "hello"


@pytest.mark.parametrize(
    "reply, why",
    [
        ("", "empty reply"),
        ("<rewritten>cut off here", "never closed"),
        ("<rewritten>   </rewritten>", "empty"),
        ("<rewritten>a <rewritten>b</rewritten>", "nested"),
    ],
)
def test_parse_rewritten_rejects_with_reason(reply, why):
    with pytest.raises(ParseError, match=why):
        parse_rewritten(reply)


def test_untagged_reply_is_taken_whole_unless_tags_are_required():
    assert parse_rewritten("Here is the paraphrased text:\nMara kept the light.") == "Mara kept the light."
    assert parse_rewritten('```\n"Mara kept the light."\n```') == "Mara kept the light."
    assert parse_rewritten("Note: this is it. Mara kept the light.") == "Note: this is it. Mara kept the light."
    with pytest.raises(ParseError, match="no <rewritten>"):
        parse_rewritten("just prose, no tags", require_tags=True)
    with pytest.raises(ParseError, match="without an opening"):
        parse_rewritten("text</rewritten>")


def test_copied_fence_tags_are_dropped_and_an_echo_is_still_a_copy():
    key = fence_key({"text": TARGET})
    assert (
        parse_rewritten(f"<rewritten>\n{fence('text', 'Mara kept the light.', key)}\n</rewritten>")
        == "Mara kept the light."
    )
    assert parse_rewritten(f"Here it is:\n{fence('text', 'Mara kept the light.', key)}") == "Mara kept the light."
    with pytest.raises(ParseError, match="empty"):
        parse_rewritten(f"<rewritten>{fence('text', '', key)}</rewritten>")
    llm = fake_llm(default=fence("text", TARGET, key))  # the fenced input sent back: no rewrite in it
    group = run(PerturbGenerator(llm, perturbations=["paraphrased"]).perturb_one(ORIG))
    assert group.rows == [] and "identical to the original" in group.skips[0].reason


def test_parse_rewritten_fuzz_only_returns_text_or_parse_error():
    replies = (
        garbled_replies(1200)
        + [f"<rewritten>{g}" for g in garbled_replies(200, seed=1)]
        + [f"<rewritten>{g}</rewritten>" for g in garbled_replies(200, seed=2)]
    )
    for reply in replies:
        try:
            text = parse_rewritten(reply)
        except ParseError as exc:
            assert str(exc)
        else:
            assert isinstance(text, str) and text.strip()


def test_checks():
    check_rewrite("paraphrased", TARGET, GOOD["paraphrased"])  # passes
    with pytest.raises(ParseError, match="identical"):
        check_rewrite("paraphrased", TARGET, "  " + TARGET.upper() + " ")
    with pytest.raises(ParseError, match="not shorter"):
        check_rewrite("compressed", TARGET, TARGET + " Indeed it was so.")
    with pytest.raises(ParseError, match="no negation"):
        check_rewrite("negated", TARGET, GOOD["synonym_replaced"])
    with pytest.raises(ParseError, match="length ratio"):
        check_rewrite("paraphrased", TARGET, "Mara saved sailors.")
    # what the tiny embedded model actually answered when asked to paraphrase TARGET
    hallucinated = (
        "Mara Voss, a 2015 British film, was awarded a silver medal for her bravery in the 1952 "
        "storm on Keel Island, where she saved three sailors."
    )
    with pytest.raises(ParseError, match="names not in the original were introduced: british"):
        check_rewrite("paraphrased", TARGET, hallucinated)
    with pytest.raises(ParseError, match="numbers not in the original were introduced: 2015"):
        check_rewrite("paraphrased", TARGET, hallucinated.replace("British", "british"))
    with pytest.raises(ParseError, match="names of the original are missing: island, keel"):
        check_rewrite("paraphrased", TARGET, GOOD["paraphrased"].replace("on Keel Island", "on the rock"))
    with pytest.raises(ParseError, match="not a paraphrase"):
        check_rewrite("paraphrased", TARGET, TARGET.replace("twenty years", "20 years"))
    with pytest.raises(ParseError, match="sentences did not get shorter"):
        check_rewrite("simplified", TARGET, GOOD["synonym_replaced"])
    check_rewrite("synonym_replaced", "The boat sank.", "The boat sank.", part=True)  # a part may stay as is
    check_rewrite("compressed", "In 1952 the boat sank.", "In 1952 the vessel went down.", part=True)


def test_untagged_rewrite_is_kept_and_marked():
    llm = fake_llm(f"Here is the text:\n{GOOD['paraphrased']}")
    group = run(PerturbGenerator(llm, perturbations=["paraphrased"]).perturb_one(ORIG))
    assert group.rows[1].target == GOOD["paraphrased"] and group.rows[1].meta["reply_format"] == "untagged"
    llm = fake_llm(GOOD["paraphrased"], GOOD["paraphrased"])
    group = run(PerturbGenerator(llm, perturbations=["paraphrased"], require_tags=True).perturb_one(ORIG))
    assert group.rows == [] and "no <rewritten>" in group.skips[0].reason


# ------------------------------------------------------------------------------------ rewrite stages


def good_rewrite(messages) -> str:
    """The good rewrite of the perturbation whose template made this request. Every rewrite asks for free text
    (reply type ``"text"``) about the same fenced ``text``, so the request is compared with each template rendered
    with that text: which template asked, never which words it used."""
    text = fenced(messages, "text")
    for name in REWRITES:
        rendered = REWRITE_PROMPTS[name].render(text=text)
        if messages[: len(rendered)] == rendered:
            return wrap(GOOD[name])
    raise AssertionError("a request that no rewrite template made")


def test_every_rewrite_kept_with_group_difficulty_and_meta():
    llm = LLM(FakeModel(by_reply={"text": good_rewrite}), cache=None)
    gen = PerturbGenerator(llm, perturbations=REWRITES)
    group = run(gen.perturb_one(ORIG))
    assert not group.skips
    original, *perturbed = group.rows
    assert original.id == "ex1" and original.difficulty == ORIGINAL and original.group == "ex1"
    assert original.target == TARGET and original.label == 1 and original.meta["k"] == 1
    assert [r.difficulty for r in perturbed] == REWRITES
    for row in perturbed:
        name = row.difficulty
        assert row.id == f"ex1::{name}" and row.group == "ex1" and row.label == 1 and row.descriptions == []
        assert row.target == GOOD[name] and row.source == SOURCE and row.split == "dev"
        assert row.meta["perturbation"] == name and row.meta["model"] == "fake"
        assert row.meta["prompt"] == f"perturb_{name}@1" and row.meta["unit"] == "target"
        assert row.meta["reply_format"] == "tagged"
        assert row.meta["usage"]["calls"] == 1
    assert group.usage.calls == len(REWRITES)
    assert len(llm.api.requests) == len(REWRITES)


def test_failed_check_gets_one_repair_then_kept():
    llm = fake_llm(wrap(TARGET), wrap(GOOD["paraphrased"]))  # first an unchanged copy, then a real paraphrase
    gen = PerturbGenerator(llm, perturbations=["paraphrased"])
    group = run(gen.perturb_one(ORIG))
    assert group.rows[1].target == GOOD["paraphrased"]
    assert group.rows[1].meta["usage"]["calls"] == 2
    assert "identical to the original" in llm.api.requests[1][-1]["content"]  # the repair says why


def test_copy_of_original_is_skipped_never_kept():
    llm = fake_llm(default=wrap(TARGET))
    gen = PerturbGenerator(llm, perturbations=REWRITES)
    group = run(gen.perturb_one(ORIG))
    assert group.rows == []  # no perturbation kept -> no group at all
    assert len(group.skips) == len(REWRITES)
    for skip in group.skips:
        assert "identical to the original" in skip.reason
        assert len(skip.calls) == 2 and skip.calls[0].reply == wrap(TARGET)  # raw replies kept for audit


@pytest.mark.parametrize("name", REWRITES)
def test_garbled_replies_skip_with_reason(name):
    """>= 1,000 garbled replies per perturbation: no exception escapes, nothing is kept but real rewrites."""
    pool = garbled_replies(1000, seed=hash(name) % 1000) + [
        "<rewritten>" + TARGET,
        f"<rewritten>{TARGET}</rewritten>",
        "<rewritten></rewritten>",
        f"<rewritten>{TARGET.lower()}</rewritten>",
        "<rewritten>Yes.</rewritten>",
    ]
    replies = itertools.cycle(pool)
    llm = LLM(FakeModel(responder=lambda messages: next(replies)), cache=None)
    gen = PerturbGenerator(llm, perturbations=[name], concurrency=4)
    originals = [ORIG.model_copy(update={"id": f"ex{i}"}) for i in range(len(pool) // 2 + 1)]

    async def collect():
        return [g async for g in gen.run(originals)]

    groups = run(collect())
    assert len(groups) == len(originals)
    assert len(llm.api.requests) >= len(pool)  # every garbled reply was served
    for group in groups:
        assert group.rows == []
        assert len(group.skips) == 1
        skip = group.skips[0]
        assert skip.perturbation == name and skip.reason and skip.calls


def test_llm_error_is_a_skip():
    llm = fake_llm(ContextOverflowError("prompt of 9000 tokens does not fit 8192"))
    gen = PerturbGenerator(llm, perturbations=["compressed"])
    group = run(gen.perturb_one(ORIG))
    assert group.rows == [] and "LLM error" in group.skips[0].reason and "8192" in group.skips[0].reason


def test_inconsistent_original_is_skipped_without_calls():
    llm = fake_llm()  # any call would raise: nothing scripted
    gen = PerturbGenerator(llm, perturbations=REWRITES)
    group = run(gen.perturb_one(ORIG.model_copy(update={"label": 0})))
    assert group.rows == [] and len(group.skips) == len(REWRITES)
    assert all("inconsistent" in s.reason for s in group.skips)
    assert llm.api.requests == []


def test_sentence_unit_rewrites_each_sentence_and_keeps_layout():
    target = "The boat sank. Mara rowed out.\n\nShe saved three sailors."
    replies = {
        "The boat sank.": "The vessel went down.",
        "Mara rowed out.": "Mara went out by rowing boat.",
        "She saved three sailors.": "She rescued three seamen.",
    }

    llm = LLM(FakeModel(by_reply={"text": lambda messages: wrap(replies[fenced(messages, "text")])}), cache=None)
    gen = PerturbGenerator(llm, perturbations=["synonym_replaced"], unit="sentence")
    group = run(gen.perturb_one(ORIG.model_copy(update={"target": target})))
    assert group.rows[1].target == "The vessel went down. Mara went out by rowing boat.\n\nShe rescued three seamen."
    assert group.rows[1].meta["unit"] == "sentence" and group.rows[1].meta["usage"]["calls"] == 3
    assert group.rows[1].meta["reply_format"] == "tagged"


def test_sentence_unit_failure_skips_the_whole_item():
    llm = fake_llm(wrap("The vessel went down."), "garbage", "still garbage")
    gen = PerturbGenerator(llm, perturbations=["paraphrased"], unit="sentence")
    target = "The boat sank. Then Mara Voss rowed out alone into the storm."
    group = run(gen.perturb_one(ORIG.model_copy(update={"target": target})))
    assert group.rows == [] and group.skips[0].reason.startswith("sentence 1:")
    assert len(llm.api.requests) == 3  # sentence 0 once, sentence 1 plus one repair


def test_bad_options_raise():
    with pytest.raises(ValueError, match="unknown perturbation"):
        PerturbGenerator(fake_llm(), perturbations=["shuffled"])
    with pytest.raises(ValueError, match="unit"):
        PerturbGenerator(fake_llm(), unit="paragraph")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- added source sentence


def test_candidates_exclude_dialogue_headings_and_short_lines():
    source = (
        'CHAPTER ONE\n\n"Get out," she said to the old sailor at the door. '
        "The harbour council met every Tuesday in the old stone hall by the quay. "
        "But the council never listened to the keepers at all that year. Too short here. "
        "[Transcriber's note: this etext was produced from an old magazine issue.]"
    )
    texts = [c.text for c in candidate_sentences(source)]
    assert texts == ["The harbour council met every Tuesday in the old stone hall by the quay."]


def test_unrelated_sentence_is_least_related_source_sentence():
    chosen, relatedness, how = choose_unrelated_sentence(SOURCE, TARGET, random.Random(0), how="tfidf")
    assert chosen.text == "Wild goats graze on the steep western cliffs of the island during the warm summer months."
    assert SOURCE[chosen.span.start : chosen.span.end] == chosen.text
    assert how == "tfidf" and 0.0 <= relatedness < 0.2  # shares only "island" with the target


@pytest.mark.parametrize("seed", range(12))
def test_insertion_is_a_real_source_sentence_at_a_boundary_with_original_intact(seed):
    stage = InsertSourceSentence("tfidf", seed=seed)
    outcome = run(stage(ORIG.model_copy(update={"id": f"ex{seed}"})))
    row = outcome.example
    assert row is not None and outcome.skip is None
    ins = row.meta["inserted"]
    start, end = ins["target_span"]["start"], ins["target_span"]["end"]
    assert row.target[start:end] == ins["text"]
    assert SOURCE[ins["source_span"]["start"] : ins["source_span"]["end"]] == ins["text"]
    assert ins["text"] in [s.text for s in split_sentences(SOURCE)]  # a whole source sentence
    assert row.target[: start - 1] + row.target[end:] == TARGET  # only " " + sentence was added
    assert row.target[start - 1] == " "
    assert start - 1 in {s.span.end for s in split_sentences(TARGET)}  # right after a target sentence
    assert row.meta["model"] is None and row.meta["selector"] == "tfidf"
    assert row.difficulty == "added_source_sentence" and row.label == 1 and row.group == f"ex{seed}"


def test_insertion_positions_vary_with_seed_and_never_precede_the_first_sentence():
    first_end = split_sentences(TARGET)[0].span.end
    positions = set()
    for seed in range(30):
        new, span = insert_at_boundary(TARGET, "Wild goats graze there every summer month.", random.Random(seed))
        assert span.start - 1 >= first_end
        positions.add(span.start)
    assert len(positions) == len(split_sentences(TARGET))


def test_insertion_without_candidates_is_a_skip():
    stage = InsertSourceSentence("tfidf")
    outcome = run(stage(ORIG.model_copy(update={"source": '"Hello," he said.'})))
    assert outcome.example is None and "no candidate sentence" in outcome.skip.reason


def test_generator_without_llm_for_insertion_only():
    gen = PerturbGenerator(None, perturbations=["added_source_sentence"], insert_with="tfidf")
    assert not gen.needs_llm
    group = run(gen.perturb_one(ORIG))
    assert [r.difficulty for r in group.rows] == [ORIGINAL, "added_source_sentence"]


def test_verify_insertion_accepts_exactly_one_inserted_source_sentence():
    goat = "Wild goats graze on the steep western cliffs of the island during the warm summer months."
    sentences = split_sentences(TARGET)
    cut = sentences[1].span.end
    perturbed = TARGET[:cut] + " " + goat + TARGET[cut:]
    ins = verify_insertion(TARGET, perturbed, SOURCE)
    assert ins.text == goat and perturbed[ins.target_span.start : ins.target_span.end] == goat
    assert SOURCE[ins.source_span.start : ins.source_span.end] == goat


@pytest.mark.parametrize(
    "perturbed, why",
    [
        (TARGET, "nothing was inserted"),
        (TARGET.replace("twenty", "20"), "changed or dropped"),
        (
            "Wild goats graze on the steep western cliffs of the island. "
            + TARGET
            + " She kept the medal in a drawer.",
            "2 places",
        ),
        (TARGET + " The lighthouse was painted bright purple by aliens in the spring.", "not a sentence of the source"),
        (TARGET + " Goats graze.", "too short"),
    ],
)
def test_verify_insertion_rejects(perturbed, why):
    with pytest.raises(ParseError, match=why):
        verify_insertion(TARGET, perturbed, SOURCE)


def test_llm_insertion_verified_and_recorded():
    goat = "Wild goats graze on the steep western cliffs of the island during the warm summer months."
    llm = fake_llm(
        wrap(TARGET + " The lighthouse was painted purple by aliens in the spring."), wrap(TARGET + " " + goat)
    )
    gen = PerturbGenerator(llm, perturbations=["added_source_sentence"], insert_with="llm")
    group = run(gen.perturb_one(ORIG))
    row = group.rows[1]
    assert row.target == TARGET + " " + goat
    assert row.meta["selector"] == "llm" and row.meta["model"] == "fake" and row.meta["usage"]["calls"] == 2
    assert SOURCE in llm.api.requests[0][-1]["content"]


def test_llm_insertion_garbled_is_skipped():
    replies = itertools.cycle(garbled_replies(1000, seed=7))
    llm = LLM(FakeModel(responder=lambda m: next(replies)), cache=None)
    stage = InsertSourceSentence("llm", llm=llm)
    for i in range(500):
        outcome = run(stage(ORIG.model_copy(update={"id": f"e{i}"})))
        assert outcome.example is None and outcome.skip.reason


# --------------------------------------------------------------------------------------------- CLI


def test_cli_writes_groups_and_skip_log(tmp_path):
    from halluscope.cli.main import app

    inp = tmp_path / "in.jsonl"
    rows = [ORIG.model_copy(update={"id": f"ex{i}"}) for i in range(3)]
    rows.append(ORIG.model_copy(update={"id": "bad", "source": '"Hi," he said.'}))  # no candidate: skipped
    inp.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "perturb",
            "-i",
            str(inp),
            "--out",
            str(out),
            "-p",
            "added_source_sentence",
            "--insert-with",
            "tfidf",
        ],
    )
    assert result.exit_code == 0, result.output
    written = [Example.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [e.id for e in written] == [
        "ex0",
        "ex0::added_source_sentence",
        "ex1",
        "ex1::added_source_sentence",
        "ex2",
        "ex2::added_source_sentence",
    ]
    skipped = [json.loads(line) for line in (tmp_path / "out.skipped.jsonl").read_text().splitlines()]
    assert [s["example_id"] for s in skipped] == ["bad"] and "no candidate" in skipped[0]["reason"]
    assert "3 perturbations kept, 1 skipped" in result.output


def test_cli_rejects_unknown_perturbation(tmp_path):
    from halluscope.cli.main import app

    inp = tmp_path / "in.jsonl"
    inp.write_text(ORIG.model_dump_json() + "\n")
    result = CliRunner().invoke(
        app, ["generate", "perturb", "-i", str(inp), "--out", str(tmp_path / "o.jsonl"), "-p", "shuffled"]
    )
    assert result.exit_code == 2 and "unknown perturbation" in result.output


# ------------------------------------------------------------------------------------ real data/model


def test_insertion_on_squality(data_dir):
    from halluscope.bench.datasets import load_dataset

    originals = load_dataset("squality:dev", data_dir).examples[:4]
    gen = PerturbGenerator(None, perturbations=["added_source_sentence"], insert_with="tfidf")
    for original in originals:
        group = run(gen.perturb_one(original))
        row = group.rows[1]
        ins = row.meta["inserted"]
        s, e = ins["target_span"]["start"], ins["target_span"]["end"]
        assert original.source[ins["source_span"]["start"] : ins["source_span"]["end"]] == ins["text"]
        assert row.target[: s - 1] + row.target[e:] == original.target


@pytest.mark.embedded
def test_rewrite_on_embedded_model(embedded_config):
    """The tiny model may or may not produce an acceptable rewrite; either way no copy is kept."""
    gen = PerturbGenerator(config=embedded_config, perturbations=["paraphrased", "compressed"])
    short = ORIG.model_copy(update={"target": "Mara Voss kept the Keel Island lighthouse for twenty years."})
    group = run(gen.perturb_one(short))
    kept = {r.difficulty: r for r in group.rows[1:]}
    assert len(kept) + len(group.skips) == 2
    for name, row in kept.items():
        check_rewrite(name, short.target, row.target)  # kept rows pass the checks
        assert row.meta["model"].startswith("embedded")
    for skip in group.skips:
        assert skip.reason and skip.calls
