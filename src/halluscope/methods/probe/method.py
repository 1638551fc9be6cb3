"""The ``probe`` method: PROBE's four steps on the shared claim pipeline.

    target --ProbeDecomposer--> claims with target spans --RetrievalSelector--> whole source | K snippets
           --ProbeVerifier (evidence finding, evidence evaluation)--> verdicts --> score, findings

What is PROBE's own here: the decomposer (segments -> spans), the verifier (quotes verified in the source,
per-passage PASS/FAIL with consensus), the aggregator and localizer (:mod:`.outcome`: the counts, the findings'
wording), the step record in ``details["steps"]`` and a
strict max over snippets (a claim is unsupported only when every snippet it was checked against was judged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from halluscope.config import Config
from halluscope.llm import LLM
from halluscope.methods import register_method
from halluscope.methods.details import MethodDetails
from halluscope.methods.pipeline import ClaimPipeline
from halluscope.methods.probe.details import ProbeDetails
from halluscope.methods.probe.options import DEFAULT_EVIDENCE_FINDER, ProbeOptions
from halluscope.methods.probe.replies import (
    DECOMPOSE_PROMPT,
    EVALUATE_BATCH_PROMPT,
    EVALUATE_PROMPT,
    FIND_EVIDENCE_BATCH_PROMPT,
    FIND_EVIDENCE_PROMPT,
)
from halluscope.methods.probe.trace import ProbeTrace
from halluscope.methods.probe.verifier import ProbeVerifier
from halluscope.options import OptionsError, own_options
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Report
from halluscope.stages import stage_spec
from halluscope.stages.trace import RunTrace


@register_method
class Probe(ClaimPipeline):
    Details: ClassVar[type[MethodDetails]] = ProbeDetails
    name = "probe"
    description = (
        "Process-based (PROBE): claims with their target spans -> quoted source evidence -> "
        "per-excerpt PASS/FAIL (optional multi-judge consensus) -> unsupported claims located."
    )
    prompts = (
        DECOMPOSE_PROMPT,
        FIND_EVIDENCE_PROMPT,
        EVALUATE_PROMPT,
        FIND_EVIDENCE_BATCH_PROMPT,
        EVALUATE_BATCH_PROMPT,
    )
    Options: ClassVar[type[ProbeOptions]] = ProbeOptions
    default_verifier = "probe"
    default_aggregator = "probe"
    default_localizer = "probe"
    default_decomposer = "probe"
    default_evidence_finder = DEFAULT_EVIDENCE_FINDER
    extra_kinds = ("evidence_finder",)
    opts: ProbeOptions

    def __init__(self, llm: LLM | None = None, config: Config | None = None, **options: Any):
        """``judges`` may also hold LLM objects (not only model names); the options record their names."""
        judges = options.get("judges")
        self._judge_specs: list[str | LLM] = list(judges) if isinstance(judges, (list, tuple)) else []
        if any(isinstance(j, LLM) for j in self._judge_specs):
            options["judges"] = [j.name if isinstance(j, LLM) else j for j in self._judge_specs]
        super().__init__(llm, config, **options)
        if self.chosen["verifier"][0] != "probe" and "evidence_finder" in self.opts.model_fields_set:
            raise OptionsError(
                f"evidence_finder={self.opts.evidence_finder}: only probe's own verifier finds "
                f"evidence, and the verifier chosen is {self.chosen['verifier'][0]!r}"
            )

    # -- stages -------------------------------------------------------------------------------------------
    def method_stage_options(self, kind: str, name: str) -> dict[str, Any]:
        """PROBE's two evidence finders (``probe``, ``top_sentences``) get the method's options they declare
        (``max_evidence``, ``retriever``), whichever ``evidence_finder`` chose them."""
        if kind == "evidence_finder" and name in (DEFAULT_EVIDENCE_FINDER, "top_sentences"):
            return own_options(stage_spec(kind, name).options_model, self.opts)
        return {}

    def stage_collaborators(self, kind: str) -> dict[str, Any]:
        """PROBE's verifier gets the chosen evidence finder (``evidence_finder``), unless only its own namespaced
        ``verifier.evidence_finder`` names one."""
        if kind != "verifier" or (
            "evidence_finder" in self.stage_given.get("verifier", {})
            and "evidence_finder" not in self.opts.model_fields_set
        ):
            return {}
        return {"evidence_finder": self._build_own("evidence_finder")}

    def llm_stages(self) -> dict[str, bool]:
        out = super().llm_stages()
        if self.chosen["verifier"][0] != "probe":
            out.pop("evidence_finder", None)  # built only by probe's own verifier
        return out

    def judge_llms(self) -> list[LLM]:
        """The evidence-evaluation models (clients for named models are built once)."""
        return [self.named_llm(n) for n in self.opts.judges or []] or [self.llm]

    def named_llm(self, model: str) -> LLM:
        """A judge passed as an LLM object is used as given; another name gets a client at the main endpoint."""
        given = next((j for j in self._judge_specs if isinstance(j, LLM) and j.name == model), None)
        return given if given is not None else super().named_llm(model)

    def used_prompts(self) -> list[PromptTemplate]:
        decompose = [self.prompt(DECOMPOSE_PROMPT)] if self.chosen["decomposer"][0] == "probe" else []
        if self.chosen["verifier"][0] != "probe":
            return [*decompose, *self.verifier_prompts()]
        finder = [self.prompt(FIND_EVIDENCE_PROMPT)] if self.chosen["evidence_finder"][0] == "probe" else []
        batched = []
        if self.opts.batch_size > 1:  # the batch prompts (whole source only)
            batched = [self.prompt(FIND_EVIDENCE_BATCH_PROMPT)] if finder else []
            batched.append(self.prompt(EVALUATE_BATCH_PROMPT))
        return [*decompose, *finder, self.prompt(EVALUATE_PROMPT), *batched]

    def source_fits(self, source: str, claims: Sequence[Claim]) -> bool:
        if not self.chosen_uses_llm("evidence_finder") and isinstance(self.verifier, ProbeVerifier):
            return True  # retrieved evidence: the source text itself is never sent to the model
        return super().source_fits(source, claims)

    # -- steps ----------------------------------------------------------------------------------------------
    def finish(self, report: Report, trace: RunTrace) -> Report:
        """The step record (``details["steps"]``) and the quote counts, from the check's :class:`ProbeTrace`."""
        steps = trace.record(ProbeTrace)
        details: dict[str, Any] = {**report.details, "steps": steps.steps(report)}
        if "context" in report.details:
            details["source_mode"] = report.details["context"]["mode"]
        if isinstance(self.verifier, ProbeVerifier):
            details["verifier"] = self.verifier.describe()
        subscores = {**report.subscores, **steps.quote_counts()} if report.verdicts else report.subscores
        return report.model_copy(update={"details": details, "subscores": subscores})
