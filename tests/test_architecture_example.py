"""The "add a method in under 60 lines" example in docs/architecture.md runs as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method
from tests.prompt_data import fenced

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def _example_code() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_the_documented_method_is_short_and_runs_end_to_end():
    code = _example_code()
    assert len([line for line in code.splitlines() if line.strip()]) < 60
    module = types.ModuleType("halluscope_doc_example")
    sys.modules[module.__name__] = module  # pydantic resolves the annotations through the module
    exec(compile(code, str(DOC), "exec"), module.__dict__)

    def reply(messages):  # the documented verifier's reply type is its YesNo model
        claim = fenced(messages, "claim")
        return (
            '{"verdict": "no", "reason": "not stated"}' if "Friday" in claim else '{"verdict": "yes", "reason": "ok"}'
        )

    source = "The ferry opened on Monday. It carries 300 people."
    target = "The ferry opened on Friday. It carries 300 people."
    llm = LLM(FakeModel(by_reply={"YesNo": reply}), cache=None)
    report = get_method("yesno", llm=llm).check(source, target)
    assert report.score == 0.5 and [v.label for v in report.verdicts] == ["unsupported", "supported"]
    assert report.findings[0].target_spans[0].of(target) == "The ferry opened on Friday."
    assert report.details["context"]["mode"] == "full"

    retrieved = get_method(
        "yesno",
        llm=LLM(FakeModel(by_reply={"YesNo": reply}), cache=None),
        retrieval="always",
        top_k=1,
        window=0,
        retriever="bm25",
    ).check(source, target)
    assert retrieved.score == 0.5 and retrieved.details["context"]["mode"] == "retrieval"
    snippets = retrieved.details["context"]["snippets"]
    assert set(snippets) == {"s1", "s2"} and all(len(v) == 1 for v in snippets.values())
