"""``batch_size``: several units per call where the paper judges each unit on its own against the same context
(dcr, factscore, probe). On the fake model the per-unit verdicts are the unbatched ones; only the calls change.
A unit the batch reply leaves out, repeats or gives malformed is asked on its own, never guessed."""

from __future__ import annotations

import json
import re

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.methods import OptionsError, get_method
from halluscope.methods.batching import parse_batch
from halluscope.methods.factscore import FactJudgmentBatchEntry
from halluscope.records import Report
from halluscope.text import ParseError
from tests.prompt_data import fenced, listing


def units(messages, name: str) -> list[str]:
    """The texts of the numbered units a batch prompt fenced as ``name``, in order."""
    return [text for _, text in listing(messages, name)]


def bracketed(messages, name: str) -> list[tuple[int, str]]:
    """``(number, text)`` of each ``[N] text`` line fenced as ``name`` (how DCR's batch numbers its sentences)."""
    return [(int(n), text) for n, text in re.findall(r"^\[(\d+)\]\s*(.+)$", fenced(messages, name), re.M)]


def asked(model: FakeModel, kind: str) -> list:
    """The requests ``model`` received that asked for the reply type ``kind``, in order."""
    return [r for r, t in zip(model.requests, model.reply_types, strict=True) if t == kind]


def verdict_view(report: Report) -> list[tuple]:
    return [(v.claim.id, v.label, v.reason, [(e.text, e.relation) for e in v.evidence]) for v in report.verdicts]


# ------------------------------------------------------------------------------------------------ parsing


class Entry(FactJudgmentBatchEntry):
    pass


def test_parse_batch_reads_one_valid_entry_per_number():
    reply = json.dumps(
        {
            "results": [
                {"id": 1, "supported": True, "inconsistencies": []},
                {"id": 2, "supported": "yes"},  # malformed: not a JSON boolean
                {"id": 3, "supported": False, "inconsistencies": ['"x" is wrong.']},
                {"id": 3, "supported": True, "inconsistencies": []},  # fact 3 twice: neither counts
                {"supported": True},  # no number: ignored
            ]
        }
    )
    answers = parse_batch(reply, 4, Entry, unit="fact")
    assert sorted(answers.judged) == [0] and answers.judged[0].supported is True
    assert "unusable" in answers.missing[1] and "2 entries for fact 3" in answers.missing[2]
    assert answers.missing[3] == "the batch reply has no entry for fact 4"
    bare = parse_batch(json.dumps([{"id": 2, "supported": False, "inconsistencies": []}]), 2, Entry)
    assert sorted(bare.judged) == [1] and 0 in bare.missing


@pytest.mark.parametrize(
    "reply, why",
    [
        ('{"results": [{"id": 4, "supported": true}]}', "numbered 1 to 3"),  # numbering not trusted: all refused
        ('{"results": [{"id": 0, "supported": true}]}', "numbered 1 to 3"),
        ('{"answers": []}', '"results" list'),
        ('{"results": [{"id": 1, "supported": "no"}]}', "no usable entry"),
        ("All three facts are supported.", "JSON"),
    ],
)
def test_parse_batch_refuses_replies_it_cannot_trust(reply, why):
    with pytest.raises(ParseError, match=why):
        parse_batch(reply, 3, Entry, unit="fact")


# ------------------------------------------------------------------------------------------------ factscore

FS_SOURCE = "Philips sold 250,000 units on Amazon. The police investigated Philips for a month and let it continue."
FS_TARGET = "Amazon was investigated for a month. The police ordered Amazon to cease operations."
FS_FACTS = json.dumps(
    {
        "facts": [
            {"sentence": 1, "fact": "Amazon was investigated."},
            {"sentence": 1, "fact": "The investigation lasted a month."},
            {"sentence": 2, "fact": "The police ordered Amazon to cease operations."},
        ]
    }
)


FS_ONE, FS_BATCH = "FactJudgmentReply", "FactJudgmentBatchReply"  # the verifier's reply types with descriptions
FS_ONE_BARE, FS_BATCH_BARE = "FactCheckReply", "FactCheckBatchReply"  # and without (describe=False)


