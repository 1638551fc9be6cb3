"""Hallucination injection: gold spans hold exactly the inserted text; rewrites are dropped and counted."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from typer.testing import CliRunner

from halluscope.cli.main import app
from halluscope.generators.inject import (
    InjectedClaim,
    InjectionGenerator,
    donor_facts,
    outside_matches_original,
    parse_marked_text,
    verify_spans,
    weave_at_boundaries,
)
from halluscope.llm import LLM, FakeModel
from halluscope.records import Example, Span
from halluscope.text import ParseError
from tests.garble import garbled_replies
from tests.prompt_data import fenced

SOURCE = "The Elm Street bridge opened in 1820. It crosses the Avon river. Local masons built it from granite."
TARGET = "The Elm Street bridge opened in 1820. It spans the Avon. Masons built it from granite."
ITEM = Example(id="bridge", source=SOURCE, target=TARGET, label=1, split="dev")
FACTS = [
    "The bridge was designed by Thomas Telford.",
    "Its central arch is 40 metres long.",
    "A toll of one penny was charged until 1901.",
]


def gen(*replies, **kwargs) -> InjectionGenerator:
    llm = LLM(FakeModel(list(replies)), cache=None) if replies else None
    return InjectionGenerator(llm, **kwargs)


def test_boundary_weave_spans_hold_the_inserted_sentences_exactly():
    for complexity in (1, 2, 3):
        new, claims = weave_at_boundaries(TARGET, FACTS[:complexity], complexity, random.Random(0))
        assert len(claims) == complexity
        for c in claims:
            assert new[c.span.start : c.span.end] == c.inserted_text == c.fact
        assert verify_spans(new, claims) is None
        assert outside_matches_original(new, [(c.span.start, c.span.end) for c in claims], TARGET)


def test_boundary_weave_attaches_levels_2_3_to_the_most_similar_sentence():
    new, [claim] = weave_at_boundaries(TARGET, ["The Avon spans three counties near the bridge."], 2, random.Random(0))
    assert new.startswith("The Elm Street bridge opened in 1820. It spans the Avon. The Avon spans three")
    new, [claim] = weave_at_boundaries("One. Two", ["a fact without a full stop"], 1, random.Random(1))
    assert claim.inserted_text == "a fact without a full stop." and claim.span.of(new) == claim.inserted_text


async def test_no_llm_mode_writes_truth_and_injected_examples():
    examples, failures = await gen(weave="boundary").generate(ITEM, (1, 2, 3), FACTS)
    assert not failures
    truth, *injected = examples
    assert truth.label == 1 and truth.gold_spans == [] and truth.descriptions == [] and truth.difficulty == "truth"
    for ex, c in zip(injected, (1, 2, 3)):
        assert ex.label == 0 and ex.difficulty == f"complexity-{c}" and ex.group == "bridge"
        assert ex.descriptions == FACTS[:c]
        assert [s.of(ex.target) for s in ex.gold_spans] == [m["inserted_text"] for m in ex.meta["injected_claims"]]
        assert ex.meta["complexity"] == c and ex.meta["original_target"] == TARGET
        Example.model_validate_json(ex.model_dump_json())
    # deterministic: the same seed gives the same placements
    again, _ = await gen(weave="boundary").generate(ITEM, (1, 2, 3), FACTS)
    assert [e.target for e in again] == [e.target for e in examples]


def test_parse_marked_text():
    text, pieces = parse_marked_text(
        "The bridge<ins>, designed by Telford,</ins> opened in 1820.<ins> It cost £5.</ins>"
    )
    assert text == "The bridge, designed by Telford, opened in 1820. It cost £5."
    assert [text[s:e] for s, e in pieces] == [", designed by Telford,", "It cost £5."]
    for bad in ("no tags at all", "<ins>a <ins>b</ins></ins>", "open <ins>never closed", "", "<ins>   </ins>"):
        with pytest.raises(ParseError):
            parse_marked_text(bad)


async def test_llm_weave_keeps_exact_spans():
    reply = (
        "The Elm Street bridge<ins>, designed by Thomas Telford,</ins> opened in 1820. It spans the Avon. "
        "Masons built it from granite."
    )
    g = gen(json.dumps({"facts": [FACTS[0]]}), reply)
    [truth, ex], failures = await g.generate(ITEM, (1,))
    assert not failures
    [span] = ex.gold_spans
    assert span.of(ex.target) == ", designed by Thomas Telford,"
    assert ex.descriptions == [FACTS[0]]
    assert ex.meta["injected_claims"][0]["fact"] == FACTS[0]
    assert ex.meta["model"] == "fake"


async def test_llm_weave_that_rewrites_other_text_is_dropped_and_counted():
    rewritten = (
        "The Elm St. bridge<ins>, designed by Thomas Telford,</ins> was opened in 1820. "
        "It spans the Avon. Masons built it from granite."
    )
    g = gen(json.dumps({"facts": [FACTS[0]]}), rewritten)
    examples, [failure] = await g.generate(ITEM, (1,))
    assert examples == []  # no truth without an injected partner
    assert failure.drop_kind == "rewrote_outside_insertions" and "outside" in failure.dropped
    assert len(failure.calls) == 2  # invent + weave, kept for audit


async def test_invented_facts_found_in_the_source_are_dropped():
    g = gen(json.dumps({"facts": ["Local masons built it from granite.", "It had a gas lamp on each pier."]}))
    _, [failure] = await g.generate(ITEM, (2,))
    assert failure.drop_kind == "too_few_facts"


async def test_garbled_replies_never_raise_and_always_say_why():
    replies = garbled_replies(1000, seed=7)
    counter = {"i": 0}

    def reply(messages):
        counter["i"] += 1
        return replies[counter["i"] % len(replies)]

    g = InjectionGenerator(LLM(FakeModel(responder=reply), cache=None))
    kinds = set()
    for k in range(40):
        item = ITEM.model_copy(update={"id": f"b{k}"})
        examples, failures = await g.generate(item, (1, 2, 3))
        for f in failures:
            assert f.dropped and f.drop_kind
            kinds.add(f.drop_kind)
        for ex in examples:
            if ex.label == 0:
                claims = [
                    InjectedClaim(m["fact"], m["inserted_text"], Span(**m["span"])) for m in ex.meta["injected_claims"]
                ]
                assert claims and verify_spans(ex.target, claims) is None
    assert kinds  # garbage produced failures, each with a reason


def test_weave_without_llm_needs_facts():
    with pytest.raises(ValueError, match="needs an LLM"):
        asyncio.run(gen(weave="boundary").generate(ITEM, (1,)))
    with pytest.raises(ValueError):
        InjectionGenerator(None, weave="sideways")  # type: ignore[arg-type]


def test_cli_boundary_mode(tmp_path):
    data = tmp_path / "in.jsonl"
    rows = [ITEM, ITEM.model_copy(update={"id": "bad", "label": 0})]
    data.write_text("\n".join(r.model_dump_json() for r in rows) + "\n")
    out = tmp_path / "out.jsonl"
    args = ["generate", "inject", str(data), "-O", str(out), "--weave", "boundary", "-c", "1", "-c", "2"]
    for f in FACTS[:2]:
        args += ["--fact", f]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    written = [Example.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [e.id for e in written] == [
        "bridge-inject-truth",
        "bridge-inject-c1",
        "bridge-inject-c2",
    ]  # label-0 input skipped
    assert "wrote 3 examples (2 injected, 1 truths)" in result.output
    bad = CliRunner().invoke(
        app, ["generate", "inject", str(data), "-O", str(out), "--weave", "boundary", "-c", "3", "--fact", "only one"]
    )
    assert bad.exit_code != 0 and "needs 3 --fact" in bad.output


def test_donor_facts_come_from_other_sources_and_are_not_in_this_source():
    other_source = "Quarterly results were strong. Revenue rose."
    pool = [
        ITEM,
        Example(id="same-source", source=SOURCE, target="The bridge was repainted green in 1990 by the council."),
        Example(
            id="o1", source=other_source, target="Revenue at the bridge toll company rose by nine percent last year."
        ),
        Example(
            id="o2", source=other_source, target="Revenue at the bridge toll company rose by ten percent last year."
        ),
        Example(id="o3", source="Another.", target="The mayor opened a new ferry service across the river in May."),
        Example(id="o4", source="Copy.", target="Local masons built it from granite blocks, the records say."),
    ]
    facts = donor_facts(ITEM, pool, 2, random.Random(0))
    assert len(facts) == 2
    assert "The bridge was repainted green in 1990 by the council." not in facts  # shares the source
    assert sum("toll company" in f for f in facts) == 1  # one sentence per donor source, no near-duplicates
    assert "The mayor opened a new ferry service across the river in May." in facts
    assert not any("masons" in f for f in facts)  # too close to a source sentence


async def test_donor_mode_needs_no_llm():
    pool = [
        Example(id="o1", source="Doc 1.", target="Officials in the county approved a new budget for schools."),
        Example(id="o2", source="Doc 2.", target="A storm closed the harbour for three days in March."),
    ]
    examples, failures = await gen(weave="boundary").generate(ITEM, (1, 2), donors=pool)
    assert not failures and [e.meta.get("facts_from") for e in examples[1:]] == ["donor", "donor"]
    assert all(s.of(e.target) in e.descriptions for e in examples[1:] for s in e.gold_spans)


# --- gold claims (meta.gold_claims) and gold evidence by multi-judge consensus ---------------------------------


async def test_every_injected_fact_is_a_gold_hallucinated_claim():
    from halluscope.bench.suite_probe import read_gold

    examples, _ = await gen(weave="boundary").generate(ITEM, (1, 3), FACTS)
    truth, c1, c3 = examples
    assert truth.meta["gold_claims"] == [] and truth.meta["gold_claims_complete"] is False
    for ex in (c1, c3):
        gold = ex.meta["gold_claims"]
        assert sorted(g["text"] for g in gold) == sorted(ex.descriptions) and all(g["hallucinated"] for g in gold)
        assert [Span(**g["span"]).of(ex.target) for g in gold] == [g["inserted_text"] for g in gold]
        assert [Span(**g["span"]) for g in gold] == ex.gold_spans and ex.meta["gold_claims_complete"] is False
        parsed = read_gold(ex)
        assert parsed is not None and len(parsed.hallucinated) == len(ex.descriptions) and not parsed.complete


def test_truthful_spans_are_carried_through_insertions():
    from halluscope.generators.inject import align_original, map_span

    original = "The bridge opened in 1820 . It spans the Avon."
    new = "The bridge, designed by Telford, opened in 1820. It spans the Avon. It cost £5."
    inserted = [Span(start=10, end=32), Span(start=68, end=79)]
    assert [s.of(new) for s in inserted] == [", designed by Telford,", "It cost £5."]
    positions = align_original(original, new, inserted)
    assert positions is not None
    opened = map_span({"start": 0, "end": 27}, positions)  # "The bridge opened in 1820 ." (space before the stop)
    assert opened == {"start": 0, "end": 48} and new[0:48] == "The bridge, designed by Telford, opened in 1820."
    avon = map_span({"start": 28, "end": 46}, positions)
    assert avon is not None and new[avon["start"] : avon["end"]] == "It spans the Avon."
    assert align_original(original, new.replace("Avon", "Severn"), inserted) is None  # rewritten: not carried


GOLD_DECOMPOSITION = json.dumps(
    {
        "claims": [
            {"segment": "The Elm Street bridge opened in 1820.", "claim": "The Elm Street bridge opened in 1820."},
            {"segment": "It spans the Avon.", "claim": "The bridge spans the Avon."},
            {"segment": "Masons built it from granite.", "claim": "Masons built the bridge from granite."},
        ]
    }
)
GOLD_EVIDENCE = {
    "1820": ["The Elm Street bridge opened in 1820."],
    "Avon": ["It crosses the Avon river."],
    "granite": ["Local masons built it from granite.", "It crosses the Avon river."],
}


def gold_model(name: str, strict: bool) -> LLM:
    """Decomposes, quotes GOLD_EVIDENCE, and votes: PASS on everything, or (``strict``) only when the passage
    shares the claim's key word (so the two judges disagree on the Avon claim and on granite's Avon passage).
    Keyed by the reply each PROBE stage asks for; the claim and the evidence judged are read from the prompt's data."""

    def key_of(messages) -> str:
        claim = fenced(messages, "claim")
        return next(k for k in GOLD_EVIDENCE if k in claim)

    def find(messages):
        return json.dumps({"reasoning": "r", "evidence": GOLD_EVIDENCE[key_of(messages)]})

    def evaluate(messages):
        key = key_of(messages)
        passed = not strict or (key != "Avon" and key in fenced(messages, "evidence"))
        return json.dumps({"reasoning": "r", "verdict": "PASS" if passed else "FAIL"})

    script = {"ClaimsReply": GOLD_DECOMPOSITION, "EvidenceReply": find, "EvaluationReply": evaluate}
    return LLM(FakeModel(by_reply=script, name=name), cache=None)


