"""RAI's rewrite step (DCR paper, §3.3, App. F-G): the declared replies, the prompts, the strict parsers, and
splicing rewritten sentences into the text."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from halluscope.llm.replies import Reply
from halluscope.prompts import PromptTemplate
from halluscope.records import Span
from halluscope.text import ParseError, split_sentences
from halluscope.text.markup import markup_found
from halluscope.text.placeholders import is_placeholder, shown_strings

# ------------------------------------------------------------------------------------------------ replies


class SentenceRewrite(BaseModel):
    """One rewritten sentence, by its number in the TEXT."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    id: int = Field(description="the number of the sentence")
    improved_sentence: str = Field(description="the rewritten sentence, or an empty string to delete it")


class RewritesReply(Reply):
    """RAI at sentence level: one rewrite per sentence listed for rewriting."""

    rewrites: list[SentenceRewrite] = Field(
        description="one entry for each sentence listed for rewriting, and only for those"
    )


class ImprovedTextReply(Reply):
    """RAI at paragraph level: the whole rewritten text."""

    improved_text: str = Field(description="the rewritten TEXT")


REWRITE_ECHOES = shown_strings(RewritesReply) | shown_strings(ImprovedTextReply)

# ------------------------------------------------------------------------------------------------ prompts

_SYSTEM = "You are a careful editor who corrects texts so that they say only what their source supports."

RAI_SENTENCE_PROMPT = PromptTemplate(
    name="rai_sentence",
    version="2",
    reply=RewritesReply,
    system=_SYSTEM,
    user=(
        "A reviewer found that some sentences of a TEXT are not consistent with the SOURCE the text is based "
        "on. Rewrite each of those sentences so that everything it says is supported by the SOURCE.\n\n"
        "How to rewrite:\n"
        "- Read the reviewer's reason to see exactly what is wrong.\n"
        "- Correct wrong details from the SOURCE, and drop details the SOURCE does not contain. Keep the rest "
        "of the sentence, its role in the text and its style, and change as little as possible.\n"
        "- Do not add anything the SOURCE does not say.\n"
        '- If no part of a sentence can be supported by the SOURCE, give "" as its rewrite to delete it.\n\n'
        'Give one entry for each sentence listed below, and only for those, with its number as "id".\n\n'
        "$format\n\n"
        "SOURCE:\n$source\n\n"
        "FULL TEXT, for context:\n$target\n\n"
        "SENTENCES TO REWRITE, each with its number and the reviewer's reason:\n$flagged"
    ),
)

RAI_PARAGRAPH_PROMPT = PromptTemplate(
    name="rai_paragraph",
    version="2",
    reply=ImprovedTextReply,
    system=_SYSTEM,
    user=(
        "A reviewer found that the TEXT below is not consistent with the SOURCE it is based on, for the reason "
        "given. Rewrite the TEXT so that everything it says is supported by the SOURCE: correct wrong details "
        "from the SOURCE, drop details the SOURCE does not contain, keep everything else, its purpose and its "
        "style, and add nothing the SOURCE does not say.\n\n"
        "$format\n\nSOURCE:\n$source\n\nTEXT:\n$target\n\nREVIEWER'S REASON:\n$reason"
    ),
)

RAI_PROMPTS = (RAI_SENTENCE_PROMPT, RAI_PARAGRAPH_PROMPT)

# ------------------------------------------------------------------------------------------------ parsing


def parse_rai_sentences(text: str, flagged: set[int], n: int) -> tuple[dict[int, str], list[int]]:
    """``{0-based sentence index: rewrite}`` for flagged sentences, and the ids (1-based, as written) of
    rewrites for sentences that were not flagged (ignored). Echoed placeholders and rewrites that hold prompt
    markup (a fence tag, a section header: :mod:`halluscope.text.markup`) are not rewrites. Raises ParseError when
    the reply is not the declared schema or rewrites no flagged sentence."""
    entries = RewritesReply.parse(text).rewrites
    rewrites: dict[int, str] = {}
    ignored: list[int] = []
    for entry in entries:
        new = " ".join(entry.improved_sentence.split())
        if new and (is_placeholder(new, REWRITE_ECHOES) or markup_found(new)):
            continue
        index = entry.id - 1
        if index in flagged and 0 <= index < n:
            rewrites.setdefault(index, new)
        else:
            ignored.append(entry.id)
    if not rewrites:
        raise ParseError("the reply rewrites none of the flagged sentences")
    return rewrites, ignored


def parse_rai_paragraph(text: str) -> str:
    value = ImprovedTextReply.parse(text).improved_text.strip()
    if not value or is_placeholder(value, REWRITE_ECHOES):
        raise ParseError("'improved_text' is empty or a placeholder")
    found = markup_found(value)
    if found is not None:
        raise ParseError(f"'improved_text' holds {found} of the prompt, not a rewrite")
    return value


# ------------------------------------------------------------------------------------------------ splicing


def splice(text: str, spans: Sequence[Span], rewrites: dict[int, str]) -> str:
    """``text`` with the sentences at the given spans replaced; everything else is kept exactly. An empty
    rewrite deletes the sentence together with the whitespace after it (or before it, for the last one)."""
    out = text
    for index in sorted(rewrites, reverse=True):  # right to left keeps earlier offsets valid
        start, end = spans[index].start, spans[index].end
        new = rewrites[index]
        if not new:
            while end < len(out) and out[end] in " \t":
                end += 1
            if not out[end:].strip():  # the last sentence: take the space before it instead
                while start > 0 and out[start - 1] in " \t":
                    start -= 1
        out = out[:start] + new + out[end:]
    return out


def sentence_diff(before: str, after: str) -> str:
    """Unified diff of the two texts with one sentence per line."""
    a = [s.text for s in split_sentences(before)]
    b = [s.text for s in split_sentences(after)]
    return "\n".join(difflib.unified_diff(a, b, "original", "improved", lineterm=""))