def fs_judgment(fact: str, describe: bool = True) -> dict:
    problems = []
    if "Amazon" in fact:
        problems.append('The fact says "Amazon" was investigated, but the source says it was Philips.')
    if "cease" in fact:
        problems.append('The fact says the company was ordered to "cease operations", but it was allowed to continue.')
    return {"supported": not problems, "inconsistencies": problems} if describe else {"supported": not problems}


def fs_script(batch_reply=None, describe: bool = True) -> dict:
    """Decomposes into FS_FACTS, keeps every description, judges each fact alone or in a batch by its text
    (without descriptions the reply is only the boolean); ``batch_reply(facts, entries)`` may rewrite a batch
    reply."""

    def judge_batch(messages):
        numbered = listing(messages, "facts")
        entries = [{"id": n, **fs_judgment(f, describe)} for n, f in numbered]
        return json.dumps(batch_reply([f for _, f in numbered], entries) if batch_reply else {"results": entries})

    one, batch = (FS_ONE, FS_BATCH) if describe else (FS_ONE_BARE, FS_BATCH_BARE)
    return {
        "FactsReply": FS_FACTS,
        "KeepReply": lambda messages: json.dumps({"keep": [n for n, _ in listing(messages, "descriptions")]}),
        one: lambda messages: json.dumps(fs_judgment(fenced(messages, "fact"), describe)),
        batch: judge_batch,
    }


def fs_run(script=None, **options) -> tuple[Report, FakeModel]:
    model = FakeModel(by_reply=script or fs_script(describe=options.get("describe", True)))
    return get_method("factscore", llm=LLM(model, cache=None), **options).check(FS_SOURCE, FS_TARGET), model


@pytest.mark.parametrize("describe", [True, False])
def test_factscore_batched_verdicts_equal_unbatched(describe):
    single, single_model = fs_run(describe=describe)
    batched, batched_model = fs_run(describe=describe, batch_size=3)
    assert verdict_view(batched) == verdict_view(single)
    assert batched.score == single.score == pytest.approx(1 / 3)
    assert [f.description for f in batched.findings] == [f.description for f in single.findings]
    dedup = 1 if describe else 0  # the LLM de-duplication call (descriptions only)
    assert single.usage.calls == 1 + 3 + dedup and batched.usage.calls == 1 + 1 + dedup
    batch = FS_BATCH if describe else FS_BATCH_BARE
    assert batched_model.reply_types.count(batch) == 1 and batch not in single_model.reply_types
    name = "factscore_describe_batch@" if describe else "factscore_verify_batch@"
    assert name in get_method("factscore", llm=LLM(FakeModel()), describe=describe, batch_size=2).prompt_version
    assert "_batch@" not in get_method("factscore", llm=LLM(FakeModel()), describe=describe).prompt_version


def test_factscore_chunks_of_batch_size():
    batched, model = fs_run(batch_size=2)  # facts 1-2 in one call, fact 3 alone with the one-fact prompt
    single, _ = fs_run()
    assert verdict_view(batched) == verdict_view(single)
    batch_prompts = asked(model, FS_BATCH)
    assert len(batch_prompts) == 1 and len(listing(batch_prompts[0], "facts")) == 2
    assert batched.usage.calls == 1 + 2 + 1


def test_factscore_missing_or_malformed_entries_are_asked_alone_never_guessed():
    def partial(facts, entries):  # fact 2 malformed, fact 3 missing
        return {"results": [entries[0], {"id": 2, "supported": "yes"}]}

    batched, model = fs_run(fs_script(partial), batch_size=3)
    single, _ = fs_run()
    assert verdict_view(batched) == verdict_view(single)
    alone = [fenced(r, "fact") for r in asked(model, FS_ONE)]
    assert alone == ["The investigation lasted a month.", "The police ordered Amazon to cease operations."]
    # the batch call is on every fact's verdict; a re-asked fact also has its own call
    batch_call = next(c for c in batched.calls if fenced(c.messages, "facts", default=""))
    assert all(any(c is batch_call or c.reply == batch_call.reply for c in v.calls) for v in batched.verdicts)
    assert len(batched.verdicts[2].calls) == 2


