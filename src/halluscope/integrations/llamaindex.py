"""LlamaIndex: an evaluator that checks a response against its source nodes (``pip install
'halluscope[llamaindex]'``), usable wherever LlamaIndex takes a ``BaseEvaluator`` (``evaluate_response``,
``BatchEvalRunner``), plus :func:`check_response` for the full Report (findings, spans, evidence).

    evaluator = HalluscopeEvaluator(method="rouge", threshold=0.5)
    result = evaluator.evaluate_response(response=query_engine.query("..."))
    result.passing, result.score, result.feedback
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.evaluation import BaseEvaluator, EvaluationResult
from llama_index.core.prompts.mixin import PromptDictType

from halluscope.config import Config
from halluscope.integrations import document_chunks, join_documents
from halluscope.methods.named import build_method
from halluscope.records import Report
from halluscope.sync import run_sync

__all__ = ["HalluscopeEvaluator", "check_response"]


def _source_texts(response: Any) -> list[str]:
    return [node.get_content() for node in getattr(response, "source_nodes", None) or []]


def check_response(
    response: Any,
    method: str | None = None,
    *,
    threshold: float | None = None,
    config: Config | None = None,
    llm: Any = None,
    **options: Any,
) -> Report:
    """Check a LlamaIndex ``Response`` (its text) against its ``source_nodes`` (joined in order as the source)."""
    answer = str(getattr(response, "response", None) or "")
    source = document_chunks(_source_texts(response)) or ""
    checker = build_method(method, config=config, llm=llm, options=options)
    report: Report = checker.decide(run_sync(checker.acheck(source, answer)), threshold)
    return report


def _feedback(report: Report) -> str:
    if report.score is None:
        return f"could not score: {report.unscored_reason}"
    lines = [f"{report.method} score {report.score:.3f}" + (f" ({report.label})" if report.label else "")]
    lines += [f"- {f.description}" for f in report.findings]
    return "\n".join(lines)


class HalluscopeEvaluator(BaseEvaluator):
    """Faithfulness of a response to its contexts by a halluscope method. ``passing`` is the method's label
    at ``threshold`` (its default threshold when None); an unscored pair is an ``invalid_result`` with the
    reason, never a guessed pass or fail."""

    def __init__(
        self,
        method: str | None = None,
        *,
        threshold: float | None = None,
        config: Config | None = None,
        llm: Any = None,
        **options: Any,
    ):
        self._method = build_method(method, config=config, llm=llm, options=options)
        self._threshold = threshold

    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        return None

    async def areport(self, response: str, contexts: Sequence[str]) -> Report:
        """The full halluscope Report for ``response`` against ``contexts``."""
        report: Report = await self._method.acheck(document_chunks(list(contexts)) or "", response)
        decided: Report = self._method.decide(report, self._threshold)
        return decided

    async def aevaluate(
        self,
        query: str | None = None,
        response: str | None = None,
        contexts: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> EvaluationResult:
        if not response or not response.strip() or not contexts or not join_documents(list(contexts)):
            return EvaluationResult(
                query=query,
                response=response,
                contexts=list(contexts or []),
                invalid_result=True,
                invalid_reason="a response and contexts are required",
            )
        report = await self.areport(response, contexts)
        return EvaluationResult(
            query=query,
            response=response,
            contexts=list(contexts),
            passing=None if report.score is None else report.label == "consistent",
            score=report.score,
            feedback=_feedback(report),
            invalid_result=report.score is None,
            invalid_reason=report.unscored_reason,
        )

    def evaluate(
        self,
        query: str | None = None,
        response: str | None = None,
        contexts: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> EvaluationResult:
        return run_sync(self.aevaluate(query=query, response=response, contexts=contexts, **kwargs))
