"""FActScore's prompts (FINAL's Pipeline baseline, FINAL paper App. C.2, H.2.5): decomposition, verification with
or without descriptions (one fact, or several numbered facts per call) and de-duplication."""

from __future__ import annotations

from halluscope.methods.factscore.replies import (FactCheckBatchReply, FactCheckReply, FactJudgmentBatchReply,
                                                  FactJudgmentReply, FactsReply, KeepReply)
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

FACTSCORE_VERIFY_PROMPT = PromptTemplate(
    name="factscore_verify",
    version="2",
    reply=FactCheckReply,
    system=_SYSTEM,
    user=(
        "Is the FACT supported by the SOURCE? It is supported only if the SOURCE states it or it follows "
        "directly from the SOURCE; a fact that the SOURCE contradicts, or that cannot be verified from it, is "
        "not supported.\n\n$format\n\nSOURCE:\n$source\n\nFACT:\n$fact"
    ),
)

FACTSCORE_DESCRIBE_PROMPT = PromptTemplate(
    name="factscore_describe",
    version="2",
    reply=FactJudgmentReply,
    system=_SYSTEM,
    user=(
        "Is the FACT supported by the SOURCE? It is supported only if the SOURCE states it or it follows "
        "directly from the SOURCE; a fact that the SOURCE contradicts, or that cannot be verified from it, is "
        "not supported.\n"
        "If and only if it is not supported, describe every inconsistency separately: for each, say what the "
        "fact claims (quote its words in double quotes) and what the SOURCE says instead, or which detail the "
        "SOURCE does not contain. Be brief and specific; avoid vague statements such as \"this cannot be "
        "verified\". Never put two problems in one description.\n\n"
        "$format\n\nSOURCE:\n$source\n\nFACT:\n$fact"
    ),
)

_SUPPORTED_RULE = ("A fact is supported only if the SOURCE states it or it follows directly from the SOURCE; a fact "
                   "that the SOURCE contradicts, or that cannot be verified from it, is not supported.")

FACTSCORE_VERIFY_BATCH_PROMPT = PromptTemplate(
    name="factscore_verify_batch",
    version="1",
    reply=FactCheckBatchReply,
    literal=("count",),
    system=_SYSTEM,
    user=(
        "For each of the numbered FACTS, decide on its own whether the SOURCE supports it. "
        + _SUPPORTED_RULE + " Judge every fact separately: another fact in the list is not evidence. Give exactly "
        "one entry per fact, with the fact's number as its id.\n\n"
        "$format\n\nSOURCE:\n$source\n\nThere are $count FACTS.\n\nFACTS:\n$facts"
    ),
)

FACTSCORE_DESCRIBE_BATCH_PROMPT = PromptTemplate(
    name="factscore_describe_batch",
    version="1",
    reply=FactJudgmentBatchReply,
    literal=("count",),
    system=_SYSTEM,
    user=(
        "For each of the numbered FACTS, decide on its own whether the SOURCE supports it. "
        + _SUPPORTED_RULE + " Judge every fact separately: another fact in the list is not evidence.\n"
        "For a fact that is not supported, and only then, describe every inconsistency separately: for each, say "
        "what the fact claims (quote its words in double quotes) and what the SOURCE says instead, or which "
        "detail the SOURCE does not contain. Be brief and specific; never put two problems in one description. "
        "A supported fact has an empty list.\n"
        "Give exactly one entry per fact, with the fact's number as its id.\n\n"
        "$format\n\nSOURCE:\n$source\n\nThere are $count FACTS.\n\nFACTS:\n$facts"
    ),
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
