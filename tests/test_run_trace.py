"""One typed trace per check, passed along by the pipeline (no context variables): DCR's DCE notes and PROBE's
step record travel in it, a stage used outside a check records nothing, and concurrent checks keep their own."""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path

import halluscope
from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method
from halluscope.methods.dcr import DceNotes
from halluscope.methods.probe.trace import ProbeTrace
from halluscope.records import Claim, Span
from halluscope.stages import Context
from halluscope.stages.trace import RunTrace, bind_trace
from tests.conftest import fake_llm
from tests.prompt_data import fenced
from tests.test_dcr import SOURCE, dce, marks


def test_records_are_typed_and_made_once():
    trace = RunTrace()
    assert trace.get(DceNotes) is None
    notes = trace.record(DceNotes)
    assert isinstance(notes, DceNotes) and trace.record(DceNotes) is notes and trace.get(DceNotes) is notes
    assert trace.get(ProbeTrace) is None  # one record per type
    assert bind_trace("a stage that records nothing", trace) == "a stage that records nothing"


async def test_the_dcr_verifier_records_its_notes_in_the_contexts_trace_only():
    claim = Claim(text="Alice founded Acme in 1999.", id="s1", target_spans=[Span(start=0, end=27)])
    replies = (dce((1, "Inconsistent: the year is 2001."), (None, "Consistent: overall fine.")), marks(-1, 1))
    method = get_method("dcr", llm=fake_llm(*replies))
    trace = RunTrace()
    traced = await method.verifier([claim], Context(text=SOURCE, trace=trace), SOURCE)
    notes = trace.get(DceNotes)
    assert notes is not None and notes.is_consistent is False
    assert [(o.text, o.mark) for o in notes.other_reasons] == [("Consistent: overall fine.", 1)]
    plain = await get_method("dcr", llm=fake_llm(*replies)).verifier([claim], Context(text=SOURCE), SOURCE)
    assert [v.label for v in plain] == [v.label for v in traced] == ["unsupported"]  # same verdicts, no trace needed


async def test_concurrent_checks_on_one_instance_keep_their_own_notes():
    def respond(messages):
        consistent = "Paris" in fenced(messages, "sentences")  # the target's numbered sentences
        reason = "Consistent: stated." if consistent else "Inconsistent: not stated."
        return dce((1, reason), is_consistent=consistent)

    # amc=rule: DCE is the only call; any other request finds no scripted reply
    method = get_method("dcr", llm=LLM(FakeModel(by_reply={"DceReply": respond}), cache=None), amc="rule")
    paris, rome = await asyncio.gather(
        method.acheck(SOURCE, "Alice lived in Paris."), method.acheck(SOURCE, "Alice lived in Rome.")
    )
    assert paris.details["dce_is_consistent"] is True and rome.details["dce_is_consistent"] is False


async def test_probe_steps_come_from_the_checks_trace():
    claims = json.dumps({"claims": [{"claim": "Alice founded Acme in 1999.", "span": "Alice founded Acme in 1999."}]})
    method = get_method("probe", llm=fake_llm(claims, json.dumps({"evidence": []})))
    report = await method.acheck(SOURCE, "Alice founded Acme in 1999.")
    steps = report.details["steps"]
    assert [c["text"] for c in steps["decomposition"]["claims"]] == ["Alice founded Acme in 1999."]
    assert [e["claim_id"] for e in steps["evidence_finding"]] == [report.claims[0].id]


def test_no_method_keeps_check_state_in_a_context_variable():
    root = Path(halluscope.__file__).parent / "methods"
    users = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and any("contextvars" in (getattr(node, "module", None) or "") or "contextvars" in a.name for a in node.names)
    ]
    assert users == []
