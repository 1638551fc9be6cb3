"""Reading a rewrite out of a reply, and the heuristic gates every kept rewrite must pass.

A reply gives the rewrite between ``<rewritten>`` tags; a reply with no tag at all is taken whole (the
paper's prompts ask for bare text) unless tags are required. Fence tags the prompt put around its data
(``<text_KEY>``, see :mod:`halluscope.text.fence`) that a model copies into its reply are dropped before
reading. :func:`check_rewrite` then rejects the obvious failures with a reason; these are heuristics, not
a proof that the meaning was preserved.
"""

from __future__ import annotations

import re

from rapidfuzz import fuzz

from halluscope.text import split_sentences
from halluscope.text.fence import strip_fence_tags
from halluscope.text.parsing import ParseError
from halluscope.text.tags import strip_think, tag_blocks, tag_contents

FORMAT_HINT = "the complete edited text between <rewritten> and </rewritten>"

_OPEN = re.compile(r"<rewritten>", re.I)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?|\n?```\s*$")
_WORD = re.compile(r"\w+(?:['’]\w+)*")
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nobody|nothing|nowhere|neither|nor|without|cannot|hardly|barely)\b|n['’]t\b", re.I
)


def parse_rewritten(reply: str, *, require_tags: bool = False) -> str:
    """The rewritten text of a reply: the last non-empty ``<rewritten>...</rewritten>`` block; a reply with
    no tag at all is taken whole (the paper's prompts ask for bare text), minus code fences, a short
    "Here is ...:" lead-in line and wrapping quotes -- unless ``require_tags``. Copies of the prompt's data
    fence tags are dropped first. Raises ParseError."""
    if not isinstance(reply, str) or not reply.strip():
        raise ParseError("empty reply")
    body = strip_fence_tags(strip_think(reply))
    blocks = [_FENCE.sub("", b.strip()).strip() for b in tag_contents(body, "rewritten")]
    blocks = [b for b in blocks if b]
    if blocks:
        text = blocks[-1]
        if _OPEN.search(text) or "</rewritten>" in text.lower():
            raise ParseError("nested <rewritten> tags")
        return text
    if next(tag_blocks(body, "rewritten"), None) is not None:
        raise ParseError("the <rewritten> block is empty")
    if _OPEN.search(body):
        raise ParseError("<rewritten> is never closed with </rewritten> (truncated reply?)")
    if "</rewritten>" in body.lower():
        raise ParseError("</rewritten> without an opening <rewritten>")
    if require_tags:
        raise ParseError("no <rewritten>...</rewritten> block in the reply")
    text = _FENCE.sub("", body.strip()).strip()
    first, _, rest = text.partition("\n")
    if rest.strip() and first.rstrip().endswith(":") and word_count(first) <= 12:
        text = rest.strip()
    if len(text) > 1 and text[0] in '"“' and text[-1] in '"”' and sum(text.count(q) for q in '"“”') == 2:
        text = text[1:-1].strip()
    if not text:
        raise ParseError("no text in the reply")
    return text


def reply_is_tagged(reply: str) -> bool:
    return next(tag_blocks(strip_think(reply or ""), "rewritten"), None) is not None


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def negation_count(text: str) -> int:
    return len(_NEGATION.findall(text))


def normalized(text: str) -> str:
    """The words of ``text``, lower-cased and single-spaced (for "is this the same text" comparisons)."""
    return " ".join(_WORD.findall(text.lower()))


# (min, max) ratio of rewritten to original word count. Generous on purpose: the bounds only catch
# replies that lost or invented large parts (a refusal, a one-line summary, a rambling continuation).
LENGTH_BOUNDS: dict[str, tuple[float, float]] = {
    "paraphrased": (0.5, 2.0),
    "simplified": (0.6, 2.0),
    "synonym_replaced": (0.6, 1.6),
    "less_diverse": (0.5, 2.0),
    "negated": (0.6, 2.0),
    "compressed": (0.25, 1.0),
}


_NAME_TOKEN = re.compile(r"[A-Za-z][\w'’-]*")
_POSSESSIVE = re.compile(r"['’]s$")
_NUMERAL = re.compile(r"\d+(?:[.,]\d+)*")
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty".split()
    )
}
_NUMBER_WORDS.update(
    {
        "thirty": "30",
        "forty": "40",
        "fifty": "50",
        "sixty": "60",
        "seventy": "70",
        "eighty": "80",
        "ninety": "90",
        "hundred": "100",
        "thousand": "1000",
        "dozen": "12",
    }
)


def _bare(token: str) -> str:
    return _POSSESSIVE.sub("", token).lower()


def names_in(text: str) -> set[str]:
    """Capitalised words that do not open a sentence (names, places, titles), lower-cased."""
    out: set[str] = set()
    for sentence in split_sentences(text):
        for token in _NAME_TOKEN.findall(sentence.text)[1:]:
            if token[0].isupper() and token != "I":
                out.add(_bare(token))
    return out


def numbers_in(text: str) -> set[str]:
    found = {m.group(0).replace(",", "") for m in _NUMERAL.finditer(text)}
    found |= {_NUMBER_WORDS[w] for w in (t.lower() for t in _NAME_TOKEN.findall(text)) if w in _NUMBER_WORDS}
    return found


MAX_PARAPHRASE_SIMILARITY = 0.9  # character-level similarity above which a "paraphrase" is a near copy


def mean_sentence_words(text: str) -> float:
    sentences = split_sentences(text)
    return word_count(text) / max(1, len(sentences))


def check_rewrite(perturbation: str, original: str, rewritten: str, *, part: bool = False) -> None:
    """Raise ParseError with a reason when ``rewritten`` is not an acceptable ``perturbation`` of
    ``original``. Heuristic gates that catch the obvious failures -- a copy, a truncated or rambling reply,
    a "compression" that is longer, a "negation" without a negation, a "paraphrase" that is a near copy, a
    "simplification" whose sentences are not shorter on average, names dropped or invented, new multi-digit
    numbers -- they cannot prove that the meaning was preserved. ``part=True`` checks one
    sentence of a sentence-by-sentence rewrite: it may stay unchanged, and the whole-text checks (shorter,
    negation added) are left to the joined text."""
    if not rewritten.strip():
        raise ParseError("the rewritten text is empty")
    if not part and normalized(rewritten) == normalized(original):
        raise ParseError("the rewritten text is identical to the original")
    n_orig, n_new = word_count(original), word_count(rewritten)
    low, high = LENGTH_BOUNDS.get(perturbation, (0.5, 2.0))
    if part:  # a single short sentence varies more in length
        low, high = low / 2, max(high, 2.0) * 1.5
    ratio = n_new / max(1, n_orig)
    if not part and perturbation == "compressed" and n_new >= n_orig:
        raise ParseError(f"the compressed text is not shorter ({n_new} words vs {n_orig})")
    if not low <= ratio <= high:
        raise ParseError(f"length ratio {ratio:.2f} ({n_new} vs {n_orig} words) outside [{low}, {high}]")
    if not part and perturbation == "negated" and negation_count(rewritten) <= negation_count(original):
        raise ParseError("no negation was introduced")
    if not part and perturbation == "paraphrased":
        similarity = fuzz.ratio(original, rewritten) / 100.0
        if similarity > MAX_PARAPHRASE_SIMILARITY:
            raise ParseError(f"not a paraphrase: {similarity:.0%} of the text is unchanged")
    if not part and perturbation == "simplified":
        before, after = mean_sentence_words(original), mean_sentence_words(rewritten)
        if after >= before:
            raise ParseError(f"sentences did not get shorter ({after:.1f} vs {before:.1f} words on average)")
    original_words = {_bare(t) for t in _NAME_TOKEN.findall(original)}
    rewritten_words = {_bare(t) for t in _NAME_TOKEN.findall(rewritten)}
    dropped = sorted(names_in(original) - rewritten_words)
    if dropped:
        raise ParseError(f"names of the original are missing: {', '.join(dropped[:8])}")
    invented = sorted(names_in(rewritten) - original_words)
    if invented:
        raise ParseError(f"names not in the original were introduced: {', '.join(invented[:8])}")
    new_numbers = sorted(n for n in numbers_in(rewritten) - numbers_in(original) if len(n.split(".")[0]) >= 2)
    if new_numbers:
        raise ParseError(f"numbers not in the original were introduced: {', '.join(new_numbers[:8])}")


def rewrite_stats(original: str, rewritten: str) -> dict[str, float | int]:
    """Descriptive numbers recorded in ``meta`` so users can audit or filter perturbations."""
    return {
        "words_original": word_count(original),
        "words_perturbed": word_count(rewritten),
        "sentences_original": len(split_sentences(original)),
        "sentences_perturbed": len(split_sentences(rewritten)),
        "negations_added": negation_count(rewritten) - negation_count(original),
        "char_similarity": round(fuzz.ratio(original, rewritten) / 100.0, 4),
    }
