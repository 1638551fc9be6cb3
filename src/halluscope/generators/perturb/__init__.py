"""Meaning-preserving perturbations of a target (long-document stress-test paper §3.1, App. A): stress tests for
detectors.

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


Layout: :mod:`~.rows` (names, output rows, skip records), :mod:`~.checks` (reading a rewrite out of a reply,
the heuristic gates), :mod:`~.rewrite` (the six LLM rewrite prompts and their stage), :mod:`~.insert`
(``added_source_sentence``), :mod:`~.build` (:class:`PerturbGenerator`, the set builder).
"""

from __future__ import annotations

from halluscope.generators.perturb.build import PerturbGenerator
from halluscope.generators.perturb.checks import (
    FORMAT_HINT,
    LENGTH_BOUNDS,
    MAX_PARAPHRASE_SIMILARITY,
    check_rewrite,
    mean_sentence_words,
    names_in,
    negation_count,
    numbers_in,
    parse_rewritten,
    reply_is_tagged,
    rewrite_stats,
    word_count,
)
from halluscope.generators.perturb.insert import (
    INSERT_PROMPT,
    Insertion,
    InsertSourceSentence,
    candidate_sentences,
    choose_unrelated_sentence,
    insert_at_boundary,
    retrieval_relatedness,
    tfidf_relatedness,
    verify_insertion,
)
from halluscope.generators.perturb.rewrite import REWRITE_PROMPTS, RewritePerturbation
from halluscope.generators.perturb.rows import (
    ORIGINAL,
    PERTURBATIONS,
    GroupResult,
    InsertWith,
    PerturbationName,
    PerturbationSkip,
    PerturbOutcome,
    Unit,
    original_row,
)

__all__ = [
    "FORMAT_HINT",
    "INSERT_PROMPT",
    "LENGTH_BOUNDS",
    "MAX_PARAPHRASE_SIMILARITY",
    "ORIGINAL",
    "PERTURBATIONS",
    "REWRITE_PROMPTS",
    "GroupResult",
    "InsertSourceSentence",
    "InsertWith",
    "Insertion",
    "PerturbGenerator",
    "PerturbOutcome",
    "PerturbationName",
    "PerturbationSkip",
    "RewritePerturbation",
    "Unit",
    "candidate_sentences",
    "check_rewrite",
    "choose_unrelated_sentence",
    "insert_at_boundary",
    "mean_sentence_words",
    "names_in",
    "negation_count",
    "numbers_in",
    "original_row",
    "parse_rewritten",
    "reply_is_tagged",
    "retrieval_relatedness",
    "rewrite_stats",
    "tfidf_relatedness",
    "verify_insertion",
    "word_count",
]
