"""LangChain: a callback handler that checks every LLM answer of a run against the documents the run's
retrievers returned, and a guard step that filters or fixes a chain's answer before it ships
(``pip install 'halluscope[langchain]'``).

    handler = GroundednessCallbackHandler(method="rouge", threshold=0.5)
    answer = chain.invoke(question, config={"callbacks": [handler]})
    handler.reports[-1].score, handler.reports[-1].findings

Documents and answers are matched by the run tree: an answer is checked against the documents retrieved
earlier in the same top-level run (a chain invocation). An answer in a run that retrieved nothing is not
checked (there is no source to check it against). With ``raise_on_ungrounded=True`` an answer scored below
the threshold, or that could not be scored, raises :class:`UngroundedAnswerError` out of ``invoke``.

    chain = RunnableParallel(context=retriever, question=RunnablePassthrough()).assign(answer=prompt | llm)
    guarded = chain | HalluscopeGuard(on_fail="filter")
    out = guarded.invoke(question)          # out["answer"]: what ships; out["guard"]: the GuardResult

:class:`HalluscopeGuard` is a Runnable over the mapping a RAG chain returns: it checks the answer (a string or a
message) against the documents (in retrieval order: ``[1]`` cites the first) with :func:`halluscope.guard`, and
returns the mapping with the answer replaced by the text to ship and the :class:`~halluscope.methods.guard.GuardResult`
beside it; ``on_fail="raise"`` raises :class:`~halluscope.methods.guard.GuardError` out of ``invoke``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.outputs import LLMResult
from langchain_core.runnables import Runnable, RunnableConfig

from halluscope.config import Config
from halluscope.integrations import document_chunks
from halluscope.methods.named import build_method
from halluscope.records import Report
from halluscope.sync import run_sync

__all__ = ["GroundednessCallbackHandler", "HalluscopeGuard", "UngroundedAnswerError", "check_documents"]


class UngroundedAnswerError(RuntimeError):
    """An answer scored below the handler's threshold (or could not be scored); ``report`` says why."""

    def __init__(self, report: Report):
        self.report = report
        what = (
            f"could not be scored: {report.unscored_reason}"
            if report.score is None
            else f"scored {report.score:.3f} < {report.threshold}"
        )
        findings = "; ".join(f.description for f in report.findings[:5])
        super().__init__(
            f"answer not grounded in its documents ({report.method}): {what}"
            + (f". Findings: {findings}" if findings else "")
        )


def check_documents(
    answer: str,
    documents: Sequence[Document | str],
    method: str | None = None,
    *,
    threshold: float | None = None,
    config: Config | None = None,
    llm: Any = None,
    **options: Any,
) -> Report:
    """Check ``answer`` against LangChain documents (or plain strings), joined in order as the source."""
    texts = [d.page_content if isinstance(d, Document) else str(d) for d in documents]
    checker = build_method(method, config=config, llm=llm, options=options)
    report: Report = checker.decide(run_sync(checker.acheck(document_chunks(texts) or "", answer)), threshold)
    return report


