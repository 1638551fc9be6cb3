"""Batch reply schemas are derived from the single-claim ones (methods/batching.py): an entry is the single reply
plus ``id``, so it keeps the single reply's fields, wording and validators, and a batch call numbers its units."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from halluscope.llm import LLM, FakeModel
from halluscope.methods.batching import BatchCall, batch_reply, numbered_entry
from halluscope.methods.dcr import DceExcerptBatchReply, DceExcerptEntry, DceSingleReply
from halluscope.methods.dove import DoveBatchJudgment, DoveBatchReply, DoveCheckReply
from halluscope.methods.factscore import (
    FACTSCORE_VERIFY_BATCH_PROMPT,
    FactCheckBatchEntry,
    FactCheckBatchReply,
    FactCheckReply,
    FactJudgmentBatchEntry,
    FactJudgmentBatchReply,
    FactJudgmentReply,
)
from halluscope.methods.probe.replies import (
    EvaluationBatchEntry,
    EvaluationBatchReply,
    EvaluationReply,
    EvidenceBatchEntry,
    EvidenceBatchReply,
    EvidenceReply,
)

DERIVED = [
    (FactCheckReply, FactCheckBatchEntry, FactCheckBatchReply),
    (FactJudgmentReply, FactJudgmentBatchEntry, FactJudgmentBatchReply),
    (DoveCheckReply, DoveBatchJudgment, DoveBatchReply),
    (EvidenceReply, EvidenceBatchEntry, EvidenceBatchReply),
    (EvaluationReply, EvaluationBatchEntry, EvaluationBatchReply),
    (DceSingleReply, DceExcerptEntry, DceExcerptBatchReply),
]


@pytest.mark.parametrize("single, entry, reply", DERIVED, ids=lambda t: t.__name__)
def test_an_entry_is_the_single_reply_plus_its_number(single, entry, reply):
    single_props = single.model_json_schema()["properties"]
    entry_props = entry.model_json_schema()["properties"]
    assert list(entry_props) == [*single_props, "id"]
    assert {k: entry_props[k] for k in single_props} == single_props  # same types and descriptions
    assert issubclass(entry, single) and entry_props["id"]["minimum"] == 1
    assert reply.model_fields["results"].annotation == list[entry] and reply.bare_list_field == "results"
    assert reply.format_instructions().startswith("Answer with one JSON object")


def test_an_entry_keeps_the_single_replys_validators():
    with pytest.raises(ValidationError, match="contradicts itself"):
        FactJudgmentBatchEntry.model_validate({"id": 1, "supported": True, "inconsistencies": ["the year is wrong"]})
    with pytest.raises(ValidationError):
        FactCheckBatchEntry.model_validate({"id": 0, "supported": True})  # numbers start at 1


def test_a_derived_batch_reply_refuses_its_own_example_echoed():
    entry = numbered_entry(FactCheckReply, "thing", name="ThingEntry", doc="one thing")
    reply = batch_reply(
        entry, "thing", name="ThingBatch", doc="things", example={"results": [{"id": 1, "supported": True}]}
    )
    assert entry.model_json_schema()["properties"]["id"]["description"] == "the number of the thing"
    assert reply.echoes() == [reply.example, reply.example["results"]]


async def test_a_batch_call_numbers_the_units_and_reads_the_reply_per_unit():
    reply = json.dumps({"results": [{"id": 2, "supported": True}, {"id": 1, "supported": False}]})
    budgets: list[int | None] = []

    class Recording(FakeModel):
        async def generate(self, messages, params):
            budgets.append(params.max_tokens)
            return await super().generate(messages, params)

    fake = Recording(default=reply)
    llm = LLM(fake, cache=None)
    call = BatchCall(FACTSCORE_VERIFY_BATCH_PROMPT, FactCheckBatchEntry, listing="facts", unit="fact", reply_tokens=100)
    step = await call.ask(llm, ["First  fact.", "Second\nfact."], source="The source.")
    user = fake.requests[0][-1]["content"]
    assert "1. First fact.\n2. Second fact." in user and "There are 2 FACTS." in user
    assert budgets == [call.budget(llm, 2)] and call.budget(llm, 2) >= 2 * min(100, llm.default_params.max_tokens)
    assert step.answers is not None and not step.answers.judged[0].supported and step.answers.judged[1].supported
