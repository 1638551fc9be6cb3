"""LlamaIndex: an evaluator that checks a response against its source nodes (``pip install
'halluscope[llamaindex]'``), usable wherever LlamaIndex takes a ``BaseEvaluator`` (``evaluate_response``,
``BatchEvalRunner``), plus :func:`check_response` for the full Report (findings, spans, evidence).

    evaluator = HalluscopeEvaluator(method="rouge", threshold=0.5)
    result = evaluator.evaluate_response(response=query_engine.query("..."))
    result.passing, result.score, result.feedback

:class:`GuardedQueryEngine` wraps a query engine so that what it answers is guarded before it ships: the answer is
checked against the response's source nodes (in order: ``[1]`` cites the first, as LlamaIndex's
``CitationQueryEngine`` numbers them) with :func:`halluscope.guard`, and the response carries the text to ship and,
in ``metadata["halluscope_guard"]``, the :class:`~halluscope.methods.guard.GuardResult`. A streaming response is
guarded while it streams (:func:`halluscope.guard_stream`): its generator yields each sentence once checked, and
``metadata["halluscope_released"]`` fills with what was released.

    engine = GuardedQueryEngine(index.as_query_engine(), on_fail="filter")
    response = engine.query("...")          # str(response): what ships
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Iterable, Sequence
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.evaluation import BaseEvaluator, EvaluationResult
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import QueryBundle

from halluscope.config import Config
from halluscope.integrations import document_chunks, join_documents
from halluscope.methods.named import build_method
from halluscope.records import Report
from halluscope.sync import run_sync

__all__ = ["GuardedQueryEngine", "HalluscopeEvaluator", "check_response"]


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


class GuardedQueryEngine(BaseQueryEngine):
    """A query engine whose answers are guarded (see the module docstring). The options are
    :func:`halluscope.guard`'s: ``on_fail`` (``filter``, ``fix``, ``raise``: a
    :class:`~halluscope.methods.guard.GuardError` out of ``query``; ``annotate``), ``style``, ``uncited``
    (``check``), ``threshold``, ``llm`` (a halluscope client) or ``config``."""

    def __init__(
        self,
        query_engine: BaseQueryEngine,
        on_fail: str = "filter",
        *,
        style: str | None = None,
        uncited: str = "check",
        threshold: float = 0.5,
        llm: Any = None,
        config: Config | None = None,
        callback_manager: Any = None,
    ):
        from halluscope.methods.guard import POLICIES

        if on_fail not in POLICIES:
            raise ValueError(f"on_fail must be one of {', '.join(POLICIES)}, got {on_fail!r}")
        super().__init__(callback_manager or getattr(query_engine, "callback_manager", None))
        self.query_engine = query_engine
        self.on_fail = on_fail
        self.options: dict[str, Any] = {
            "style": style,
            "uncited": uncited,
            "threshold": threshold,
            "llm": llm,
            "config": config,
        }

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {"query_engine": self.query_engine}

    def _guarded(self, response: Any, result: Any) -> Response:
        metadata = {**(response.metadata or {}), "halluscope_guard": result}
        return Response(response=result.text, source_nodes=response.source_nodes, metadata=metadata)

    def _stream(self, chunks: list[str], tokens: Iterable[str], released: list[Any]) -> Generator[str, None, None]:
        from halluscope.methods.guard import guard_stream

        for r in guard_stream(chunks, tokens, self.on_fail, **self.options):  # type: ignore[arg-type]
            released.append(r)
            if r.piece:
                yield r.piece

    async def _astream(self, chunks: list[str], tokens: Any, released: list[Any]) -> AsyncGenerator[str, None]:
        from halluscope.methods.guard import aguard_stream

        async for r in aguard_stream(chunks, tokens, self.on_fail, **self.options):  # type: ignore[arg-type]
            released.append(r)
            if r.piece:
                yield r.piece

    def _query(self, query_bundle: QueryBundle) -> Any:
        from halluscope.methods.guard import aguard

        response = self.query_engine.query(query_bundle)
        chunks = _source_texts(response)
        if isinstance(response, StreamingResponse):
            released: list[Any] = []
            gen = self._stream(chunks, response.response_gen, released)
            metadata = {**(response.metadata or {}), "halluscope_released": released}
            return StreamingResponse(response_gen=gen, source_nodes=response.source_nodes, metadata=metadata)
        answer = _answer_of(response)
        return self._guarded(response, run_sync(aguard(chunks, answer, self.on_fail, **self.options)))  # type: ignore[arg-type]

    async def _aquery(self, query_bundle: QueryBundle) -> Any:
        from halluscope.methods.guard import aguard

        response = await self.query_engine.aquery(query_bundle)
        chunks = _source_texts(response)
        if isinstance(response, AsyncStreamingResponse):
            released: list[Any] = []
            gen = self._astream(chunks, response.async_response_gen(), released)
            metadata = {**(response.metadata or {}), "halluscope_released": released}
            return AsyncStreamingResponse(response_gen=gen, source_nodes=response.source_nodes, metadata=metadata)
        if isinstance(response, StreamingResponse):
            response = response.get_response()
        answer = _answer_of(response)
        return self._guarded(response, await aguard(chunks, answer, self.on_fail, **self.options))  # type: ignore[arg-type]


def _answer_of(response: Any) -> str:
    if not isinstance(response, Response):
        raise TypeError(f"GuardedQueryEngine guards text responses, not a {type(response).__name__}")
    return str(response.response or "")
