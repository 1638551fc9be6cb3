"""The guard in LangChain (a Runnable after a RAG chain) and LlamaIndex (a guarded query engine), offline: the
frameworks' fake LLMs or a scripted query engine produce the answer, the scripted verdict-first judge
(tests/citation_oracle.py) scores it. Each adapter imports without the other framework."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from halluscope.methods.guard import GuardError
from tests.citation_oracle import CHUNKS, Oracle

ANSWER = "The tower was completed in 1889 [2]. It was painted gold in 1950 [1]. It is 330 metres tall [2]."
FILTERED = "The tower was completed in 1889 [1]. It is 330 metres tall [2]."
SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.mark.parametrize(
    "module, blocked",
    [("halluscope.integrations.langchain", "llama_index"), ("halluscope.integrations.llamaindex", "langchain_core")],
)
def test_each_adapter_imports_without_the_other_framework(module: str, blocked: str) -> None:
    needed = "langchain_core" if blocked == "llama_index" else "llama_index.core"
    pytest.importorskip(needed, reason=f"needs {needed}")
    code = f"import sys; sys.modules[{blocked!r}] = None; import {module}; print('ok')"  # None: the import fails
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


# ----------------------------------------------------------------------------------------------- LangChain


@pytest.fixture
def lc() -> Any:
    return pytest.importorskip("langchain_core", reason="needs langchain-core (the langchain extra)")


def _rag_chain(llm: Any) -> Any:
    from langchain_core.documents import Document
    from langchain_core.prompts import PromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableParallel, RunnablePassthrough

    class ListRetriever(BaseRetriever):
        docs: list[Document]

        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            return self.docs

    retriever = ListRetriever(docs=[Document(page_content=t) for t in CHUNKS])
    prompt = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")
    return RunnableParallel(context=retriever, question=RunnablePassthrough()).assign(answer=prompt | llm)


def test_langchain_guard_filters_the_chains_answer(lc: Any) -> None:
    from langchain_core.language_models import FakeListLLM

    from halluscope.integrations.langchain import HalluscopeGuard

    oracle = Oracle()
    chain = _rag_chain(FakeListLLM(responses=[ANSWER])) | HalluscopeGuard(llm=oracle.llm())
    out = chain.invoke("Tell me about the tower.")
    assert out["answer"] == FILTERED
    assert out["question"] == "Tell me about the tower."
    assert [d.page_content for d in out["context"]] == CHUNKS
    result = out["guard"]
    assert [(s.action, s.status) for s in result.sentences] == [
        ("recited", "wrong_citation"),
        ("removed", "unsupported"),
        ("kept", "supported"),
    ]
    assert result.report.subscores["citation_recall"] == pytest.approx(1 / 3)
    assert oracle.asked  # the judge scored the sentences against the retrieved documents


def test_langchain_guard_raises_and_works_async_on_a_chat_model(lc: Any) -> None:
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from halluscope.integrations.langchain import HalluscopeGuard

    chat = GenericFakeChatModel(messages=iter([AIMessage(content=ANSWER), AIMessage(content=FILTERED)]))
    chain = _rag_chain(chat)
    with pytest.raises(GuardError, match="sentence 2") as raised:
        (chain | HalluscopeGuard("raise", llm=Oracle().llm())).invoke("q")
    assert any(f.description.startswith("unsupported claim") for f in raised.value.findings)

    async def main() -> Any:
        return await (chain | HalluscopeGuard("annotate", llm=Oracle().llm(), result_key="checked")).ainvoke("q")

    out = asyncio.run(main())
    assert out["answer"] == FILTERED and not out["checked"].changed  # a clean answer ships as it came


def test_langchain_guard_names_what_it_needs(lc: Any) -> None:
    from halluscope.integrations.langchain import HalluscopeGuard

    guard = HalluscopeGuard(llm=Oracle().llm())
    with pytest.raises(TypeError, match="takes a mapping"):
        guard.invoke("just an answer")
    with pytest.raises(KeyError, match="no \\['context'\\]"):
        guard.invoke({"answer": ANSWER})
    with pytest.raises(ValueError, match="on_fail must be one of"):
        HalluscopeGuard("drop")
    out = HalluscopeGuard(llm=Oracle().llm(), documents_key="docs", answer_key="text").invoke(
        {"docs": CHUNKS, "text": ANSWER}
    )
    assert out["text"] == FILTERED


# ---------------------------------------------------------------------------------------------- LlamaIndex


@pytest.fixture
def scripted_engine() -> Any:
    """A query engine that answers ANSWER (or streams it) with CHUNKS as its source nodes."""
    pytest.importorskip("llama_index.core", reason="needs llama-index-core (the llamaindex extra)")
    from llama_index.core.base.base_query_engine import BaseQueryEngine
    from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
    from llama_index.core.schema import NodeWithScore, TextNode

    tokens = [w + " " for w in ANSWER.split(" ")]

    class Scripted(BaseQueryEngine):
        def __init__(self, streaming: bool = False) -> None:
            super().__init__(None)
            self.streaming = streaming

        def _get_prompt_modules(self) -> dict[str, Any]:
            return {}

        def _nodes(self) -> list[Any]:
            return [NodeWithScore(node=TextNode(text=c), score=1.0) for c in CHUNKS]

        def _query(self, query_bundle: Any) -> Any:
            if self.streaming:
                return StreamingResponse(response_gen=(t for t in tokens), source_nodes=self._nodes())
            return Response(response=ANSWER, source_nodes=self._nodes(), metadata={"engine": "scripted"})

        async def _aquery(self, query_bundle: Any) -> Any:
            if self.streaming:

                async def gen() -> Any:
                    for t in tokens:
                        yield t

                return AsyncStreamingResponse(response_gen=gen(), source_nodes=self._nodes())
            return self._query(query_bundle)

    return Scripted


def test_llamaindex_guarded_engine_filters_the_answer(scripted_engine: Any) -> None:
    from halluscope.integrations.llamaindex import GuardedQueryEngine

    engine = GuardedQueryEngine(scripted_engine(), llm=Oracle().llm())
    response = engine.query("Tell me about the tower.")
    assert str(response) == FILTERED
    assert [n.get_content() for n in response.source_nodes] == CHUNKS
    assert response.metadata["engine"] == "scripted"
    assert [s.action for s in response.metadata["halluscope_guard"].sentences] == ["recited", "removed", "kept"]
    with pytest.raises(GuardError, match="sentence 2"):
        GuardedQueryEngine(scripted_engine(), "raise", llm=Oracle().llm()).query("q")

    async def main() -> Any:
        return await GuardedQueryEngine(scripted_engine(), "annotate", llm=Oracle().llm()).aquery("q")

    annotated = asyncio.run(main())
    assert '<mark class="halluscope-unsupported">It was painted gold in 1950 [1].</mark>' in str(annotated)


def test_llamaindex_guarded_engine_guards_a_stream_sentence_by_sentence(scripted_engine: Any) -> None:
    from halluscope.integrations.llamaindex import GuardedQueryEngine

    response = GuardedQueryEngine(scripted_engine(streaming=True), llm=Oracle().llm()).query("q")
    released = response.metadata["halluscope_released"]
    pieces = list(response.response_gen)
    assert "".join(pieces) == FILTERED
    assert pieces == ["The tower was completed in 1889 [1].", " It is 330 metres tall [2]."]
    assert [r.sentence.action for r in released] == ["recited", "removed", "kept"]

    async def main() -> list[str]:
        engine = GuardedQueryEngine(scripted_engine(streaming=True), llm=Oracle().llm())
        streamed = await engine.aquery("q")
        return [piece async for piece in streamed.async_response_gen()]

    assert "".join(asyncio.run(main())) == FILTERED
