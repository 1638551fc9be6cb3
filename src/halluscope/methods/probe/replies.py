"""What PROBE asks the model, and what it accepts back: one reply schema and one prompt per step.

Each reply is a strict :class:`~halluscope.llm.replies.Reply`: JSON with the declared fields and types, nothing
read from prose. The only normalization is of a *stated* value (a verdict written ``"pass"`` reads as
``"PASS"``); ``"NOT PASS"``, ``"pass?"`` or a verdict outside the ``verdict`` field are not verdicts.
Template echoes (``<claim>``, ``[claim]``, ``{claim}``, ``(claim)``, ``...``, ``…``, ``N/A``, the prompt's
own example) are never claims and never quotes: see :func:`is_template_echo`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from halluscope.llm.replies import Reply
from halluscope.methods.batching import batch_reply, numbered_entry
from halluscope.prompts import PromptTemplate
from halluscope.text.labels import stated_label
from halluscope.text.placeholders import is_placeholder, shown_strings

# ------------------------------------------------------------------------------------------ template echoes

is_template_echo = is_placeholder  # PROBE's name for the shared filter (text/placeholders.py)
reply_examples = shown_strings


# ------------------------------------------------------------------------------------------- step 1: claims


class ClaimEntry(BaseModel):
    """One assertion of the target and the target words it comes from."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    segment: str = Field(default="", description="the exact words of the TEXT that express the assertion")
    claim: str = Field(description="the assertion as one short sentence")


class ClaimsReply(Reply):
    """Step 1 (claim decomposition). Echoed placeholders are dropped; a reply with no real claim left fails."""

    claims: list[ClaimEntry] = Field(description="every assertion of the TEXT, in TEXT order")
    example: ClassVar[dict[str, Any] | None] = {
        "claims": [{"segment": "opened in 1998", "claim": "The museum opened in 1998."}]
    }
    refuse_example_echo: ClassVar[bool] = False  # parse_claims keeps an example claim only when the TEXT says it


DECOMPOSE_PROMPT = PromptTemplate(
    name="probe_decompose",
    version="2",
    reply=ClaimsReply,
    shared=("target",),
    system="You split a generated text into the smallest statements that can each be checked on their own.",
    user=(
        "The TEXT below was generated from some source material (it may be a summary, an answer, or a "
        "rewrite). List every assertion it makes, however small: every name, number, date, place, action, "
        "cause, quality and relationship it states, including those in headings or lists.\n\n"
        "For each assertion give:\n"
        '- "claim": one short sentence that can be judged true or false without reading the TEXT '
        "(replace pronouns and vague references with what they refer to);\n"
        '- "segment": the exact words of the TEXT that express it, copied character for character as one '
        "contiguous stretch (the shortest stretch that carries the assertion).\n\n"
        "$format\n\nTEXT:\n$target"
    ),
)

# ---------------------------------------------------------------------------------------- step 2: evidence


class EvidenceReply(Reply):
    """Step 2 (evidence finding). ``evidence: []`` is the explicit "nothing bears on it" answer; a list whose
    every item is a template echo is refused (the model repeated the format instead of quoting)."""

    reasoning: str = Field(default="", description="brief thoughts")
    evidence: list[str] = Field(
        description="passages copied exactly from the SOURCE, most relevant first; "
        "an empty list when nothing in the SOURCE bears on the assertion"
    )

    @field_validator("evidence")
    @classmethod
    def _real_quotes(cls, quotes: list[str]) -> list[str]:
        kept = [q.strip() for q in quotes if not is_template_echo(q)]
        if quotes and not kept:
            raise ValueError("the evidence list repeats the template placeholder instead of quoting the source")
        return kept


FULL_SOURCE_HEADING = "SOURCE"
SNIPPET_HEADING = "SOURCE EXCERPT (part of a longer document: the part most related to the assertion)"

FIND_EVIDENCE_PROMPT = PromptTemplate(
    name="probe_find_evidence",
    version="2",
    reply=EvidenceReply,
    literal=("max_evidence", "source_heading"),
    system="You locate passages in a source document, quoting them exactly.",
    user=(
        "Find the passages of the $source_heading that bear on the ASSERTION: passages that support it, "
        "contradict it, or are otherwise directly relevant to checking it.\n\n"
        "Rules:\n"
        "- Copy each passage exactly as it is written, character for character: whole sentences, not "
        "paraphrases, not fragments glued together.\n"
        "- Give at most $max_evidence passages, most relevant first.\n"
        "- If nothing bears on the assertion, give an empty list.\n\n"
        "$format\n\n"
        "$source_heading:\n$source\n\n"
        "ASSERTION:\n$claim"
    ),
)

# -------------------------------------------------------------------------------------- step 3: evaluation


class EvaluationReply(Reply):
    """Step 3 (evidence evaluation): one judge's PASS/FAIL on one excerpt. Only the exact label counts."""

    reasoning: str = Field(default="", description="your analysis, based on the excerpt alone")
    verdict: Literal["PASS", "FAIL"] = Field(description="PASS if the excerpt alone supports the assertion, else FAIL")

    @field_validator("verdict", mode="before")
    @classmethod
    def _stated_label(cls, value: object) -> object:
        """``"pass"`` / ``" Fail "`` are the stated label in another case; anything else stays as written (and
        fails validation), look-alikes included: ``"paſs"`` (long s) or ``"faıl"`` (dotless i) are no label
        (:func:`~halluscope.text.labels.stated_label`)."""
        label = stated_label(value, ("PASS", "FAIL"))
        return label if label is not None else value


