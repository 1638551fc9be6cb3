"""Meaning-preserving perturbations of a target (seed 003 §3.1, App. A): stress tests for detectors.

Seven edits change a consistent target's surface form but not what it says, so a robust detector should
give the perturbed text the same score as the original:

==========================  =====================================================================
``paraphrased``             different wording and sentence structure throughout
``simplified``              complex/compound sentences split into short, plain ones
``synonym_replaced``        some common content words swapped for close synonyms
``less_diverse``            a smaller, repetitive vocabulary
``negated``                 statements re-expressed as logically equivalent negations
``compressed``              the same facts said more concisely
``added_source_sentence``   a source sentence unrelated to the target's content, inserted verbatim
==========================  =====================================================================

The first six are LLM rewrites, one :class:`~halluscope.prompts.PromptTemplate` each, applied to the
whole target as in the paper (or sentence by sentence with ``unit="sentence"``, which keeps prompts short
for small models). Every rewrite is checked before it is kept: the reply gives the text between
``<rewritten>`` tags (a reply with no tags at all is taken whole, as the paper's prompts ask for bare
text, unless ``require_tags``), which must be non-empty, differ from the original, stay within a sane
length ratio, keep the original's names without inventing new ones or new multi-digit numbers, and meet
the perturbation's own check (``compressed`` must be shorter, ``negated`` must add a negation,
``paraphrased`` must change more than 10% of the characters, ``simplified`` must shorten the average
sentence). These are
heuristic gates against obvious failures, not a proof of equivalence. A failed check gets one repair
request; after that the item is *skipped* with the reason and the raw replies kept
(:class:`PerturbationSkip`) -- the original is never passed off as a perturbation.

``added_source_sentence`` works without an LLM by default: the candidate source sentence least related
to the target (relatedness of a source sentence = its highest similarity to any target sentence; TF-IDF
cosine, or the shared retrieval stage's embeddings/BM25) is inserted at a sentence boundary, leaving the
original text otherwise byte-for-byte intact. With ``insert_with="llm"`` the model picks and inserts the
sentence, and the reply is verified the same way (original sentences intact and in order, exactly one
inserted piece, found in the source).

Output rows are harness :class:`~halluscope.records.Example` records: the original (difficulty
``"original"``) plus one row per kept perturbation (difficulty = perturbation name), all sharing
``group`` = the original's id, label 1, ``descriptions=[]``, and ``meta`` recording the perturbation,
the model, the prompt version, checks and cost.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from rapidfuzz import fuzz

from halluscope.config import Config
from halluscope.llm import LLM, LLMError, get_llm, track_calls
from halluscope.llm.structured import generate_parsed
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import Example, LLMCall, Span, Usage
from halluscope.stages import register_stage
from halluscope.text import locate, split_sentences
from halluscope.text.parsing import ParseError

PerturbationName = Literal[
    "paraphrased", "simplified", "synonym_replaced", "less_diverse", "negated", "compressed",
    "added_source_sentence",
]
PERTURBATIONS: tuple[str, ...] = (
    "paraphrased", "simplified", "synonym_replaced", "less_diverse", "negated", "compressed",
    "added_source_sentence",
)
ORIGINAL = "original"  # difficulty of the unperturbed row in each group

Unit = Literal["target", "sentence"]
InsertWith = Literal["auto", "tfidf", "retrieval", "llm"]

# --------------------------------------------------------------------------------------------- prompts

_REWRITE_SYSTEM = (
    "You edit texts for a robustness test of fact-checking tools. Your edit changes how the text is "
    "written, never what it says: every fact, name, number, date, relation and event order in the original "
    "must still be stated in your version, and you must not add, drop, soften or strengthen any "
    "information. Do not add explanations, notes or commentary."
)
_REWRITE_FORMAT = (
    "\n\nReturn the complete edited text between <rewritten> and </rewritten>, and nothing else inside "
    "the tags.\n\nTEXT:\n$text"
)


def _rewrite_prompt(name: str, instruction: str) -> PromptTemplate:
    return PromptTemplate(name=f"perturb_{name}", version="1", system=_REWRITE_SYSTEM,
                          user=instruction + _REWRITE_FORMAT)


REWRITE_PROMPTS: dict[str, PromptTemplate] = {
    "paraphrased": _rewrite_prompt(
        "paraphrased",
        "Paraphrase the text below. Use different wording and different sentence structures throughout, so "
        "that a reader recognises the same content although few phrases are reused verbatim.",
    ),
    "simplified": _rewrite_prompt(
        "simplified",
        "Make the text below easier to read. Break long, complex or compound sentences into several short, "
        "simple sentences and prefer plain constructions. Only the sentence structure may change; every "
        "piece of information stays.",
    ),
    "synonym_replaced": _rewrite_prompt(
        "synonym_replaced",
        "Replace a number of common content words in the text below (nouns, verbs, adjectives, adverbs) with "
        "close synonyms that keep the meaning in context. Keep names, numbers and the sentence structure as "
        "they are.",
    ),
    "less_diverse": _rewrite_prompt(
        "less_diverse",
        "Rewrite the text below with a smaller, more repetitive vocabulary: where it uses several different "
        "words for similar things or actions, use one plain, frequent word each time, even if that makes the "
        "style repetitive.",
    ),
    "negated": _rewrite_prompt(
        "negated",
        "Rewrite the text below so that several of its statements are expressed through a negation that is "
        "logically equivalent to the original statement -- for example 'the door was open' becomes 'the door "
        "was not closed', and 'everyone agreed' becomes 'nobody disagreed'. Each rewritten statement must mean "
        "exactly what the original statement meant; do not negate a statement without compensating for it.",
    ),
    "compressed": _rewrite_prompt(
        "compressed",
        "Rewrite the text below more concisely: cut redundancy, filler and wordy phrasing and merge sentences "
        "where that helps, while still stating every fact the text states.",
    ),
}

INSERT_PROMPT = PromptTemplate(
    name="perturb_added_source_sentence",
    version="1",
    system=(
        "You edit summaries for a robustness test of fact-checking tools. You add one true sentence from the "
        "source document to a summary and change nothing else."
    ),
    user=(
        "Below are a SOURCE document and a SUMMARY of it. Choose one sentence of the SOURCE that is about "
        "something the SUMMARY does not discuss, and insert it, copied word for word, between two sentences "
        "of the SUMMARY (or after its last sentence). Leave every other character of the SUMMARY as it is.\n\n"
        "Return the complete new summary between <rewritten> and </rewritten>, and nothing else inside the "
        "tags.\n\nSOURCE:\n$source\n\nSUMMARY:\n$text"
    ),
)

FORMAT_HINT = "the complete edited text between <rewritten> and </rewritten>"

# -------------------------------------------------------------------------------------- parse and check

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_BLOCK = re.compile(r"<rewritten>(.*?)</rewritten>", re.S | re.I)
_OPEN = re.compile(r"<rewritten>", re.I)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?|\n?```\s*$")
_WORD = re.compile(r"\w+(?:['’]\w+)*")
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nobody|nothing|nowhere|neither|nor|without|cannot|hardly|barely)\b|n['’]t\b", re.I
)


def parse_rewritten(reply: str, *, require_tags: bool = False) -> str:
    """The rewritten text of a reply: the last non-empty ``<rewritten>...</rewritten>`` block; a reply with
    no tag at all is taken whole (the paper's prompts ask for bare text), minus code fences, a short
    "Here is ...:" lead-in line and wrapping quotes -- unless ``require_tags``. Raises ParseError."""
    if not isinstance(reply, str) or not reply.strip():
        raise ParseError("empty reply")
    body = _THINK.sub("", reply)
    blocks = [_FENCE.sub("", b.strip()).strip() for b in _BLOCK.findall(body)]
    blocks = [b for b in blocks if b]
    if blocks:
        text = blocks[-1]
        if _OPEN.search(text) or "</rewritten>" in text.lower():
            raise ParseError("nested <rewritten> tags")
        return text
    if _BLOCK.search(body):
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
    if len(text) > 1 and text[0] in "\"“" and text[-1] in "\"”" and sum(text.count(q) for q in "\"“”") == 2:
        text = text[1:-1].strip()
    if not text:
        raise ParseError("no text in the reply")
    return text


def reply_is_tagged(reply: str) -> bool:
    return bool(_BLOCK.search(_THINK.sub("", reply or "")))


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def negation_count(text: str) -> int:
    return len(_NEGATION.findall(text))


def _normalized(text: str) -> str:
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
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70",
                      "eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000", "dozen": "12"})


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
    if not part and _normalized(rewritten) == _normalized(original):
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


@dataclass(frozen=True)
class Insertion:
    """One source sentence placed into the target: where it now sits and where it came from."""

    text: str
    target_span: Span  # in the perturbed target
    source_span: Span
    how: str  # "tfidf" | "retrieval:<retriever>" | "llm"
    relatedness: float | None = None


def verify_insertion(original: str, perturbed: str, source: str, *, min_words: int = 4) -> Insertion:
    """Check that ``perturbed`` is ``original`` with exactly one source sentence inserted between two of its
    sentences (whitespace around the insertion may differ). Raises ParseError saying what is wrong."""
    cursor = 0
    gaps: list[tuple[int, int]] = []
    for sentence in split_sentences(original):
        pos = perturbed.find(sentence.text, cursor)
        if pos < 0:
            raise ParseError(f"the original sentence {sentence.text[:60]!r} was changed or dropped")
        gaps.append((cursor, pos))
        cursor = pos + len(sentence.text)
    gaps.append((cursor, len(perturbed)))
    filled = [(s, e) for s, e in gaps if perturbed[s:e].strip()]
    if not filled:
        raise ParseError("nothing was inserted")
    if len(filled) > 1:
        raise ParseError(f"text was added in {len(filled)} places, expected exactly one insertion")
    start, end = filled[0]
    piece = perturbed[start:end]
    lead = len(piece) - len(piece.lstrip())
    inserted = piece.strip()
    span = Span(start=start + lead, end=start + lead + len(inserted))
    if word_count(inserted) < min_words:
        raise ParseError(f"the inserted text {inserted!r} is too short to be a sentence")
    match = locate(inserted, source, min_fuzzy=90.0)
    if match is None:
        raise ParseError(f"the inserted text is not a sentence of the source: {inserted[:80]!r}")
    if locate(inserted, original, min_fuzzy=90.0) is not None:
        raise ParseError("the inserted sentence repeats the summary")
    return Insertion(text=inserted, target_span=span, source_span=match.span, how="llm")


# -------------------------------------------------------------------------- no-LLM sentence insertion

_CANDIDATE_BAD = re.compile(r"[\"“”\[\]{}|_*#<>]|^\W|\b(?:chapter|illustrated|transcriber|copyright)\b", re.I)
_ENDS = (".", "!", "?")
_LEANS_BACK = re.compile(r"(?:and|but|yet|so|or|then|still|also|however|thus)\b", re.I)
_PERSONAL = re.compile(r"\b(?:I|me|my|mine|we|us|our|ours|you|your|yours)\b", re.I)


def candidate_sentences(source: str, *, min_words: int = 8, max_words: int = 40):
    """Source sentences fit to stand alone in a summary: plain declarative prose of a sensible length --
    no dialogue (quotes), headings, bylines, editorial notes, markup, or openings like "But ..." that lean
    on the previous sentence. Third-person sentences are preferred (a summary narrates in the third person);
    first/second-person ones are used only when a source has nothing else."""
    plain, personal = [], []
    for sentence in split_sentences(source):
        text = sentence.text
        n = word_count(text)
        if not (min_words <= n <= max_words) or not text.endswith(_ENDS) or "\n" in text:
            continue
        if _CANDIDATE_BAD.search(text) or not text[0].isupper() or text.isupper() or _LEANS_BACK.match(text):
            continue
        (personal if _PERSONAL.search(text) else plain).append(sentence)
    return plain or personal


def tfidf_relatedness(candidates: Sequence[str], target_sentences: Sequence[str]) -> list[float]:
    """For each candidate, its highest TF-IDF cosine similarity to any target sentence."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True)
    try:
        matrix = vectorizer.fit_transform(list(candidates) + list(target_sentences))
    except ValueError:  # empty vocabulary: only stop words everywhere
        return [0.0] * len(candidates)
    sims = cosine_similarity(matrix[: len(candidates)], matrix[len(candidates) :])
    return [float(row.max()) if row.size else 0.0 for row in sims]


def retrieval_relatedness(source: str, candidates: Sequence, target_sentences: Sequence[str],
                          retriever: str = "auto", index_cache: dict | None = None) -> tuple[list[float], str]:
    """Relatedness from the shared retrieval stage (embedding cosine, or BM25 score when no embedding model
    is installed): a candidate's best similarity to any target sentence. Returns the scores and the
    retriever used."""
    from halluscope.retrieval import RetrievalConfig, SourceIndex

    index = index_cache.get(source) if index_cache is not None else None
    if index is None:
        config = RetrievalConfig(top_k=1, window=0, retriever=retriever)  # type: ignore[arg-type]
        index = SourceIndex.build(source, config)
        if index_cache is not None:
            while len(index_cache) >= 8:  # several targets usually share a source; keep the last few
                index_cache.pop(next(iter(index_cache)))
            index_cache[source] = index
    index.embed_queries(target_sentences)
    best = np.max(np.stack([index.sentence_scores(q) for q in target_sentences]), axis=0)
    return [float(best[c.index]) for c in candidates], index.retriever


def choose_unrelated_sentence(source: str, target: str, rng: random.Random, *, how: str = "tfidf",
                              tie_tolerance: float = 1e-9, index_cache: dict | None = None):
    """The candidate source sentence least related to the target (ties broken by ``rng``), with its
    relatedness and the selector used; ``None`` when the source has no usable candidate."""
    target_sentences = [s.text for s in split_sentences(target)] or [target]
    in_target = _normalized(target)
    candidates = [c for c in candidate_sentences(source) if _normalized(c.text) not in in_target]
    if not candidates:
        return None
    if how == "retrieval":
        scores, used = retrieval_relatedness(source, candidates, target_sentences, index_cache=index_cache)
        used = f"retrieval:{used}"
    else:
        scores, used = tfidf_relatedness([c.text for c in candidates], target_sentences), "tfidf"
    lowest = min(scores)
    ties = [c for c, s in zip(candidates, scores) if s <= lowest + tie_tolerance]
    chosen = rng.choice(ties)
    return chosen, lowest, used


def insert_at_boundary(target: str, sentence: str, rng: random.Random) -> tuple[str, Span]:
    """Insert ``sentence`` after a randomly chosen target sentence (never before the first one). Returns the
    new text and the inserted span; removing that span and the one space before it restores ``target``."""
    sentences = split_sentences(target)
    if not sentences:
        raise ValueError("target has no sentences")
    after = sentences[rng.randrange(len(sentences))]
    pos = after.span.end
    new = target[:pos] + " " + sentence + target[pos:]
    return new, Span(start=pos + 1, end=pos + 1 + len(sentence))


# ---------------------------------------------------------------------------------------------- records


class PerturbationSkip(BaseModel):
    """A perturbation that was not produced, and why (the raw replies are kept for audit)."""

    model_config = ConfigDict(extra="forbid")

    example_id: str
    perturbation: str
    reason: str
    calls: list[LLMCall] = Field(default_factory=list)


@dataclass
class PerturbOutcome:
    perturbation: str
    example: Example | None = None
    skip: PerturbationSkip | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass
class GroupResult:
    """All rows produced for one original: the original first, then the kept perturbations."""

    original: Example
    rows: list[Example]
    skips: list[PerturbationSkip]
    usage: Usage

    @property
    def kept(self) -> int:
        return max(0, len(self.rows) - 1)


def _perturbed_example(original: Example, perturbation: str, target: str, meta: dict[str, Any]) -> Example:
    return Example(
        id=f"{original.id}::{perturbation}",
        source=original.source,
        target=target,
        label=1,
        descriptions=[],
        group=original.id,
        difficulty=perturbation,
        split=original.split,
        meta={"perturbation": perturbation, "original_id": original.id, **meta},
    )


def original_row(original: Example) -> Example:
    """The unperturbed row of a group."""
    meta = dict(original.meta)
    if original.difficulty is not None:
        meta["input_difficulty"] = original.difficulty
    if original.group is not None:
        meta["input_group"] = original.group
    return original.model_copy(update={
        "label": 1 if original.label is None else original.label,
        "descriptions": original.descriptions if original.descriptions is not None else [],
        "group": original.id,
        "difficulty": ORIGINAL,
        "meta": {**meta, "perturbation": ORIGINAL, "original_id": original.id},
    })


# ----------------------------------------------------------------------------------------------- stages


def _usage_of(calls: Sequence[LLMCall]) -> Usage:
    total = Usage()
    for call in calls:
        total = total + call.usage
    return total


@register_stage("perturb_rewrite")
class RewritePerturbation:
    """An LLM rewrite perturbation (paraphrased, simplified, ...) of one Example's target."""

    name: str

    def __init__(self, perturbation: str, llm: LLM, prompt: PromptTemplate, *, unit: Unit = "target",
                 require_tags: bool = False):
        if perturbation not in REWRITE_PROMPTS:
            raise ValueError(f"{perturbation!r} is not an LLM rewrite perturbation")
        self.perturbation = perturbation
        self.llm = llm
        self.prompt = prompt
        self.unit = unit
        self.require_tags = require_tags

    def _params(self, text: str):
        # a rewrite can be longer than its input; leave room for the tags and a little preamble
        return self.llm.params(max_tokens=max(256, 2 * self.llm.count_tokens(text) + 128))

    async def _rewrite(self, text: str, validate: Callable[[str], None]):
        def parse(reply: str) -> str:
            rewritten = parse_rewritten(reply, require_tags=self.require_tags)
            validate(rewritten)
            return rewritten

        return await generate_parsed(self.llm, self.prompt.render(text=text), parse,
                                     params=self._params(text), format_hint=FORMAT_HINT)

    async def __call__(self, original: Example) -> PerturbOutcome:
        target = original.target
        calls: list[LLMCall] = []
        accepted: list[str] = []  # the raw replies whose text was used

        def skip(reason: str) -> PerturbOutcome:
            return PerturbOutcome(self.perturbation, skip=PerturbationSkip(
                example_id=original.id, perturbation=self.perturbation, reason=reason, calls=calls),
                usage=_usage_of(calls))

        try:
            if self.unit == "target":
                parsed = await self._rewrite(target, lambda t: check_rewrite(self.perturbation, target, t))
                calls.extend(parsed.calls)
                if parsed.value is None:
                    return skip(parsed.error or "unparseable reply")
                perturbed = parsed.value
                accepted.append(parsed.raw)
            else:
                sentences = split_sentences(target)
                if not sentences:
                    return skip("the target has no sentences")
                # sentences run one after another: the embedded model is serial anyway, and a failure
                # stops the item early instead of spending calls on the rest
                pieces: list[str] = []
                for sentence in sentences:
                    parsed = await self._rewrite(
                        sentence.text, lambda t, s=sentence.text: check_rewrite(self.perturbation, s, t, part=True))
                    calls.extend(parsed.calls)
                    if parsed.value is None:
                        return skip(f"sentence {sentence.index}: {parsed.error or 'unparseable reply'}")
                    pieces.append(parsed.value)
                    accepted.append(parsed.raw)
                perturbed = _replace_sentences(target, sentences, pieces)
                try:
                    check_rewrite(self.perturbation, target, perturbed)
                except ParseError as exc:
                    return skip(str(exc))
        except LLMError as exc:
            return skip(f"LLM error: {exc}")
        meta = {
            "model": self.llm.name,
            "prompt": f"{self.prompt.name}@{self.prompt.version}",
            "unit": self.unit,
            "reply_format": "tagged" if all(reply_is_tagged(r) for r in accepted) else "untagged",
            "stats": rewrite_stats(target, perturbed),
            "usage": _usage_of(calls).model_dump(),
        }
        return PerturbOutcome(self.perturbation, example=_perturbed_example(original, self.perturbation,
                                                                            perturbed, meta),
                              usage=_usage_of(calls))


def _replace_sentences(text: str, sentences, replacements: Sequence[str]) -> str:
    out: list[str] = []
    cursor = 0
    for sentence, new in zip(sentences, replacements):
        out.append(text[cursor : sentence.span.start])
        out.append(new)
        cursor = sentence.span.end
    out.append(text[cursor:])
    return "".join(out)


@register_stage("perturb_insert_source_sentence")
class InsertSourceSentence:
    """``added_source_sentence``: insert an unrelated source sentence at a sentence boundary.

    ``how``: ``tfidf`` (lexical, no model), ``retrieval`` (the shared retrieval stage: embeddings when
    installed, else BM25), or ``llm`` (the model picks and inserts; the reply is verified)."""

    name: str
    perturbation = "added_source_sentence"

    def __init__(self, how: InsertWith = "tfidf", *, llm: LLM | None = None, prompt: PromptTemplate = INSERT_PROMPT,
                 seed: int = 0):
        if how == "llm" and llm is None:
            raise ValueError("insert_with='llm' needs an LLM")
        self.how = how
        self.llm = llm
        self.prompt = prompt
        self.seed = seed
        self._indexes: dict = {}  # source -> SourceIndex, for how="retrieval"

    async def __call__(self, original: Example) -> PerturbOutcome:
        if self.how == "llm":
            return await self._with_llm(original)
        rng = random.Random(f"{self.seed}:{original.id}:{self.perturbation}")
        try:
            # in the event-loop thread on purpose: sentence splitting (pysbd) is not thread-safe
            choice = choose_unrelated_sentence(original.source, original.target, rng, how=self.how,
                                               index_cache=self._indexes)
        except (ImportError, ValueError, RuntimeError) as exc:
            return self._skip(original, f"selecting a source sentence failed: {exc}", [])
        if choice is None:
            return self._skip(original, "the source has no candidate sentence (8-40 words of plain prose, not "
                                        "already in the target)", [])
        sentence, relatedness, used = choice
        perturbed, span = insert_at_boundary(original.target, sentence.text, rng)
        insertion = Insertion(sentence.text, span, sentence.span, used, relatedness)
        return PerturbOutcome(self.perturbation, example=_perturbed_example(
            original, self.perturbation, perturbed, self._meta(original.target, perturbed, insertion, None, [])))

    def _meta(self, target: str, perturbed: str, ins: Insertion, model: str | None, calls: list[LLMCall]):
        meta: dict[str, Any] = {
            "model": model,
            "selector": ins.how,
            "inserted": {
                "text": ins.text,
                "target_span": ins.target_span.model_dump(),
                "source_span": ins.source_span.model_dump(),
                "relatedness": None if ins.relatedness is None else round(ins.relatedness, 6),
            },
            "stats": rewrite_stats(target, perturbed),
        }
        if model is not None:
            meta["prompt"] = f"{self.prompt.name}@{self.prompt.version}"
            meta["usage"] = _usage_of(calls).model_dump()
        return meta

    def _skip(self, original: Example, reason: str, calls: list[LLMCall]) -> PerturbOutcome:
        return PerturbOutcome(self.perturbation, skip=PerturbationSkip(
            example_id=original.id, perturbation=self.perturbation, reason=reason, calls=calls),
            usage=_usage_of(calls))

    async def _with_llm(self, original: Example) -> PerturbOutcome:
        assert self.llm is not None
        source, target = original.source, original.target
        found: dict[str, Insertion] = {}

        def parse(reply: str) -> str:
            perturbed = parse_rewritten(reply)
            found["insertion"] = verify_insertion(target, perturbed, source)
            return perturbed

        try:
            parsed = await generate_parsed(
                self.llm, self.prompt.render(text=target, source=source), parse,
                params=self.llm.params(max_tokens=max(256, 2 * self.llm.count_tokens(target) + 256)),
                format_hint=FORMAT_HINT,
            )
        except LLMError as exc:
            return self._skip(original, f"LLM error: {exc}", [])
        if parsed.value is None:
            return self._skip(original, parsed.error or "unparseable reply", parsed.calls)
        insertion = found["insertion"]
        return PerturbOutcome(
            self.perturbation,
            example=_perturbed_example(original, self.perturbation, parsed.value,
                                       self._meta(target, parsed.value, insertion, self.llm.name, parsed.calls)),
            usage=_usage_of(parsed.calls),
        )


# -------------------------------------------------------------------------------------------- generator


def _retrieval_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("halluscope.retrieval") is not None


class PerturbGenerator:
    """Builds a stress-test set: for each original Example, the original plus its kept perturbations.

    ``perturbations``: which of :data:`PERTURBATIONS` to produce (all by default). ``unit``: rewrite the
    whole target (as the paper) or each sentence separately. ``insert_with``: how ``added_source_sentence``
    chooses and inserts its sentence (``auto`` = the shared retrieval stage when present, else TF-IDF;
    never the LLM unless asked). ``require_tags``: reject replies without ``<rewritten>`` tags instead of
    taking an untagged reply whole. Originals labelled inconsistent (label 0) are skipped: a meaning-preserving
    edit of a wrong target is still wrong, so it cannot serve as a consistent stress item.
    """

    def __init__(
        self,
        llm: LLM | None = None,
        config: Config | None = None,
        *,
        perturbations: Sequence[str] = PERTURBATIONS,
        unit: Unit = "target",
        insert_with: InsertWith = "auto",
        seed: int = 0,
        concurrency: int | None = None,
        require_tags: bool = False,
    ):
        unknown = [p for p in perturbations if p not in PERTURBATIONS]
        if unknown:
            raise ValueError(f"unknown perturbation(s) {unknown}; available: {', '.join(PERTURBATIONS)}")
        if not perturbations:
            raise ValueError("no perturbation selected")
        if unit not in ("target", "sentence"):
            raise ValueError(f"unit must be 'target' or 'sentence', got {unit!r}")
        if insert_with not in ("auto", "tfidf", "retrieval", "llm"):
            raise ValueError(f"unknown insert_with {insert_with!r}")
        self.config = config or Config()
        self._llm = llm
        self.perturbations = tuple(dict.fromkeys(perturbations))
        self.unit = unit
        self.insert_with = insert_with
        self.seed = seed
        self.concurrency = concurrency or self.config.max_concurrency
        self.require_tags = require_tags

    @property
    def needs_llm(self) -> bool:
        return any(p in REWRITE_PROMPTS for p in self.perturbations) or (
            "added_source_sentence" in self.perturbations and self.insert_with == "llm")

    @property
    def llm(self) -> LLM:
        if self._llm is None:
            self._llm = get_llm(self.config)
        return self._llm

    def stages(self) -> list[RewritePerturbation | InsertSourceSentence]:
        out: list[RewritePerturbation | InsertSourceSentence] = []
        for name in self.perturbations:
            if name in REWRITE_PROMPTS:
                prompt = apply_overrides(REWRITE_PROMPTS[name], self.config.prompts_dir)
                out.append(RewritePerturbation(name, self.llm, prompt, unit=self.unit, require_tags=self.require_tags))
            else:
                how = self.insert_with
                if how == "auto":
                    how = "retrieval" if _retrieval_available() else "tfidf"
                out.append(InsertSourceSentence(
                    how, llm=self.llm if how == "llm" else None,
                    prompt=apply_overrides(INSERT_PROMPT, self.config.prompts_dir), seed=self.seed))
        return out

    async def perturb_one(self, original: Example, stages=None) -> GroupResult:
        stages = stages if stages is not None else self.stages()
        if original.label == 0:
            skips = [PerturbationSkip(example_id=original.id, perturbation=s.perturbation,
                                      reason="the original is labelled inconsistent (label 0)") for s in stages]
            return GroupResult(original, [], skips, Usage())
        with track_calls():  # keeps these calls out of any caller's per-report log
            outcomes = await asyncio.gather(*(stage(original) for stage in stages))
        kept = [o.example for o in outcomes if o.example is not None]
        skips = [o.skip for o in outcomes if o.skip is not None]
        usage = Usage()
        for o in outcomes:
            usage = usage + o.usage
        rows = [original_row(original), *kept] if kept else []
        return GroupResult(original, rows, skips, usage)

    async def run(self, originals: Sequence[Example]) -> AsyncIterator[GroupResult]:
        """Yield one GroupResult per original as each finishes (bounded concurrency)."""
        stages = self.stages()
        sem = asyncio.Semaphore(max(1, self.concurrency))

        async def one(example: Example) -> GroupResult:
            async with sem:
                return await self.perturb_one(example, stages)

        tasks = [asyncio.ensure_future(one(e)) for e in originals]
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:
            for t in tasks:
                t.cancel()
