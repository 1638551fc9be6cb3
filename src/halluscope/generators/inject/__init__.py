"""Hallucination injection (PROBE paper §3.2, App. B.2): weave invented, plausible facts into a faithful target
and record exactly where they went.

Complexity levels (ours, after the paper's three levels; level ``c`` injects ``c`` facts):

1. **plain mention** — one invented fact, stated plainly as a statement of its own in an otherwise
   faithful text.
2. **attached support** — two invented facts, fastened to true statements of the text: told as a detail,
   reason, or consequence of the true statement they sit next to (a clause or a follow-up sentence), so
   they borrow its credibility.
3. **false premise** — three invented facts woven in as in level 2, at least one of them presented as the
   background or cause from which a true statement of the text appears to follow, so a reader takes the
   invention as the premise of something correct.

Two steps, each swappable:

- **invent** (LLM, or facts given by the caller, or *donor* facts): ``k`` statements about the subject that the
  source does not state and does not imply. Facts that can be located in the source or the target are
  dropped. Donor facts need no LLM: sentences from the targets of other sources in the same dataset, on the
  closest topic available (:func:`donor_facts`; easier to detect than invented ones, and labelled as such in
  ``meta["facts_from"]``).
- **weave**: ``llm`` — the model returns the whole edited text with each insertion wrapped in
  ``<ins>…</ins>``; the text outside the tags must equal the original target (whitespace aside), otherwise
  the model rewrote other parts, the spans cannot be trusted, and the item is dropped and counted.
  ``boundary`` — no LLM: each fact is inserted as its own sentence at a sentence boundary (level 1: a seeded
  random boundary; levels 2-3: right after the target sentence most similar to the fact, the closest we can
  get to "attached" without rewriting).

Either way, every gold span is checked against the new target (``new_target[span] == inserted text``)
before an Example is written. Output: ``label=0``, ``descriptions`` = the injected facts, ``gold_spans`` =
the inserted text, ``difficulty="complexity-<c>"``, ``group`` = the original item, and ``meta`` with the
complexity, the injected claims (fact, inserted text, span), the original target and the **gold claims**
(``meta.gold_claims``, format in ``docs/datasets.md``): every injected fact is a gold hallucinated claim (its
text, its span in the target). With ``include_truth`` the original target is also written (``label=1``, no
spans, ``difficulty="truth"``, no hallucinated gold claim), so the set has the paper's hallucination-free
baseline and the MontageLie AUC-per-difficulty suite applies to it.

**Gold truthful claims and gold evidence** (opt-in, :class:`GoldEvidenceBuilder`, PROBE paper §3.3): the
original, faithful target is decomposed into claims (PROBE's decomposer); every judge model quotes source
passages for each claim (PROBE's evidence finder; the union of the located passages is the candidate set);
every candidate is judged PASS/FAIL by every judge vote (PROBE's evidence evaluation prompt), and accepted
when at least ``consensus`` of ALL the votes (an unusable vote counts against) say PASS (the paper: 3 of 4
models). A claim with an accepted passage is a gold truthful claim with those passages as its gold evidence
(and how many votes agreed on each); the others are recorded as *uncertain* (``meta.gold_claims_uncertain``,
with the reason), so the gold claim set is complete (``meta.gold_claims_complete``). The truthful claims'
spans are carried into each injected target through its insertions (the text outside them is the original).
"""

from halluscope.generators.inject.donors import donor_facts
from halluscope.generators.inject.generator import COMPLEXITIES, TRUTH, InjectionGenerator, InjectionResult, Weave
from halluscope.generators.inject.gold import (
    GoldEvidenceBuilder,
    TruthfulGold,
    align_original,
    map_span,
    with_truthful_gold,
)
from halluscope.generators.inject.prompts import (
    COMPLEXITY_INSTRUCTIONS,
    INVENT_PROMPT,
    SOURCE_BLOCK,
    WEAVE_PROMPT,
    with_source_block,
)
from halluscope.generators.inject.weaving import (
    InjectedClaim,
    outside_matches_original,
    parse_marked_text,
    verify_spans,
    weave_at_boundaries,
)

__all__ = [
    "COMPLEXITIES",
    "COMPLEXITY_INSTRUCTIONS",
    "INVENT_PROMPT",
    "SOURCE_BLOCK",
    "TRUTH",
    "WEAVE_PROMPT",
    "GoldEvidenceBuilder",
    "InjectedClaim",
    "InjectionGenerator",
    "InjectionResult",
    "TruthfulGold",
    "Weave",
    "align_original",
    "donor_facts",
    "map_span",
    "outside_matches_original",
    "parse_marked_text",
    "verify_spans",
    "weave_at_boundaries",
    "with_source_block",
    "with_truthful_gold",
]