def test_factscore_a_fact_unusable_in_the_batch_and_alone_is_unscored_with_both_reasons():
    script = fs_script(lambda facts, entries: {"results": entries[:2]})
    judge_alone = script[FS_ONE]
    script[FS_ONE] = lambda messages: (
        "It is complicated." if "cease" in fenced(messages, "fact") else judge_alone(messages)
    )

    report, _ = fs_run(script, batch_size=3)
    verdict = report.verdicts[2]
    assert verdict.label == "unscored"
    assert verdict.reason.startswith(
        "batch: the batch reply has no entry for fact 3; alone: verification reply unusable"
    )
    assert [v.label for v in report.verdicts[:2]] == ["unsupported", "supported"]


def test_factscore_a_batch_with_untrusted_numbering_is_redone_fact_by_fact():
    script = {**fs_script(), FS_BATCH: json.dumps({"results": [{"id": 7, "supported": True, "inconsistencies": []}]})}

    report, model = fs_run(script, batch_size=3)
    single, _ = fs_run()
    assert verdict_view(report) == verdict_view(single)
    assert model.reply_types.count(FS_BATCH) == 2  # the batch call and its repair request
    assert model.reply_types.count(FS_ONE) == 3


def test_factscore_batches_only_with_the_whole_source():
    report, model = fs_run(batch_size=3, retrieval="always", retriever="bm25", top_k=1, window=0)
    assert report.details["context"]["mode"] == "retrieval"
    assert FS_BATCH not in model.reply_types  # each fact has its own snippet
    with pytest.raises(OptionsError):
        get_method("factscore", llm=LLM(FakeModel()), batch_size=0)


# ------------------------------------------------------------------------------------------------ dcr

DCR_SOURCE = "Alice founded Acme in 2001 in Paris. The company makes rockets. Bob joined Acme in 2005."
DCR_TARGET = "Alice founded Acme in 1999. Acme makes rockets. It is based in Paris."


def dcr_reason(sentence: str, excerpt: str) -> tuple[str, bool]:
    if "1999" in sentence or ("Paris" in sentence and "Paris" not in excerpt):
        return f"Inconsistent: the excerpt does not support '{sentence}'.", False
    return f"Consistent: the excerpt says '{sentence}'.", True


DCE_BATCH = "DceExcerptBatchReply"  # the batched excerpt DCE (DceSingleReply: one sentence per call)


def dcr_script(amc_reply=None) -> dict:
    """DCE judges each sentence (alone or in a batch) against its excerpt with dcr_reason; AMC marks each reason
    by its verdict word, or answers ``amc_reply`` to a call with several reasons."""

    def amc(messages):
        reasons = units(messages, "reasons")
        if amc_reply is not None and len(reasons) > 1:
            return amc_reply
        return json.dumps({"marks": [1 if r.startswith("Consistent") else -1 for r in reasons]})

    def dce_batch(messages):
        excerpt = fenced(messages, "source")
        entries = []
        for i, sentence in bracketed(messages, "sentences"):
            reason, ok = dcr_reason(sentence, excerpt)
            entries.append({"id": i, "reason": reason, "is_consistent": ok})
        return json.dumps({"results": entries})

    def dce_one(messages):
        reason, ok = dcr_reason(fenced(messages, "sentence"), fenced(messages, "source"))
        return json.dumps({"reason": reason, "is_consistent": ok})

    return {"AmcReply": amc, DCE_BATCH: dce_batch, "DceSingleReply": dce_one}


def dcr_run(script=None, **options) -> tuple[Report, FakeModel]:
    model = FakeModel(by_reply=script or dcr_script())
    method = get_method("dcr", llm=LLM(model, cache=None), retrieval="always", retriever="bm25", **options)
    return method.check(DCR_SOURCE, DCR_TARGET), model


@pytest.mark.parametrize("retrieval", [{"top_k": 1, "window": 5}, {"top_k": 2, "window": 0}, {"top_k": 3, "window": 1}])
def test_dcr_batched_verdicts_equal_unbatched(retrieval):
    single, single_model = dcr_run(**retrieval)
    batched, batched_model = dcr_run(batch_size=4, **retrieval)
    assert verdict_view(batched) == verdict_view(single)
    assert batched.score == single.score and batched.findings == single.findings
    assert batched.details["context"]["per_snippet"] == single.details["context"]["per_snippet"]
    assert batched.usage.calls < single.usage.calls
    assert DCE_BATCH not in single_model.reply_types


