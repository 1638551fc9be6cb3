"""LangChain and LlamaIndex adapters, on the frameworks' own fake LLMs: an answer is checked against the
documents its run retrieved; a grounded answer passes and an invented one fails, with the Report kept."""

from __future__ import annotations

import asyncio

import pytest

SOURCE_DOCS = [
    "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
    "It was designed by the engineering company of Gustave Eiffel and is 330 metres tall.",
]
GROUNDED = "The Eiffel Tower was completed in 1889 and is 330 metres tall."
INVENTED = "Quantum penguins negotiated lunar mining treaties beneath Antarctica yesterday."


# ----------------------------------------------------------------------------------------------- LangChain


@pytest.fixture
def lc():
    return pytest.importorskip("langchain_core", reason="needs langchain-core (the langchain extra)")


def _chain(llm):
    from langchain_core.documents import Document
    from langchain_core.prompts import PromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnablePassthrough

    class ListRetriever(BaseRetriever):
        docs: list[Document]

        def _get_relevant_documents(self, query, *, run_manager):
            return self.docs

    retriever = ListRetriever(docs=[Document(page_content=t) for t in SOURCE_DOCS])
    prompt = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")
    context = retriever | (lambda docs: "\n\n".join(d.page_content for d in docs))
    return {"context": context, "question": RunnablePassthrough()} | prompt | llm


def test_langchain_handler_checks_answers_against_retrieved_documents(lc):
    from langchain_core.language_models import FakeListLLM

    from halluscope.integrations.langchain import GroundednessCallbackHandler

    handler = GroundednessCallbackHandler(method="rouge", threshold=0.6)
    chain = _chain(FakeListLLM(responses=[GROUNDED, INVENTED]))
    assert chain.invoke("When was it built?", config={"callbacks": [handler]}) == GROUNDED
    chain.invoke("Anything else?", config={"callbacks": [handler]})
    grounded, invented = handler.reports
    assert grounded.method == "rouge" and grounded.label == "consistent" and grounded.score > 0.6
    assert invented.label == "inconsistent" and invented.score < 0.2
    assert handler._documents == {}  # forgotten once each top-level run ended


def test_langchain_handler_raises_on_ungrounded_answer(lc):
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from halluscope.integrations.langchain import GroundednessCallbackHandler, UngroundedAnswerError

    handler = GroundednessCallbackHandler(method="rouge", threshold=0.6, raise_on_ungrounded=True)
    chat = GenericFakeChatModel(messages=iter([AIMessage(content=GROUNDED), AIMessage(content=INVENTED)]))
    chain = _chain(chat)
    assert chain.invoke("q1", config={"callbacks": [handler]}).content == GROUNDED
    with pytest.raises(UngroundedAnswerError, match="answer not grounded") as info:
        chain.invoke("q2", config={"callbacks": [handler]})
    assert info.value.report.label == "inconsistent"


def test_langchain_answer_without_retrieval_is_not_checked(lc):
    from langchain_core.language_models import FakeListLLM

    from halluscope.integrations.langchain import GroundednessCallbackHandler

    handler = GroundednessCallbackHandler(method="rouge")
    FakeListLLM(responses=[INVENTED]).invoke("no documents here", config={"callbacks": [handler]})
    assert handler.reports == []


def test_langchain_async_chain_inside_a_running_loop(lc):
    from langchain_core.language_models import FakeListLLM

    from halluscope.integrations.langchain import GroundednessCallbackHandler, check_documents

    handler = GroundednessCallbackHandler(method="rouge", threshold=0.6)

    async def main():
        await _chain(FakeListLLM(responses=[GROUNDED])).ainvoke("q", config={"callbacks": [handler]})
        return check_documents(INVENTED, SOURCE_DOCS, "rouge", threshold=0.6)  # sync helper called inside the loop

    direct = asyncio.run(main())
    assert handler.reports[0].label == "consistent" and direct.label == "inconsistent"


def test_langchain_handler_with_an_llm_method_on_halluscope_fake_model(lc):
    from langchain_core.language_models import FakeListLLM

    from halluscope.integrations.langchain import GroundednessCallbackHandler
    from halluscope.llm import LLM, FakeModel

    judge = FakeModel(default='{"reason": "the year is not in the source", "score": 1}')
    handler = GroundednessCallbackHandler(method="geval", llm=LLM(judge, cache=None))
    _chain(FakeListLLM(responses=[INVENTED])).invoke("q", config={"callbacks": [handler]})
    (report,) = handler.reports
    assert report.usage.calls == 1 and report.score == 0.0  # the judge's rating 1 of 5
    sent = judge.requests[0][-1]["content"]
    assert SOURCE_DOCS[0] in sent and INVENTED in sent  # the documents are the source, the answer the target


# ---------------------------------------------------------------------------------------------- LlamaIndex


@pytest.fixture
def query_engine():
    pytest.importorskip("llama_index.core", reason="needs llama-index-core (the llamaindex extra)")
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM

    Settings.embed_model = MockEmbedding(embed_dim=8)
    Settings.llm = MockLLM()  # echoes its prompt: the answer repeats the retrieved context
    index = VectorStoreIndex.from_documents([Document(text=t) for t in SOURCE_DOCS])
    return index.as_query_engine(similarity_top_k=2)


def test_llamaindex_evaluator_on_mock_llm(query_engine):
    from llama_index.core.base.response.schema import Response

    from halluscope.integrations.llamaindex import HalluscopeEvaluator, check_response

    response = query_engine.query("When was the Eiffel Tower completed?")
    assert len(response.source_nodes) == 2
    evaluator = HalluscopeEvaluator(method="rouge", threshold=0.5)
    result = evaluator.evaluate_response(response=response)
    assert result.passing is True and not result.invalid_result and result.score > 0.5

    invented = Response(response=INVENTED, source_nodes=response.source_nodes)
    bad = evaluator.evaluate_response(response=invented)
    assert bad.passing is False and bad.score < 0.2 and "rouge score" in bad.feedback
    report = check_response(invented, "rouge", threshold=0.5)
    assert report.label == "inconsistent"


def test_llamaindex_evaluator_inside_a_running_loop(query_engine):
    from halluscope.integrations.llamaindex import HalluscopeEvaluator

    evaluator = HalluscopeEvaluator(method="rouge", threshold=0.5)

    async def main():
        sync_result = evaluator.evaluate(response=GROUNDED, contexts=SOURCE_DOCS)  # sync call in a running loop
        async_result = await evaluator.aevaluate(response=INVENTED, contexts=SOURCE_DOCS)
        return sync_result, async_result

    good, bad = asyncio.run(main())
    assert good.passing is True and bad.passing is False


def test_llamaindex_unscored_is_invalid_not_a_guess(query_engine):
    from halluscope.integrations.llamaindex import HalluscopeEvaluator

    result = HalluscopeEvaluator(method="rouge").evaluate(response=GROUNDED, contexts=[])
    assert result.invalid_result and result.passing is None and result.invalid_reason


def test_the_integrations_default_to_the_method_check_runs():
    pytest.importorskip("langchain_core", reason="langchain extra not installed: pip install 'halluscope[langchain]'")
    from halluscope.config import resolve_method
    from halluscope.integrations.langchain import GroundednessCallbackHandler
    from halluscope.llm import LLM, FakeModel

    handler = GroundednessCallbackHandler(llm=LLM(FakeModel(default="yes"), cache=None))
    name, options = resolve_method(None, {})
    assert handler.method.name == name and handler.method.chosen["verifier"][0] == "verdict_first"
    assert options == {"order": "verdict_first"}
