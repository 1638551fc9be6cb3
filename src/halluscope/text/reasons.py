"""A flagged claim's reason checked against its chosen evidence, without a model: a generated reason is shown only
when it agrees with the relation read from probabilities (the passage contradicts the claim, or the source does not
mention it), names what the passage says, and holds no prompt markup; otherwise a plain reason built from the passage
takes its place."""

from __future__ import annotations

import re

from halluscope.text.lexical import content_tokens, is_negation, tokens
from halluscope.text.markup import markup_found

MAX_REASON_CHARS = 400
"""A reason longer than this is not one sentence on why: it is cut at its last sentence end before it."""

MIN_REASON_WORDS = 4
"""A reply of fewer words ("No.", "Wrong amount.") says nothing about the passage."""

_LABEL = re.compile(r"^\s*(?:reason|explanation|answer)\s*:\s*", re.I)
_STATES = re.compile(
    r"\b(?:source|passage|text|article|document)\s+(?:also\s+|clearly\s+|explicitly\s+)?"
    r"(?:states|says|mentions|confirms|indicates|shows|reports|notes|explains|specifies)\s+(?:that\s+)?",
    re.I,
)
_CLAUSE_END = re.compile(r"[.;:!?]|,\s*(?:not|but|while|whereas|although|however)\b|\s(?:but|not|however)\s", re.I)
_AGREES = re.compile(
    r"\b(?:is|are|was|were)\s+(?:fully\s+|clearly\s+|indeed\s+|therefore\s+)?"
    r"(?:supported|consistent|correct|accurate|true|right|confirmed)\b"
    r"|\b(?:source|passage)\s+(?:supports|confirms|agrees\s+with)\b",
    re.I,
)
_UNMENTIONED = re.compile(
    r"\b(?:does\s+not|doesn't|do\s+not|did\s+not|never)\s+(?:\w+\s+)?(?:mention|say|state|specify|address|discuss)"
    r"|\bno\s+(?:information|mention)\b|\bnot\s+mentioned\b|\bsays\s+nothing\b|\bsilent\b",
    re.I,
)
_CONTRADICTS = re.compile(r"\bcontradict", re.I)


def _stems(text: str) -> set[str]:
    toks = tokens(text)
    return {t.norm for t in content_tokens(toks)} | {t.lower for t in toks if t.lower.isdigit()}


def shown_text(reply: str) -> str:
    """A generated reason as it would be shown: a leading ``Reason:`` label dropped, whitespace collapsed, cut at a
    sentence end before :data:`MAX_REASON_CHARS`."""
    text = " ".join(_LABEL.sub("", reply.strip()).split())
    if len(text) <= MAX_REASON_CHARS:
        return text
    cut = max(text.rfind(end, 0, MAX_REASON_CHARS) for end in (". ", "! ", "? "))
    return text[: cut + 1] if cut > 0 else text[:MAX_REASON_CHARS].rstrip() + "…"


def restates_claim(reason: str, claim: str) -> bool:
    """Whether ``reason`` says that the source (or the passage) states the claim itself: a clause after "the source
    states/says/mentions (that)" without a negation that holds at least 80 % of the claim's content words."""
    wanted = _stems(claim)
    if len(wanted) < 2:
        return False
    for m in _STATES.finditer(reason):
        rest = reason[m.end() :]
        stop = _CLAUSE_END.search(rest)
        clause = rest[: stop.start()] if stop else rest
        toks = tokens(clause)
        if any(is_negation(t) for t in toks):
            continue
        if len(wanted & _stems(clause)) >= 0.8 * len(wanted):
            return True
    return False


def reason_problem(reason: str, relation: str, claim: str, passage: str) -> str | None:
    """Why the generated ``reason`` (the raw reply) must not be shown for a ``claim`` whose chosen evidence is
    ``passage`` with ``relation`` (``contradicts`` or ``not_mentioned``), or None: it is empty, holds prompt markup,
    has fewer than :data:`MIN_REASON_WORDS` words, calls the claim supported, says the source states the claim,
    says the source does not mention what the passage contradicts (or contradicts what it does not mention), or,
    for a contradicting passage, names nothing the passage says that the claim does not."""
    if not reason.strip():
        return "the reason is empty"
    found = markup_found(reason)
    if found is not None:
        return f"the reason held {found}"
    if len(tokens(reason)) < MIN_REASON_WORDS:
        return f"the reason has fewer than {MIN_REASON_WORDS} words"
    if _AGREES.search(reason) and not any(is_negation(t) for t in tokens(_AGREES.split(reason)[0][-40:])):
        return "the reason calls the claim supported"
    if restates_claim(reason, claim):
        return "the reason says the source states the claim"
    if relation == "contradicts":
        if _UNMENTIONED.search(reason):
            return "the reason says the source does not mention what the chosen passage contradicts"
        if passage and not (_stems(reason) & (_stems(passage) - _stems(claim))):
            return "the reason names nothing the chosen passage says instead"
    elif relation == "not_mentioned" and _CONTRADICTS.search(reason) and not _UNMENTIONED.search(reason):
        return "the reason says the source contradicts what it does not mention"
    return None


def plain_reason(relation: str, passage: str | None, claim: str) -> str:
    """The reason built from the chosen passage alone: for a contradicting passage «The source says "…"; the target
    says "…".»; for a claim the source does not mention «The source does not mention it; the closest passage says
    "…"; the target says "…".» (without a passage, the closest passage left out)."""
    said = f'the target says "{claim.strip()}".'
    if relation == "contradicts" and passage:
        return f'The source says "{passage.strip()}"; {said}'
    closest = f'; the closest passage says "{passage.strip()}"' if passage else ""
    return f"The source does not mention it{closest}; {said}"
