"""FActScore's prompts (FINAL's Pipeline baseline, FINAL paper App. C.2, H.2.5): decomposition, verification with
or without descriptions (one fact, or several numbered facts per call) and de-duplication."""

from __future__ import annotations

from halluscope.methods.factscore.replies import (
    FactCheckBatchReply,
    FactCheckReply,
    FactJudgmentBatchReply,
    FactJudgmentReply,
    FactsReply,
    KeepReply,
)
from halluscope.prompts import PromptTemplate

_SYSTEM = "You are a meticulous fact-checker who compares texts with the source documents they are based on."

FACTSCORE_DECOMPOSE_PROMPT = PromptTemplate(
    name="factscore_decompose",
    version="2",
    reply=FactsReply,
    shared=("sentences",),
    system=_SYSTEM,
    user=(
        "Break the TEXT below into atomic facts. An atomic fact is a short, self-contained statement that "
        "carries exactly one piece of information (one relation, one number, one date, one attribute...). "
        "Replace pronouns and vague references with the names they stand for, so that each fact can be "
        "understood on its own. Cover every piece of information in the TEXT, and add nothing that it does "
        "not say. For each fact give the number of the sentence it comes from.\n\n"
        "$format\n\nTEXT, one numbered sentence per line:\n$sentences"
    ),
)

_SUPPORT_RULE = (
    "only if the SOURCE states it or it follows directly from the SOURCE; a fact that the SOURCE "
    "contradicts, or that cannot be verified from it, is not supported."
)
_DESCRIBE_RULE = (
    "describe every inconsistency separately: for each, say what the fact claims (quote its words in "
    "double quotes) and what the SOURCE says instead, or which detail the SOURCE does not contain. Be "
    "brief and specific; "
)


def _verify_user(describe: bool, batch: bool) -> str:
    """The verification instruction, one wording for one FACT and for a list of numbered FACTS (``batch``), with
    or without (``describe``) a description of each inconsistency."""
    if not batch:
        text = "Is the FACT supported by the SOURCE? It is supported " + _SUPPORT_RULE
        if describe:
            text += (
                "\nIf and only if it is not supported, " + _DESCRIBE_RULE + "avoid vague statements such as "
                '"this cannot be verified". Never put two problems in one description.'
            )
        return text + "\n\n$format\n\nSOURCE:\n$source\n\nFACT:\n$fact"
    text = (
        "For each of the numbered FACTS, decide on its own whether the SOURCE supports it. A fact is supported "
        + _SUPPORT_RULE
        + " Judge every fact separately: another fact in the list is not evidence."
    )
    if describe:
        text += (
            "\nFor a fact that is not supported, and only then, " + _DESCRIBE_RULE + "never put two problems in "
            "one description. A supported fact has an empty list.\n"
        )
    else:
        text += " "
    return (
        text + "Give exactly one entry per fact, with the fact's number as its id.\n\n"
        "$format\n\nSOURCE:\n$source\n\nThere are $count FACTS.\n\nFACTS:\n$facts"
    )


FACTSCORE_VERIFY_PROMPT = PromptTemplate(
    name="factscore_verify",
    version="2",
    reply=FactCheckReply,
    system=_SYSTEM,
    user=_verify_user(describe=False, batch=False),
)

FACTSCORE_DESCRIBE_PROMPT = PromptTemplate(
    name="factscore_describe",
    version="2",
    reply=FactJudgmentReply,
    system=_SYSTEM,
    user=_verify_user(describe=True, batch=False),
)

FACTSCORE_VERIFY_BATCH_PROMPT = PromptTemplate(
    name="factscore_verify_batch",
    version="1",
    reply=FactCheckBatchReply,
    literal=("count",),
    system=_SYSTEM,
    user=_verify_user(describe=False, batch=True),
)

FACTSCORE_DESCRIBE_BATCH_PROMPT = PromptTemplate(
    name="factscore_describe_batch",
    version="1",
    reply=FactJudgmentBatchReply,
    literal=("count",),
    system=_SYSTEM,
    user=_verify_user(describe=True, batch=True),
)

FACTSCORE_DEDUP_PROMPT = PromptTemplate(
    name="factscore_dedup",
    version="2",
    reply=KeepReply,
    shared=("target",),
    system=_SYSTEM,
    user=(
        "Below are a TEXT and a numbered list of descriptions of factual inconsistencies found in it. They were "
        "written separately for different parts of the TEXT, so several descriptions may be about the same "
        "inconsistency: the same wrong or unsupported piece of information in the TEXT, described in "
        "different words or for different reasons.\n"
        "Group the descriptions that are about the same piece of information. From each group keep only the "
        "one that states the inconsistency most precisely. Keep every description that has no duplicate. Do "
        "not merge descriptions of different pieces of information, and do not drop a description for any "
        "other reason.\n\n"
        "$format\n\nTEXT:\n$target\n\nDESCRIPTIONS:\n$descriptions"
    ),
)

VERIFY_REPLY_TOKENS = 512
