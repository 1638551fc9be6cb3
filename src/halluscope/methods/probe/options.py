"""``probe``'s typed options (``halluscope methods probe`` prints them)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator

from halluscope.options import MAX_BATCH_SIZE, ClaimOptions, options_view

MAX_JUDGES = 8
MAX_SAMPLES = 20
DEFAULT_EVIDENCE_FINDER = "probe"
"""PROBE's own evidence finder (the paper's step 2), used when ``evidence_finder`` names none."""
RETIRED_EVIDENCE = {
    "evidence": "evidence_finder=probe (was evidence=llm) or evidence_finder=top_sentences (was evidence=retrieval)"
}


class ProbeOptions(ClaimOptions):
    """PROBE's own settings on top of the shared retrieval protocol and swappable verifier."""

    retired_spellings = RETIRED_EVIDENCE

    judges: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] | None = Field(
        default=None, max_length=MAX_JUDGES
    )
    """Evidence-evaluation judges: model names at the main model's endpoint (CLI: a,b,c); default: the main model."""

    samples: int = Field(default=1, ge=1, le=MAX_SAMPLES)
    """Votes per judge; samples beyond the first use sample_temperature and their own seed."""

    sample_temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    """Sampling temperature of the repeated votes (samples > 1)."""

    consensus: float = Field(default=0.75, gt=0.0, le=1.0)
    """PASS share of ALL the votes needed to accept a passage, an unusable vote counting against (paper: 3 of 4
    judges = 0.75; the gold builder uses the same rule)."""

    max_evidence: int = Field(default=3, ge=1, le=20)
    """Passages kept per claim (and per context) from the evidence finder. It can cap the paper's "complete"
    evidence finding: the probe_steps suite says so (``capped``) when a gold claim has more gold passages."""

    context_sentences: int = Field(default=2, ge=0, le=20)
    """Source sentences shown on each side of a passage as surrounding context when it is judged."""

    batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
    """With the whole source: claims per evidence-finding call, and claims per evaluation call among those that quoted
    the same passage; each claim still judged on its own (1 = the paper's calls per claim and per passage; with
    retrieval each claim keeps its own calls)."""

    evidence_finder: str | None = None
    """The evidence finder stage (`halluscope stages evidence_finder`): probe (the default, the paper's: the model
    quotes the source, quotes verified) or top_sentences (the top source sentences, no LLM), or any registered one; its
    options as evidence_finder.OPTION. Used by probe's own verifier."""

    on_decompose_error: Literal["sentences", "unscored"] = "sentences"
    """On an unusable decomposition reply: check the target's sentences as claims, or return an unscored report."""

    @field_validator("judges", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            names = [n.strip() for n in value.split(",") if n.strip()]
            return names or None
        return value


# The options of PROBE's stages: views of the flat options above (one declaration each), so `probe -o judges=a,b`
# reaches its own verifier and `dove -o verifier=probe -o verifier.judges=a,b` the same stage.
ProbeVerifierOptions = options_view(
    "ProbeVerifierOptions",
    ProbeOptions,
    [
        "judges",
        "samples",
        "sample_temperature",
        "consensus",
        "max_evidence",
        "context_sentences",
        "evidence_finder",
        "retriever",
        "batch_size",
    ],
    "PROBE's evidence finding and evaluation (steps 2-3); retriever: that of evidence_finder=top_sentences.",
    retired=RETIRED_EVIDENCE,
)
ProbeDecomposerOptions = options_view(
    "ProbeDecomposerOptions", ProbeOptions, ["on_decompose_error"], "PROBE's decomposition (step 1)."
)
ProbeFinderOptions = options_view(
    "ProbeFinderOptions", ProbeOptions, ["max_evidence"], "PROBE's evidence finder (step 2)."
)
TopSentencesOptions = options_view(
    "TopSentencesOptions",
    ProbeOptions,
    ["max_evidence", "retriever"],
    "The no-LLM evidence finder: the top source sentences.",
)