async def test_gold_evidence_by_multi_judge_consensus():
    from halluscope.bench.suite_probe import read_gold
    from halluscope.generators.inject import GoldEvidenceBuilder

    lenient, strict = gold_model("judge-a", False), gold_model("judge-b", True)
    builder = GoldEvidenceBuilder(lenient, judges=[lenient, strict])
    assert builder.description["votes_per_passage"] == 2 and builder.description["pass_votes_needed"] == 2
    g = gen(weave="boundary", gold_evidence=builder)
    examples, failures = await g.generate(ITEM, (1,), [FACTS[0]])
    assert not failures
    truth, injected = examples
    # 1 decomposition (main model), 3 claims x 2 finders, 4 candidate passages x 2 judges
    assert len(lenient.api.requests) == 1 + 3 + 4 and len(strict.api.requests) == 3 + 4

    opened, granite = truth.meta["gold_claims"]
    assert opened["text"] == "The Elm Street bridge opened in 1820." and not opened["hallucinated"]
    assert Span(**opened["span"]).of(TARGET) == "The Elm Street bridge opened in 1820."
    assert opened["evidence"] == [{"start": 0, "end": 37, "pass": 2, "votes": 2}]
    assert SOURCE[0:37] == "The Elm Street bridge opened in 1820."
    # granite: the masons passage passed 2 of 2; the Avon passage (found by both, judged once) only 1 of 2
    assert [(e["start"], e["end"], e["pass"]) for e in granite["evidence"]] == [(65, 100, 2)]
    assert granite["agreement"] == {"finders": 2, "finders_failed": 0, "candidates": 2, "accepted": 1}
    [avon] = truth.meta["gold_claims_uncertain"]
    assert avon["text"] == "The bridge spans the Avon." and "1 of 2 PASS votes, 2 needed" in avon["reason"]
    assert truth.meta["gold_claims_complete"] is True and truth.meta["gold_builder"]["judges"] == ["judge-a", "judge-b"]

    # the injected example: its fact as the hallucinated claim, the same truthful claims at their new offsets
    kinds = [(c["id"][0], Span(**c["span"]).of(injected.target)) for c in injected.meta["gold_claims"]]
    assert sorted(kinds) == sorted(
        [("h", FACTS[0]), ("t", "The Elm Street bridge opened in 1820."), ("t", "Masons built it from granite.")]
    )
    assert injected.meta["gold_claims_complete"] is True
    gold = read_gold(injected)
    assert gold is not None and gold.complete and gold.has_evidence and len(gold.claims) == 4  # 1 + 2 + uncertain


