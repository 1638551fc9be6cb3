"""DoveScore's prompt templates (DoveScore paper, Tables 7-9, adapted: JSON replies, fenced inputs).

Every ``$placeholder`` value is fenced by :class:`~halluscope.prompts.PromptTemplate` (the texts are data,
never instructions); ``$format`` is filled from the template's reply schema (:mod:`.replies`)."""

from __future__ import annotations

from halluscope.methods.dove.replies import (
    DoveBatchReply,
    DoveCheckReply,
    DoveFactsReply,
    DoveOrderReply,
)
from halluscope.prompts import PromptTemplate

DOVE_EXAMPLE_EVENTS = ("The committee rejected the proposal.", "Anna felt relieved after the exam.")
DOVE_EXAMPLE_DESCRIPTIVE = ("Copper conducts electricity.", "Tom is Anna's brother.")
DOVE_EXAMPLE_FACTS = DOVE_EXAMPLE_EVENTS + DOVE_EXAMPLE_DESCRIPTIVE
"""The decomposer prompt's example facts: a reply that only copies them has decomposed nothing."""


DOVE_SORT_EXAMPLE_ORDER = (2, 4, 3, 1)
"""The sorter prompt's example answer: copied for a list that is not 4 events long, it is an echo."""


def _quoted(examples: tuple[str, ...]) -> str:
    return ", ".join(f'"{e}"' for e in examples)


DOVE_DECOMPOSE_PROMPT = PromptTemplate(
    name="dove_decompose",
    version="2",
    reply=DoveFactsReply,
    shared=("target",),
    system="You break texts into small, checkable facts.",
    user=(
        "Split the TEXT below into independent, self-contained factual statements, and sort each one into "
        "one of two kinds.\n\n"
        "EVENT facts are tied to a point in time: actions, happenings, changes, and feelings or states someone "
        f"goes through at a particular moment (e.g. {_quoted(DOVE_EXAMPLE_EVENTS)}). They can be placed on a "
        "timeline.\n"
        "DESCRIPTIVE facts are not tied to a moment: definitions, classifications, lasting properties and "
        f"relationships (e.g. {_quoted(DOVE_EXAMPLE_DESCRIPTIVE)}).\n\n"
        "Rules:\n"
        "1. Each fact is one short sentence that can be understood on its own: replace pronouns and other "
        'references ("she", "the company", "that day") with the names they refer to.\n'
        "2. Keep to what the text says; add nothing.\n"
        "3. List the event facts in the chronological order in which, according to the TEXT, they happened "
        "(this can differ from the order in which the text mentions them). Descriptive facts can be in any "
        "order. An empty list is fine when the TEXT has no fact of that kind.\n\n"
        "$format\n\nTEXT:\n$target"
    ),
)

_JUDGING_RULES = (
    "Use only the SOURCE, not outside knowledge. A fact is supported when the SOURCE states it or clearly "
    "implies it; it is contradicted when the SOURCE says something incompatible with it; otherwise (the SOURCE "
    "neither confirms nor contradicts it) it is simply not supported. Quote as evidence the shortest exact "
    "passage of the SOURCE that decides it, or give an empty string."
)

DOVE_CHECK_PROMPT = PromptTemplate(
    name="dove_check",
    version="2",
    reply=DoveCheckReply,
    system="You are a meticulous fact-checker who judges statements only against the source text you are given.",
    user=(
        "Is the FACT true according to the SOURCE? "
        + _JUDGING_RULES
        + "\n\n$format\n\nSOURCE:\n$source\n\nFACT:\n$fact"
    ),
)

DOVE_CHECK_BATCH_PROMPT = PromptTemplate(
    name="dove_check_batch",
    version="2",
    reply=DoveBatchReply,
    literal=("count",),
    system=DOVE_CHECK_PROMPT.system,
    user=(
        "For each of the numbered FACTS, decide whether it is true according to the SOURCE. Judge every "
        "fact on its own. " + _JUDGING_RULES + " Give exactly one entry per fact, with the fact's number as its "
        "id.\n\n$format\n\nSOURCE:\n$source\n\nThere are $count FACTS.\n\nFACTS:\n$facts"
    ),
)

DOVE_SORT_PROMPT = PromptTemplate(
    name="dove_sort",
    version="2",
    reply=DoveOrderReply,
    shared=("text",),
    system="You put events in the chronological order in which they happen in a text.",
    user=(
        "Below are a TEXT and a numbered list of EVENTS from it. Order the events by when they happen according "
        "to the TEXT, earliest first. A text can mention events in a different order from the one in which "
        'they happen (flashbacks, "earlier", "before that"): follow the timeline, not the order of mention. '
        "Do not add, drop, merge or reword events: use every number exactly once.\n\n"
        "Example:\n"
        "TEXT: The guests arrived after Paul had set the table. Before setting the table, he cooked the soup. "
        "Once everyone had eaten, they played cards.\n"
        "EVENTS:\n1. The guests played cards\n2. Paul cooked the soup\n3. The guests arrived\n4. Paul set the table\n"
        f'ORDER: {{"order": {list(DOVE_SORT_EXAMPLE_ORDER)}}}\n\n'
        "$format\n\nTEXT:\n$text\n\nEVENTS:\n$events"
    ),
)