class GroundednessCallbackHandler(BaseCallbackHandler):
    """Checks each LLM answer against the documents retrieved in the same run; reports land in ``reports``."""

    def __init__(
        self,
        method: str | None = None,
        *,
        threshold: float | None = None,
        config: Config | None = None,
        llm: Any = None,
        raise_on_ungrounded: bool = False,
        **options: Any,
    ):
        # options are validated now, not mid-chain
        self.method = build_method(method, config=config, llm=llm, options=options)
        self.threshold = threshold
        self.raise_on_ungrounded = raise_on_ungrounded
        self.raise_error = raise_on_ungrounded  # LangChain swallows a handler's exceptions unless this is set
        self.reports: list[Report] = []
        self._parents: dict[UUID, UUID | None] = {}
        self._documents: dict[UUID, list[str]] = {}

    # -- run tree -------------------------------------------------------------------------------------------
    def _root(self, run_id: UUID, parent_run_id: UUID | None) -> UUID:
        self._parents.setdefault(run_id, parent_run_id)
        root, seen = run_id, set()
        while (parent := self._parents.get(root)) is not None and root not in seen:
            seen.add(root)
            root = parent
        return root

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._parents[run_id] = parent_run_id

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        if parent_run_id is None:  # the top-level run is over: forget its tree and documents
            self._documents.pop(run_id, None)
            self._parents = {k: v for k, v in self._parents.items() if k != run_id and self._root(k, v) != run_id}

    def on_retriever_start(
        self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._parents[run_id] = parent_run_id

    def on_retriever_end(
        self, documents: Sequence[Document], *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        root = self._root(run_id, parent_run_id)
        self._documents.setdefault(root, []).extend(d.page_content for d in documents)

    def on_llm_start(
        self, serialized: Any, prompts: list[str], *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._parents[run_id] = parent_run_id

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._parents[run_id] = parent_run_id

    # -- the check ------------------------------------------------------------------------------------------
    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        documents = self._documents.get(self._root(run_id, parent_run_id))
        self._parents.pop(run_id, None)
        if not documents or not response.generations or not response.generations[0]:
            return
        answer = response.generations[0][0].text
        if not answer.strip():
            return
        report: Report = run_sync(self.method.acheck(document_chunks(documents) or "", answer))
        report = self.method.decide(report, self.threshold)
        self.reports.append(report)
        if self.raise_on_ungrounded and (report.score is None or report.label == "inconsistent"):
            raise UngroundedAnswerError(report)


class HalluscopeGuard(Runnable[Mapping[str, Any], dict[str, Any]]):
    """A chain step that guards the answer of a RAG chain's output mapping (see the module docstring).

    ``documents_key``/``answer_key`` name the mapping's documents (LangChain ``Document``s or strings) and answer
    (a string or a message), ``result_key`` where the :class:`~halluscope.methods.guard.GuardResult` goes. The
    other options are :func:`halluscope.guard`'s: ``on_fail`` (``filter``, ``fix``, ``raise``, ``annotate``),
    ``style``, ``uncited`` (``check``), ``threshold``, ``llm`` (a halluscope client) or ``config``."""

    def __init__(
        self,
        on_fail: str = "filter",
        *,
        documents_key: str = "context",
        answer_key: str = "answer",
        result_key: str = "guard",
        style: str | None = None,
        uncited: str = "check",
        threshold: float = 0.5,
        llm: Any = None,
        config: Config | None = None,
    ):
        from halluscope.methods.guard import POLICIES

        if on_fail not in POLICIES:
            raise ValueError(f"on_fail must be one of {', '.join(POLICIES)}, got {on_fail!r}")
        self.on_fail = on_fail
        self.documents_key, self.answer_key, self.result_key = documents_key, answer_key, result_key
        self.options: dict[str, Any] = {
            "style": style,
            "uncited": uncited,
            "threshold": threshold,
            "llm": llm,
            "config": config,
        }

    def _parts(self, value: Mapping[str, Any]) -> tuple[list[str], str]:
        if not isinstance(value, Mapping):
            raise TypeError(
                f"HalluscopeGuard takes a mapping with {self.documents_key!r} and {self.answer_key!r} (a RAG "
                f"chain's output), got {type(value).__name__}"
            )
        missing = [k for k in (self.documents_key, self.answer_key) if k not in value]
        if missing:
            raise KeyError(f"HalluscopeGuard: the chain's output has no {missing}; keys: {', '.join(map(str, value))}")
        documents = value[self.documents_key]
        if isinstance(documents, (str, Document)):
            documents = [documents]
        texts = [d.page_content if isinstance(d, Document) else str(d) for d in documents]
        answer = value[self.answer_key]
        content = getattr(answer, "content", answer)  # a chat model's message
        if not isinstance(content, str):
            raise TypeError(f"HalluscopeGuard: the answer is a {type(content).__name__}, not text")
        return texts, content

    def invoke(self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        from halluscope.methods.guard import aguard

        texts, answer = self._parts(input)
        result = run_sync(aguard(texts, answer, self.on_fail, **self.options))  # type: ignore[arg-type]
        return {**input, self.answer_key: result.text, self.result_key: result}

    async def ainvoke(
        self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        from halluscope.methods.guard import aguard

        texts, answer = self._parts(input)
        result = await aguard(texts, answer, self.on_fail, **self.options)  # type: ignore[arg-type]
        return {**input, self.answer_key: result.text, self.result_key: result}
