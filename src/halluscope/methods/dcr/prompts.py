"""DCE's prompts (sentence, paragraph, excerpt, excerpt batch) and AMC's."""

from __future__ import annotations

from halluscope.methods.dcr.replies import AmcReply, DceExcerptBatchReply, DceReply, DceSingleReply
from halluscope.prompts import PromptTemplate

_SYSTEM = (
    "You are a meticulous fact-checker. You compare a text with the source document it is supposed to "
    "be based on, and you explain every judgment."
)
_CHECK = (
    "work out every piece of information it states: who did what, to whom, when, where, how much or how "
    "many, why, and with what result"
)

DCE_SENTENCE_PROMPT = PromptTemplate(
    name="dcr_dce_sentence",
    version="2",
    reply=DceReply,
    system=_SYSTEM,
    user=(
        "Check, one sentence at a time, whether the TEXT is consistent with the SOURCE.\n\n"
        f"For each numbered sentence of the TEXT:\n- {_CHECK};\n"
        "- look for each piece in the SOURCE;\n"
        "- the sentence is consistent only if the SOURCE states or directly implies all of it. Anything the "
        "SOURCE contradicts, or that cannot be found in or inferred from the SOURCE, makes it inconsistent.\n"
        "The TEXT does not have to mention everything in the SOURCE: leaving things out is not an error.\n\n"
        'Give exactly one entry per sentence, in order, with the sentence\'s number as "id". Start each '
        "\"reason\" with 'Consistent:' or 'Inconsistent:', then explain; when inconsistent, quote the exact "
        "words of the sentence that the SOURCE does not support and say what the SOURCE says instead.\n\n"
        "$format\n\n"
        "SOURCE:\n$source\n\n"
        "TEXT, one numbered sentence per line:\n$sentences"
    ),
)

DCE_PARAGRAPH_PROMPT = PromptTemplate(
    name="dcr_dce_paragraph",
    version="2",
    reply=DceSingleReply,
    system=_SYSTEM,
    user=(
        "Check whether the TEXT as a whole is consistent with the SOURCE.\n\n"
        f"Work out every piece of information the TEXT states ({_CHECK.split(': ', 1)[1]}) and look for each "
        "in the SOURCE. The TEXT is consistent only if the SOURCE states or directly implies all of it; "
        "anything contradicted by the SOURCE, or not found in it, makes the TEXT inconsistent. Leaving things "
        "out is not an error.\n\n"
        "Start the \"reason\" with 'Consistent:' or 'Inconsistent:', then explain; quote the exact words of "
        "the TEXT that the SOURCE does not support.\n\n$format\n\n"
        "SOURCE:\n$source\n\nTEXT:\n$target"
    ),
)

_EXCERPT_RULE = (
    "is consistent only if the EXCERPT states or directly implies every piece of information in it (who, "
    "what, when, where, how much, why, result). Anything contradicted by the EXCERPT, or not found in "
    "it, makes the sentence inconsistent."
)


def _excerpt_user(batch: bool) -> str:
    """The excerpt check, one wording for one SENTENCE and for numbered SENTENCES (``batch``)."""
    intro = (
        "Below is an EXCERPT of a long source document and {} from a text that is supposed to be based on that "
        "document. "
    ).format("numbered SENTENCES" if batch else "one SENTENCE")
    reason = "'Consistent:' or 'Inconsistent:', then explain.\n\n$format\n\nEXCERPT:\n$source\n\n"
    if not batch:
        return (
            intro + "Decide whether the EXCERPT supports the SENTENCE: the sentence " + _EXCERPT_RULE + "\n\n"
            'Start the "reason" with ' + reason + "SENTENCE:\n$sentence"
        )
    return (
        intro
        + "For each sentence on its own, decide whether the EXCERPT supports it: a sentence "
        + _EXCERPT_RULE
        + " The other sentences are not evidence.\n\nGive exactly one entry per sentence, with its number as "
        '"id". Start each "reason" with ' + reason + "There are $count SENTENCES.\n\nSENTENCES:\n$sentences"
    )


DCE_EXCERPT_PROMPT = PromptTemplate(
    name="dcr_dce_excerpt",
    version="2",
    reply=DceSingleReply,
    system=_SYSTEM,
    user=_excerpt_user(batch=False),
)

DCE_EXCERPT_BATCH_PROMPT = PromptTemplate(
    name="dcr_dce_excerpt_batch",
    version="1",
    reply=DceExcerptBatchReply,
    literal=("count",),
    system=_SYSTEM,
    user=_excerpt_user(batch=True),
)

AMC_PROMPT = PromptTemplate(
    name="dcr_amc",
    version="2",
    reply=AmcReply,
    literal=("count",),
    system="You read reviewers' assessments and classify what they conclude.",
    user=(
        "A reviewer compared a text with its source document and wrote the numbered assessments below, each "
        "about one sentence of the text (or about the text as a whole).\n"
        "For each assessment, decide what it concludes:\n"
        "- 1 if it finds the sentence consistent with the source (everything in it is supported);\n"
        "- -1 if it reports any problem: information that is wrong, contradicted, unsupported, not mentioned "
        "in the source, or unclear.\n\n"
        "$format\n\n"
        'There are $count assessments, so "marks" must hold exactly $count marks, in order, each the number 1 '
        "or -1.\n\n"
        "ASSESSMENTS:\n$reasons"
    ),
)

DCR_PROMPTS = (DCE_SENTENCE_PROMPT, DCE_PARAGRAPH_PROMPT, DCE_EXCERPT_PROMPT, DCE_EXCERPT_BATCH_PROMPT, AMC_PROMPT)
DCE_REPLY_TOKENS = 1024  # room kept for the DCE reply when checking that a prompt fits the context