def test_dcr_sentences_sharing_one_snippet_share_the_dce_and_amc_calls():
    # window 5 on a 3-sentence source: every sentence's snippet is the whole source, the same text
    single, _ = dcr_run(top_k=1, window=5)
    batched, model = dcr_run(top_k=1, window=5, batch_size=3)
    assert single.usage.calls == 6  # per sentence: DCE on the excerpt + AMC on its reason
    assert batched.usage.calls == 2  # one DCE call for the three sentences + one AMC call for the three reasons
    assert [len(bracketed(r, "sentences")) for r in asked(model, DCE_BATCH)] == [3]
    assert [v.label for v in batched.verdicts] == ["unsupported", "supported", "supported"]
    assert "dcr_dce_excerpt_batch@" in get_method("dcr", llm=LLM(FakeModel()), batch_size=2).prompt_version
    assert "dcr_dce_excerpt_batch@" not in get_method("dcr", llm=LLM(FakeModel())).prompt_version


def test_dcr_an_unusable_batched_amc_reply_is_marked_reason_by_reason():
    single, _ = dcr_run(top_k=1, window=5)
    batched, model = dcr_run(dcr_script(amc_reply=json.dumps({"marks": [1]})), top_k=1, window=5, batch_size=3)
    assert verdict_view(batched) == verdict_view(single)
    amc = [listing(r, "reasons") for r in asked(model, "AmcReply")]
    assert [len(a) for a in amc] == [3, 3, 1, 1, 1]  # the batch, its repair request, then one reason per call


def test_dcr_batch_size_does_not_change_the_whole_source_path():
    script = {
        "AmcReply": json.dumps({"marks": [-1, 1, 1]}),
        "DceReply": json.dumps(
            {
                "sentences": [
                    {"id": 1, "reason": "Inconsistent: 2001."},
                    {"id": 2, "reason": "Consistent."},
                    {"id": 3, "reason": "Consistent."},
                ],
                "is_consistent": False,
            }
        ),
    }

    for size in (1, 3):
        report = get_method("dcr", llm=LLM(FakeModel(by_reply=script), cache=None), batch_size=size).check(
            DCR_SOURCE, DCR_TARGET
        )
        assert report.usage.calls == 2 and report.score == pytest.approx(2 / 3)  # DCE + AMC, as in the paper


# ------------------------------------------------------------------------------------------------ probe

P_SOURCE = (
    "Marie Curie was born in Warsaw in 1867. She moved to Paris in 1891 to study physics. "
    "In 1903 she shared the Nobel Prize in Physics. She later won a second Nobel Prize, in Chemistry."
)
P_TARGET = "Marie Curie, born in Warsaw, won the Nobel Prize in Physics in 1903. She also taught at Oxford."
P_DECOMPOSITION = json.dumps(
    {
        "claims": [
            {"segment": "Marie Curie, born in Warsaw", "claim": "Marie Curie was born in Warsaw."},
            {
                "segment": "won the Nobel Prize in Physics in 1903",
                "claim": "Marie Curie won the Nobel Prize in Physics in 1903.",
            },
            {"segment": "She also taught at Oxford.", "claim": "Marie Curie taught at Oxford."},
        ]
    }
)
P_EVIDENCE = {
    "born in Warsaw": ["Marie Curie was born in Warsaw in 1867."],
    "Physics in 1903": [
        "In 1903 she shared the Nobel Prize in Physics.",
        "She moved to Paris in 1891 to study physics.",
        "Curie alone won the 1903 prize for her work on radium.",
    ],  # invented: rejected
    "Oxford": ["She moved to Paris in 1891 to study physics."],
}


def p_quotes(claim: str) -> list[str]:
    return next((q for key, q in P_EVIDENCE.items() if key in claim), [])


def p_passes(claim: str, evidence: str) -> bool:
    return ("Warsaw" in claim and "Warsaw" in evidence) or ("1903" in claim and "1903" in evidence)


