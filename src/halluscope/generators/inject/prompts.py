"""The injection prompts (inventing facts, weaving them in) and the shape of the invention reply."""

from __future__ import annotations

import re

from pydantic import BaseModel

from halluscope.prompts import PromptTemplate

COMPLEXITY_INSTRUCTIONS = {
    1: "Insert the single new fact as a plain statement of its own, at a place in the TEXT where it fits.",
    2: (
        "Fasten each new fact to something the TEXT already says: present it as a detail, a reason or a "
        "consequence of the true statement it sits next to (as a clause of that sentence or as the sentence "
        "right after it)."
    ),
    3: (
        "Fasten the new facts to what the TEXT already says, as details, reasons or consequences of the true "
        "statements next to them; and present at least one new fact as the background or cause from which a "
        "statement of the TEXT follows, so that the invented fact reads as the premise of something the TEXT "
        "says."
    ),
}

# ``${source_block}`` is a slot, not a value: the code fills it with SOURCE_BLOCK (a heading and the fenced
# ``$source``) when the source fits the model's context and with nothing when it does not (see ``invent``).
SOURCE_BLOCK = "SOURCE (the material the TEXT was written from):\n$source\n\n"
_SOURCE_SLOT = re.compile(r"\$(?:\{source_block\}|source_block(?![_A-Za-z0-9]))")

INVENT_PROMPT = PromptTemplate(
    name="inject_invent",
    version="2",
    system="You write believable but unsupported statements, used to test hallucination detectors.",
    user=(
        "Invent $k new statements about the subject of the TEXT below. Each statement must:\n"
        "- be one declarative sentence that can be judged true or false, with something concrete in it "
        "(a name, number, date, place, cause or event);\n"
        "- be believable next to the TEXT, and not simply negate or contradict what it says;\n"
        "- NOT be stated in the source material, and NOT follow logically from anything in it.\n\n"
        'Reply with one JSON object: {"facts": ["<statement>", ...]}\n\n'
        "${source_block}"
        "TEXT:\n$target"
    ),
    literal=("k",),
)

WEAVE_PROMPT = PromptTemplate(
    name="inject_weave",
    version="2",
    system="You are a careful editor who inserts given sentences into a text without changing anything else.",
    user=(
        "Edit the TEXT so that it also states the NEW FACTS.\n\n"
        "Rules:\n"
        "- Leave every existing word and punctuation mark of the TEXT exactly as it is: do not reword, "
        "reorder, shorten or delete anything. You may only insert.\n"
        "- Wrap every piece you insert in <ins> and </ins>, including any linking words or punctuation you "
        'add, e.g. "The bridge<ins>, finished in 1820,</ins> crosses the river."\n'
        "- $instructions\n"
        "- The insertions must read naturally and be spread through the text, not all put at the end.\n"
        "- Add no information beyond the NEW FACTS.\n\n"
        "Reply with the complete edited text and nothing else.\n\n"
        "TEXT:\n$target\n\n"
        "NEW FACTS:\n$facts"
    ),
    shared=("target",),
    literal=("instructions",),  # one of COMPLEXITY_INSTRUCTIONS, written by the code
)


def with_source_block(template: PromptTemplate, block: str) -> PromptTemplate:
    """``template`` with its ``${source_block}`` slot replaced by ``block`` (SOURCE_BLOCK or "")."""
    return template.model_copy(update={"user": _SOURCE_SLOT.sub(lambda _: block, template.user)})


class _Facts(BaseModel):
    facts: list[str]
