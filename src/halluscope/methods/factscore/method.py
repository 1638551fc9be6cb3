"""The ``factscore`` method: the claim pipeline with FActScore's decomposer and verifier, the fraction of judged
facts supported as its score, and the descriptions of unsupported facts de-duplicated into Findings (its localizer,
:mod:`.localize`, with a ``deduplicator`` stage from :mod:`.dedup`)."""

from __future__ import annotations

from typing import Any, ClassVar

from halluscope.methods import register_method
from halluscope.methods.details import MethodDetails
from halluscope.methods.factscore.details import FactScoreDetails
from halluscope.methods.factscore.options import DEFAULT_DEDUPLICATOR
from halluscope.methods.factscore.options import FactScoreOptions as FactScoreOptions  # importable here as before
from halluscope.methods.factscore.prompts import (
    FACTSCORE_DECOMPOSE_PROMPT,
    FACTSCORE_DEDUP_PROMPT,
    FACTSCORE_DESCRIBE_BATCH_PROMPT,
    FACTSCORE_DESCRIBE_PROMPT,
    FACTSCORE_VERIFY_BATCH_PROMPT,
    FACTSCORE_VERIFY_PROMPT,
)
from halluscope.methods.pipeline import ClaimPipeline
from halluscope.prompts import PromptTemplate


@register_method
class FactScore(ClaimPipeline):
    Details: ClassVar[type[MethodDetails]] = FactScoreDetails
    name = "factscore"
    description = (
        "Atomic facts + per-fact verification -> fraction supported; describe=True lists each "
        "fact's inconsistencies, de-duplicated across facts (fuzzy or LLM)."
    )
    Options = FactScoreOptions
    opts: FactScoreOptions
    prompts = (
        FACTSCORE_DECOMPOSE_PROMPT,
        FACTSCORE_VERIFY_PROMPT,
        FACTSCORE_DESCRIBE_PROMPT,
        FACTSCORE_VERIFY_BATCH_PROMPT,
        FACTSCORE_DESCRIBE_BATCH_PROMPT,
        FACTSCORE_DEDUP_PROMPT,
    )
    default_threshold = 1.0
    default_verifier = "factscore"
    default_localizer = "factscore"
    default_decomposer = "factscore"
    default_deduplicator = DEFAULT_DEDUPLICATOR
    extra_kinds = ("deduplicator",)

    @property
    def dedups(self) -> bool:
        """Whether a deduplicator runs: FActScore's localizer, describing inconsistencies."""
        name, options = self.chosen["localizer"]
        return name == "factscore" and bool(getattr(options, "describe", False))

    def own_stage_options(self, kind: str, name: str) -> dict[str, Any]:
        """FActScore's localizer names the chosen deduplicator."""
        own = super().own_stage_options(kind, name)
        if kind == "localizer":
            own["deduplicator"] = self.chosen_name("deduplicator")
        return own

    def method_stage_options(self, kind: str, name: str) -> dict[str, Any]:
        """FActScore's three deduplicators (``llm``, ``fuzzy``, ``none``) get the method's ``dedup_threshold`` when
        they declare it, whichever ``deduplicator`` chose them."""
        if kind == "deduplicator" and name in (DEFAULT_DEDUPLICATOR, "fuzzy", "none"):
            return {"dedup_threshold": self.opts.dedup_threshold}
        return {}

    def stage_collaborators(self, kind: str) -> dict[str, Any]:
        """FActScore's localizer gets the chosen deduplicator (with its namespaced options), a fresh one per check."""
        if kind != "localizer":
            return {}
        name, options = self.chosen["deduplicator"]
        return {"deduplicator": lambda: self.build_stage("deduplicator", name, options)}

    def llm_stages(self) -> dict[str, bool]:
        out = super().llm_stages()
        if not self.dedups:
            out.pop("deduplicator", None)  # built only by FActScore's localizer, describing
        return out

    def used_prompts(self) -> list[PromptTemplate]:
        used = [self.prompt(FACTSCORE_DECOMPOSE_PROMPT)] if self.chosen["decomposer"][0] == "factscore" else []
        used += self.verifier_prompts()
        if self.dedups and self.chosen["deduplicator"][0] == "llm":
            used.append(self.prompt(FACTSCORE_DEDUP_PROMPT))
        return used