EVALUATE_PROMPT = PromptTemplate(
    name="probe_evaluate",
    version="2",
    reply=EvaluationReply,
    shared=("evidence", "context"),  # callers pass about=source: the key is the source's
    system="You are a strict fact-checker who judges one piece of evidence at a time.",
    user=(
        "Decide whether the EVIDENCE EXCERPT, on its own, supports the ASSERTION.\n\n"
        "The SURROUNDING CONTEXT is the source text around the excerpt. Use it only to understand the "
        "excerpt (who or what it refers to); it is not evidence. If the assertion follows only from the "
        "context, or needs guesses or long chains of inference beyond the excerpt, the excerpt does not "
        "support it. Every part of the assertion (names, numbers, dates, places, causes) must be backed by "
        "the excerpt.\n\n"
        "$format\n\n"
        "EVIDENCE EXCERPT:\n$evidence\n\n"
        "SURROUNDING CONTEXT:\n$context\n\n"
        "ASSERTION:\n$claim"
    ),
)

# ------------------------------------------------------------------------ batched steps 2 and 3 (batch_size)


EvidenceBatchEntry = numbered_entry(
    EvidenceReply,
    "assertion",
    name="EvidenceBatchEntry",
    doc="Batched step 2: the passages for the assertion numbered ``id`` (an entry that only echoes the template is "
    "refused, as in :class:`EvidenceReply`).",
)
EvidenceBatchReply = batch_reply(
    EvidenceBatchEntry,
    "assertion",
    name="EvidenceBatchReply",
    doc="Batched step 2 (``batch_size`` > 1, whole source): one entry per numbered assertion.",
    example={
        "results": [
            {"id": 1, "reasoning": "the opening date is stated", "evidence": ["The museum opened in 1998."]},
            {"id": 2, "reasoning": "nothing about its size", "evidence": []},
        ]
    },
)
EvaluationBatchEntry = numbered_entry(
    EvaluationReply,
    "assertion",
    name="EvaluationBatchEntry",
    doc="Batched step 3: one judge's PASS/FAIL for the assertion numbered ``id`` against the one excerpt.",
)
EvaluationBatchReply = batch_reply(
    EvaluationBatchEntry,
    "assertion",
    name="EvaluationBatchReply",
    doc="Batched step 3 (``batch_size`` > 1): the assertions that quoted the same excerpt, each judged on its own.",
)


FIND_EVIDENCE_BATCH_PROMPT = PromptTemplate(
    name="probe_find_evidence_batch",
    version="1",
    reply=EvidenceBatchReply,
    literal=("max_evidence", "count"),
    system=FIND_EVIDENCE_PROMPT.system,
    user=(
        "For each of the numbered ASSERTIONS, on its own, find the passages of the SOURCE that bear on it: "
        "passages that support it, contradict it, or are otherwise directly relevant to checking it.\n\n"
        "Rules:\n"
        "- Copy each passage exactly as it is written, character for character: whole sentences, not "
        "paraphrases, not fragments glued together.\n"
        "- Give at most $max_evidence passages per assertion, most relevant first.\n"
        "- If nothing bears on an assertion, give it an empty list.\n"
        "- Give exactly one entry per assertion, with the assertion's number as its id.\n\n"
        "$format\n\n"
        "SOURCE:\n$source\n\n"
        "There are $count ASSERTIONS.\n\n"
        "ASSERTIONS:\n$claims"
    ),
)

EVALUATE_BATCH_PROMPT = PromptTemplate(
    name="probe_evaluate_batch",
    version="1",
    reply=EvaluationBatchReply,
    literal=("count",),
    shared=("evidence", "context"),
    system=EVALUATE_PROMPT.system,
    user=(
        "For each of the numbered ASSERTIONS, on its own, decide whether the EVIDENCE EXCERPT, on its own, "
        "supports it.\n\n"
        "The SURROUNDING CONTEXT is the source text around the excerpt. Use it only to understand the "
        "excerpt (who or what it refers to); it is not evidence. If an assertion follows only from the "
        "context, or needs guesses or long chains of inference beyond the excerpt, the excerpt does not "
        "support it. Every part of the assertion (names, numbers, dates, places, causes) must be backed by "
        "the excerpt. The other assertions are not evidence either. Give exactly one entry per assertion, with "
        "its number as its id.\n\n"
        "$format\n\n"
        "EVIDENCE EXCERPT:\n$evidence\n\n"
        "SURROUNDING CONTEXT:\n$context\n\n"
        "There are $count ASSERTIONS.\n\n"
        "ASSERTIONS:\n$claims"
    ),
)

FIND_REPLY_TOKENS = 768  # reply budgets per step, capped by Config.max_tokens
EVALUATE_REPLY_TOKENS = 512
