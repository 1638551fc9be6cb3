"""``added_source_sentence``: insert a source sentence unrelated to the target's content at a sentence boundary.

Without an LLM (the default): the candidate source sentence least related to the target (relatedness of a
source sentence = its highest similarity to any target sentence; TF-IDF cosine, or the shared retrieval
stage's embeddings/BM25) is inserted after a target sentence, leaving the original text otherwise
byte-for-byte intact. With ``how="llm"`` the model picks and inserts the sentence, and the reply is
verified (original sentences intact and in order, exactly one inserted piece, found in the source).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from halluscope._optional import require
from halluscope.generators.perturb.checks import FORMAT_HINT, normalized, parse_rewritten, rewrite_stats, word_count
from halluscope.generators.perturb.rows import InsertWith, PerturbOutcome, perturbed_row, skipped, usage_of
from halluscope.llm import LLM, LLMError
from halluscope.llm.structured import generate_parsed
from halluscope.options import StageOptions
from halluscope.prompts import PromptTemplate
from halluscope.records import Example, LLMCall, Span
from halluscope.stages import PromptResolver, same_prompt
from halluscope.text import Sentence, locate, split_sentences
from halluscope.text.parsing import ParseError

if TYPE_CHECKING:
    from halluscope.retrieval import SourceIndex

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


def candidate_sentences(source: str, *, min_words: int = 8, max_words: int = 40) -> list[Sentence]:
    """Source sentences fit to stand alone in a summary: plain declarative prose of a sensible length --
    no dialogue (quotes), headings, bylines, editorial notes, markup, or openings like "But ..." that lean
    on the previous sentence. Third-person sentences are preferred (a summary narrates in the third person);
    first/second-person ones are used only when a source has nothing else."""
    plain: list[Sentence]
    personal: list[Sentence]
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
    require("sklearn", "bench", "the insert perturbation's similarity")
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True)
    try:
        matrix = vectorizer.fit_transform(list(candidates) + list(target_sentences))
    except ValueError:  # empty vocabulary: only stop words everywhere
        return [0.0] * len(candidates)
    sims = cosine_similarity(matrix[: len(candidates)], matrix[len(candidates) :])
    return [float(row.max()) if row.size else 0.0 for row in sims]


def retrieval_relatedness(
    source: str,
    candidates: Sequence[Sentence],
    target_sentences: Sequence[str],
    retriever: str = "auto",
    index_cache: dict[str, SourceIndex] | None = None,
) -> tuple[list[float], str]:
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


def choose_unrelated_sentence(
    source: str,
    target: str,
    rng: random.Random,
    *,
    how: str = "tfidf",
    tie_tolerance: float = 1e-9,
    index_cache: dict[str, SourceIndex] | None = None,
) -> tuple[Sentence, float, str] | None:
    """The candidate source sentence least related to the target (ties broken by ``rng``), with its
    relatedness and the selector used; ``None`` when the source has no usable candidate."""
    target_sentences = [s.text for s in split_sentences(target)] or [target]
    in_target = normalized(target)
    candidates = [c for c in candidate_sentences(source) if normalized(c.text) not in in_target]
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


# ------------------------------------------------------------------------------------------------ stage


class InsertSourceSentence:
    """``added_source_sentence``: insert an unrelated source sentence at a sentence boundary.

    ``how``: ``tfidf`` (lexical, no model), ``retrieval`` (the shared retrieval stage: embeddings when
    installed, else BM25), or ``llm`` (the model picks and inserts; the reply is verified)."""

    name = "perturb_insert_source_sentence"  # a generator step built by PerturbGenerator, not a registered stage
    perturbation = "added_source_sentence"

    class Options(StageOptions):
        how: Literal["tfidf", "retrieval", "llm"] = "tfidf"
        """tfidf (lexical, no model), retrieval (the shared retrieval stage) or llm (the model picks and inserts)."""

        seed: int = 0
        """Seed of the sentence and position drawn (tfidf, retrieval)."""

    @classmethod
    def from_options(
        cls, model: LLM | None, options: InsertSourceSentence.Options, *, prompts: PromptResolver = same_prompt
    ) -> InsertSourceSentence:
        return cls(
            options.how, llm=model if options.how == "llm" else None, prompt=prompts(INSERT_PROMPT), seed=options.seed
        )

    def __init__(
        self,
        how: InsertWith = "tfidf",
        *,
        llm: LLM | None = None,
        prompt: PromptTemplate = INSERT_PROMPT,
        seed: int = 0,
    ):
        if how == "llm" and llm is None:
            raise ValueError("insert_with='llm' needs an LLM")
        self.how = how
        self.llm = llm
        self.prompt = prompt
        self.seed = seed
        self._indexes: dict[str, SourceIndex] = {}  # source -> SourceIndex, for how="retrieval"

    async def __call__(self, original: Example) -> PerturbOutcome:
        if self.how == "llm":
            return await self._with_llm(original)
        rng = random.Random(f"{self.seed}:{original.id}:{self.perturbation}")
        try:
            # in the event-loop thread on purpose: sentence splitting (pysbd) is not thread-safe
            choice = choose_unrelated_sentence(
                original.source, original.target, rng, how=self.how, index_cache=self._indexes
            )
        except (ImportError, ValueError, RuntimeError) as exc:
            return self._skip(original, f"selecting a source sentence failed: {exc}", [])
        if choice is None:
            return self._skip(
                original,
                "the source has no candidate sentence (8-40 words of plain prose, not already in the target)",
                [],
            )
        sentence, relatedness, used = choice
        perturbed, span = insert_at_boundary(original.target, sentence.text, rng)
        insertion = Insertion(sentence.text, span, sentence.span, used, relatedness)
        return PerturbOutcome(
            self.perturbation,
            example=perturbed_row(
                original, self.perturbation, perturbed, self._meta(original.target, perturbed, insertion, None, [])
            ),
        )

    def _meta(
        self, target: str, perturbed: str, ins: Insertion, model: str | None, calls: list[LLMCall]
    ) -> dict[str, Any]:
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
            meta["usage"] = usage_of(calls).model_dump()
        return meta

    def _skip(self, original: Example, reason: str, calls: list[LLMCall]) -> PerturbOutcome:
        return skipped(original, self.perturbation, reason, calls)

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
                self.llm,
                self.prompt.render(text=target, source=source),
                parse,
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
            example=perturbed_row(
                original,
                self.perturbation,
                parsed.value,
                self._meta(target, parsed.value, insertion, self.llm.name, parsed.calls),
            ),
            usage=usage_of(parsed.calls),
        )