async def test_gold_evidence_decomposition_failure_keeps_the_examples():
    from halluscope.generators.inject import GoldEvidenceBuilder

    broken = LLM(FakeModel(default="not json at all"), cache=None)
    g = gen(weave="boundary", gold_evidence=GoldEvidenceBuilder(broken, samples=2))
    [truth, injected], failures = await g.generate(ITEM, (1,), [FACTS[0]])
    assert not failures
    for ex in (truth, injected):
        assert ex.meta["gold_claims_complete"] is False and "gold decomposition failed" in ex.meta["gold_claims_error"]
    assert [c["hallucinated"] for c in injected.meta["gold_claims"]] == [True]


def test_cli_gold_evidence(tmp_path, monkeypatch):
    import halluscope.llm as llm_module

    models = {"main": gold_model("main", False), "judge-b": gold_model("judge-b", True)}
    monkeypatch.setattr(llm_module, "get_llm", lambda config: models[config.model])
    data = tmp_path / "in.jsonl"
    data.write_text(ITEM.model_dump_json() + "\n")
    out = tmp_path / "out.jsonl"
    args = [
        "generate",
        "inject",
        str(data),
        "-O",
        str(out),
        "--weave",
        "boundary",
        "-c",
        "1",
        "--fact",
        FACTS[0],
        "--model",
        "main",
        "--gold-evidence",
        "--gold-judge",
        "main",
        "--gold-judge",
        "judge-b",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 of 2 examples have complete gold claims; over 1 items, 2 truthful claims kept" in result.output
    written = [Example.model_validate_json(line) for line in out.read_text().splitlines()]
    assert all(e.meta["gold_claims_complete"] for e in written)
    bad = CliRunner().invoke(
        app,
        ["generate", "inject", str(data), "-O", str(out), "--weave", "boundary", "--fact", "x", "--gold-judge", "main"],
    )
    assert bad.exit_code != 0 and "need --gold-evidence" in bad.output
