"""The reason of a flagged claim written from its chosen evidence (verdict first, ``reason_from_evidence``): once the
passage and its relation are chosen from probabilities, one short free-text reply is asked for, from the failing fact
and that passage only, naming what the source says instead. It is shown only when it agrees with the relation and
holds no markup (:func:`~halluscope.text.reasons.reason_problem`); otherwise the plain reason built from the passage
(:func:`~halluscope.text.reasons.plain_reason`) is. Prompt and raw reply stay on the verdict's calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope.prompts import PromptTemplate
from halluscope.records import LLMCall
from halluscope.stages.verifiers import reply_budget
from halluscope.text.reasons import plain_reason, reason_problem, shown_text

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM

REASON_REPLY_TOKENS = 80
"""The reason's reply budget: one sentence."""

REASON_TASKS = {
    "contradicts": (
        "The PASSAGE contradicts the CLAIM. In one plain sentence, say what the CLAIM states and what the PASSAGE "
        "says instead."
    ),
    "not_mentioned": (
        "The source never mentions what the CLAIM states; the PASSAGE is the part of the source closest to it. In "
        "one plain sentence, say what the CLAIM states that the source does not mention."
    ),
}
"""The task the reason prompt gives (its ``$task``), by the relation read from probabilities."""

VERDICT_REASON_PROMPT = PromptTemplate(
    name="verdict_first_reason",
    version="1",
    system="You are a careful fact-checker. You explain your findings briefly, in plain words.",
    literal=("task",),
    shared=("passage",),
    user="$task Write only that sentence.\n\nPASSAGE:\n$passage\n\nCLAIM:\n$claim",
)


async def evidence_reason(
    llm: LLM, prompt: PromptTemplate, claim: str, passage: str | None, relation: str
) -> tuple[str, list[LLMCall], str | None]:
    """The reason shown for ``claim`` (the failing fact) given its chosen ``passage`` and ``relation``, the call
    made, and why the generated reason was set aside for the plain one (None when it is shown). No call without a
    passage: the plain reason then says the source does not mention it."""
    plain = plain_reason(relation, passage, claim)
    if not passage or relation not in REASON_TASKS:
        return plain, [], "no passage to write a reason from"
    messages = prompt.render(task=REASON_TASKS[relation], passage=passage, claim=claim)
    params = llm.params(max_tokens=reply_budget(llm, REASON_REPLY_TOKENS), json_mode=False, json_schema=None)
    try:
        completion = await llm.generate(messages, params)
    except Exception as exc:  # noqa: BLE001 - a failed reason call leaves the plain reason, never the claim
        return plain, [], f"the reason call failed: {type(exc).__name__}: {exc}"[:300]
    call = LLMCall(
        model=completion.model,
        messages=[dict(m) for m in messages],
        reply=completion.text,
        cached=completion.cached,
        usage=completion.usage,
    )
    problem = reason_problem(completion.text, relation, claim, passage)
    if problem is not None:
        return plain, [call], problem
    return shown_text(completion.text), [call], None