def p_script(find_batch=None) -> dict:
    """PROBE's four steps by reply type: the decomposition, evidence quoted per claim by P_EVIDENCE (alone or in a
    batch, ``find_batch(entries)`` may rewrite a batch reply), and PASS where p_passes (alone or in a batch)."""

    def evaluate(messages):
        verdict = "PASS" if p_passes(fenced(messages, "claim"), fenced(messages, "evidence")) else "FAIL"
        return json.dumps({"reasoning": "", "verdict": verdict})

    def evaluate_batch(messages):
        evidence = fenced(messages, "evidence")
        return json.dumps(
            {
                "results": [
                    {"id": i, "reasoning": "", "verdict": "PASS" if p_passes(c, evidence) else "FAIL"}
                    for i, c in listing(messages, "claims")
                ]
            }
        )

    def find_evidence_batch(messages):
        entries = [{"id": i, "reasoning": "", "evidence": p_quotes(c)} for i, c in listing(messages, "claims")]
        return json.dumps(find_batch(entries) if find_batch else {"results": entries})

    return {
        "ClaimsReply": P_DECOMPOSITION,
        "EvidenceReply": lambda m: json.dumps({"reasoning": "", "evidence": p_quotes(fenced(m, "claim"))}),
        "EvidenceBatchReply": find_evidence_batch,
        "EvaluationReply": evaluate,
        "EvaluationBatchReply": evaluate_batch,
    }


def p_run(script=None, **options) -> tuple[Report, FakeModel]:
    model = FakeModel(by_reply=script or p_script())
    return get_method("probe", llm=LLM(model, cache=None), **options).check(P_SOURCE, P_TARGET), model


def test_probe_batched_verdicts_and_steps_equal_unbatched():
    single, _ = p_run()
    batched, model = p_run(batch_size=4)
    assert verdict_view(batched) == verdict_view(single)
    assert [v.label for v in batched.verdicts] == ["supported", "supported", "unsupported"]
    for step in ("evidence_finding", "evidence_evaluation"):
        strip = [{k: v for k, v in entry.items() if k != "calls"} for entry in single.details["steps"][step]]
        assert [{k: v for k, v in e.items() if k != "calls"} for e in batched.details["steps"][step]] == strip
    assert batched.details["steps"]["localization"] == single.details["steps"]["localization"]
    assert batched.subscores == single.subscores
    # unbatched: decompose + 3 evidence calls + 4 evaluations; batched: decompose + 1 evidence call + one
    # evaluation per distinct passage (the Paris sentence was quoted by claims 2 and 3: one call for both)
    assert single.usage.calls == 8 and batched.usage.calls == 1 + 1 + 3
    shared = [units(r, "claims") for r in asked(model, "EvaluationBatchReply")]
    assert shared == [["Marie Curie won the Nobel Prize in Physics in 1903.", "Marie Curie taught at Oxford."]]
    assert model.reply_types.count("EvaluationReply") == 2  # passages alone
    assert "probe_find_evidence_batch@" in get_method("probe", llm=LLM(FakeModel()), batch_size=2).prompt_version


def test_probe_a_claim_missing_from_the_batch_evidence_reply_is_searched_alone():
    batched, model = p_run(
        p_script(find_batch=lambda entries: {"results": entries[:1] + [{"id": 2, "evidence": ["<passage>"]}]}),
        batch_size=4,
    )  # claim 2: only a template echo; claim 3 missing
    single, _ = p_run()
    assert verdict_view(batched) == verdict_view(single)
    alone = [fenced(r, "claim") for r in asked(model, "EvidenceReply")]
    assert alone == ["Marie Curie won the Nobel Prize in Physics in 1903.", "Marie Curie taught at Oxford."]


def test_probe_with_several_judges_batches_per_judge():
    def llm(name):
        return LLM(FakeModel(by_reply=p_script(), name=name), cache=None)

    single = get_method("probe", llm=llm("main"), judges=[llm("a"), llm("b")]).check(P_SOURCE, P_TARGET)
    batched = get_method("probe", llm=llm("main"), judges=[llm("a"), llm("b")], batch_size=3).check(P_SOURCE, P_TARGET)
    assert verdict_view(batched) == verdict_view(single)
    assert batched.usage.calls == 1 + 1 + 2 * 3 and single.usage.calls == 1 + 3 + 2 * 4


def test_probe_batches_only_with_the_whole_source():
    report, model = p_run(batch_size=4, retrieval="always", retriever="bm25", top_k=1, window=0)
    assert report.details["context"]["mode"] == "retrieval"
    assert not {"EvidenceBatchReply", "EvaluationBatchReply"} & set(model.reply_types)
