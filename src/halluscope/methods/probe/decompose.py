"""Step 1, claim decomposition: target -> atomic claims, each mapped to the target span it came from.

The model lists ``{"segment", "claim"}`` pairs (:class:`~.replies.ClaimsReply`). Each claim is placed in the
target with :func:`halluscope.text.locate`: its segment first, then its own wording, then the most similar
target sentence; how each claim was placed is recorded. Template echoes are dropped, and so is a copy of the
prompt's example unless its segment really occurs in the target.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rapidfuzz import fuzz

from halluscope.llm.structured import generate_reply
from halluscope.methods.probe.options import ProbeDecomposerOptions
from halluscope.methods.probe.replies import DECOMPOSE_PROMPT, ClaimEntry, ClaimsReply, is_template_echo, reply_examples
from halluscope.methods.probe.trace import ProbeTrace
from halluscope.records import Claim, StepResult
from halluscope.stages import PromptResolver, register_stage, same_prompt
from halluscope.stages.trace import RunTrace
from halluscope.text import ParseError, locate, split_sentences

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM

CLAIM_EXAMPLES = reply_examples(ClaimsReply)


def parse_claims(text: str, target: str = "") -> list[ClaimEntry]:
    """The reply's claims without template echoes. An echo of the prompt's example counts only when its
    segment is in ``target``. No claim left (or an empty list: every target asserts something) is an error."""
    entries = ClaimsReply.parse(text).claims
    kept = []
    for entry in entries:
        claim, segment = entry.claim.strip(), entry.segment.strip()
        if is_template_echo(claim):
            continue
        if _norm(claim) in CLAIM_EXAMPLES and not (segment and target and locate(segment, target)):
            continue
        if is_template_echo(segment, CLAIM_EXAMPLES):
            segment = ""
        kept.append(ClaimEntry(claim=claim, segment=segment))
    if not kept:
        raise ParseError(
            "the reply lists no claims"
            if not entries
            else "the reply lists no claims, only template placeholders or the prompt's example"
        )
    return kept


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .\"'")


def sentence_claims(target: str) -> tuple[list[Claim], list[dict[str, Any]]]:
    """The fallback: every target sentence is a claim (exact spans)."""
    claims, placements = [], []
    for i, s in enumerate(split_sentences(target)):
        claims.append(Claim(text=s.text, kind="sentence", id=f"c{i + 1}", target_spans=[s.span]))
        placements.append({"segment": s.text, "placed_by": "sentence"})
    return claims, placements


def place_claims(
    entries: Sequence[ClaimEntry], target: str, *, min_similarity: float = 60.0
) -> tuple[list[Claim], list[dict[str, Any]]]:
    """Map each claim to its target span: the quoted segment, else the claim's own wording, else the most
    similar target sentence (token-set similarity >= ``min_similarity``), else no span."""
    sentences = split_sentences(target)
    claims, placements = [], []
    for i, entry in enumerate(entries):
        span, how = None, "unplaced"
        for needle, label in ((entry.segment, "segment"), (entry.claim, "claim")):
            match = locate(needle, target) if needle else None
            if match is not None:
                span, how = match.span, f"{label}:{match.how}"
                break
        if span is None and sentences:
            best = max(sentences, key=lambda s: fuzz.token_set_ratio(entry.claim, s.text))
            if fuzz.token_set_ratio(entry.claim, best.text) >= min_similarity:
                span, how = best.span, "sentence:similar"
        claims.append(
            Claim(text=entry.claim, kind="atomic", id=f"c{i + 1}", target_spans=[span] if span is not None else [])
        )
        placements.append({"segment": entry.segment, "placed_by": how})
    return claims, placements


@register_stage("probe", "decomposer")
class ProbeDecomposer:
    """Target -> atomic claims, each with the target span it came from (PROBE step 1).

    On an unusable reply: the target's sentences (``on_decompose_error=sentences``, recorded in the steps) or a
    failed step (``unscored``)."""

    name: str
    trace: RunTrace | None = None  # the check's trace (with_trace), where the decomposition is recorded
    Options = ProbeDecomposerOptions

    def __init__(self, model: LLM, options: Any = None, *, prompts: PromptResolver = same_prompt):
        self.llm = model
        self.prompt = prompts(DECOMPOSE_PROMPT)
        self.fallback = (options or self.Options()).on_decompose_error

    def with_trace(self, trace: RunTrace) -> ProbeDecomposer:
        """This decomposer, recording its step into ``trace`` (one check's)."""
        bound = copy.copy(self)
        bound.trace = trace
        return bound

    async def __call__(self, target: str) -> StepResult[list[Claim]]:
        def parse(text: str) -> Any:
            return parse_claims(text, target)

        step = await generate_reply(
            self.llm, self.prompt.render(target=target), ClaimsReply, params=self.llm.params(), parse=parse
        )
        error = fallback = None
        if step.value is not None:
            claims, placements = place_claims(step.value, target)  # type: ignore[arg-type]
        elif self.fallback == "sentences":
            error, fallback = step.error, "sentences"
            claims, placements = sentence_claims(target)
        else:
            error, claims, placements = step.error, [], []
        if self.trace is not None:
            self.trace.record(ProbeTrace).decomposition = {
                "claims": [
                    {
                        "id": c.id,
                        "text": c.text,
                        "span": c.target_spans[0].model_dump() if c.target_spans else None,
                        **p,
                    }
                    for c, p in zip(claims, placements)
                ],
                "error": error,
                "fallback": fallback,
            }
        if not claims:
            return StepResult.failure(error or "no claims found in the target", step.calls)
        return StepResult.success(claims, step.calls)
