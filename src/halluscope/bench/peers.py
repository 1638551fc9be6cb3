"""Other libraries' faithfulness metrics beside halluscope's methods, on the same endpoint and the same items:
RAGAS ``Faithfulness`` (statements, then verdicts) and DeepEval ``FaithfulnessMetric`` (truths, claims, verdicts).

They come from the optional ``peers`` dependency group (``pip install --group peers``, see pyproject.toml) and are
imported only when a peer is built: :func:`make_peer` raises :class:`PeerUnavailable` with the reason when the
library is missing, and ``halluscope bench --peers`` then skips that peer and says why in the table. Each peer sends
its requests through an OpenAI client of its own at the endpoint; every completion it receives is counted (calls and
the endpoint's own ``usage``), so its row has calls and tokens like a method's. A peer's result is a
:class:`~halluscope.records.Report` (method ``"ragas faithfulness"`` / ``"deepeval faithfulness"``): a reply the
peer cannot read leaves the item unscored with the reason, its calls still counted."""

from __future__ import annotations

import asyncio
import os
import time
import traceback
from dataclasses import dataclass
from typing import Any, Protocol

from halluscope.records import Report, Usage

PEER_NAMES = {"ragas": "ragas faithfulness", "deepeval": "deepeval faithfulness"}
QUESTION = "Summarize the article."  # the peers score a response to a question; the source is the retrieved context


class PeerUnavailable(RuntimeError):
    """A peer library that is not installed (or cannot start): the peer is skipped with this reason."""


@dataclass
class Endpoint:
    """The OpenAI-compatible endpoint (and model) the peers call: the one the methods use."""

    base_url: str
    model: str
    api_key: str
    max_tokens: int


class Peer(Protocol):
    name: str

    def score(self, source: str, target: str) -> Report: ...


class _Counter:
    """Counts the completions an OpenAI client received, with the endpoint's ``usage``, through httpx hooks."""

    def __init__(self) -> None:
        self.usage = Usage()

    def _add(self, response: Any) -> None:
        if response.status_code != 200 or not str(response.url).endswith("/completions"):
            return
        try:
            usage = response.json().get("usage") or {}
        except ValueError:
            usage = {}
        self.usage = self.usage + Usage(
            calls=1,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        )

    def sync_client(self) -> Any:
        import httpx

        def hook(response: Any) -> None:
            response.read()
            self._add(response)

        return httpx.Client(timeout=900, event_hooks={"response": [hook]})

    def async_client(self) -> Any:
        import httpx

        async def hook(response: Any) -> None:
            await response.aread()
            self._add(response)

        return httpx.AsyncClient(timeout=900, event_hooks={"response": [hook]})


def _report(name: str, model: str, run: Any, counter: _Counter) -> Report:
    started = time.perf_counter()
    try:
        value = run()
        score = None if value is None or value != value else min(1.0, max(0.0, float(value)))  # NaN: no score
        reason = None if score is not None else f"{name} gave no score"
    except Exception as exc:  # a peer that cannot read a reply raises; its calls still count
        score, reason = None, f"{name} failed: {type(exc).__name__}: {str(exc)[:300]}"
        details = {"traceback": traceback.format_exc()[-1500:]}
    else:
        details = {}
    return Report(
        method=name,
        model=model,
        score=score,
        unscored_reason=reason,
        usage=counter.usage,
        elapsed_s=round(time.perf_counter() - started, 3),
        details=details,
    )


class RagasPeer:
    """RAGAS ``Faithfulness`` (ragas 0.4: ``ragas.metrics.collections``), its LLM an OpenAI client at the endpoint."""

    name = PEER_NAMES["ragas"]

    def __init__(self, endpoint: Endpoint):
        os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
        try:
            import ragas.metrics.collections  # noqa: F401
        except ImportError as exc:
            raise PeerUnavailable(f"ragas is not installed ({exc}); install the 'peers' dependency group") from exc
        self.endpoint = endpoint

    async def _score(self, source: str, target: str, counter: _Counter) -> Any:
        # A client per item, made and closed inside this item's event loop: a client kept across asyncio.run calls
        # holds pooled connections of a closed loop, and every later item fails before reaching the endpoint.
        from openai import AsyncOpenAI
        from ragas.llms import llm_factory
        from ragas.metrics.collections import Faithfulness

        e = self.endpoint
        client = AsyncOpenAI(
            base_url=e.base_url, api_key=e.api_key, max_retries=0, timeout=900, http_client=counter.async_client()
        )
        try:
            llm = llm_factory(e.model, client=client, max_tokens=e.max_tokens, temperature=0.0)
            result = await Faithfulness(llm=llm).ascore(
                user_input=QUESTION, response=target, retrieved_contexts=[source]
            )
            return getattr(result, "value", result)
        finally:
            await client.close()

    def score(self, source: str, target: str) -> Report:
        counter = _Counter()
        return _report(
            self.name, self.endpoint.model, lambda: asyncio.run(self._score(source, target, counter)), counter
        )


class DeepEvalPeer:
    """DeepEval ``FaithfulnessMetric``, its model one chat call per prompt at the endpoint (no telemetry)."""

    name = PEER_NAMES["deepeval"]

    def __init__(self, endpoint: Endpoint):
        os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
        os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
        try:
            from deepeval.metrics import FaithfulnessMetric
        except ImportError as exc:
            raise PeerUnavailable(f"deepeval is not installed ({exc}); install the 'peers' dependency group") from exc
        self.endpoint = endpoint
        self.metric_cls = FaithfulnessMetric

    def score(self, source: str, target: str) -> Report:
        from deepeval.test_case import LLMTestCase

        counter = _Counter()
        model = _deepeval_model(self.endpoint, counter)

        def run() -> Any:
            metric = self.metric_cls(model=model, async_mode=False, include_reason=False)
            metric.measure(LLMTestCase(input=QUESTION, actual_output=target, retrieval_context=[source]))
            return metric.score

        return _report(self.name, self.endpoint.model, run, counter)


def _deepeval_model(endpoint: Endpoint, counter: _Counter) -> Any:
    """A DeepEval model that sends every prompt to the endpoint as one chat call, the schema DeepEval asks for
    in OpenAI's spelling (as its own GPTModel sends it); DeepEval parses the reply itself."""
    from deepeval.models import DeepEvalBaseLLM
    from openai import OpenAI

    client: Any = OpenAI(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        max_retries=0,
        timeout=900,
        http_client=counter.sync_client(),
    )

    def generate(self: Any, prompt: str, schema: Any = None) -> Any:
        fmt: dict[str, Any] = {"type": "json_object"}
        if schema is not None:
            fmt = {
                "type": "json_schema",
                "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema()},
            }
        reply = client.chat.completions.create(
            model=endpoint.model,
            messages=[{"role": "user", "content": prompt}],
            temperature=0.0,
            max_tokens=endpoint.max_tokens,
            response_format=fmt,
        )
        text = reply.choices[0].message.content or ""
        if schema is None:
            return text
        from deepeval.metrics.utils import trimAndLoadJson

        return schema(**trimAndLoadJson(text))

    async def a_generate(self: Any, prompt: str, schema: Any = None) -> Any:
        return generate(self, prompt, schema)

    def init(self: Any) -> None:
        self.model_name = endpoint.model

    # built with type(): DeepEval's base class is untyped (Any) where the peers group is not installed
    model_cls = type(
        "EndpointModel",
        (DeepEvalBaseLLM,),
        {
            "__init__": init,
            "load_model": lambda self: client,
            "generate": generate,
            "a_generate": a_generate,
            "get_model_name": lambda self: f"endpoint:{endpoint.model}",
        },
    )
    return model_cls()


PEERS: dict[str, type[RagasPeer] | type[DeepEvalPeer]] = {"ragas": RagasPeer, "deepeval": DeepEvalPeer}


def make_peer(key: str, endpoint: Endpoint | None) -> Peer:
    """The peer ``key`` (``ragas`` or ``deepeval``) at ``endpoint``; :class:`PeerUnavailable` when it cannot run
    (not installed, or no OpenAI-compatible endpoint to call); ``ValueError`` for an unknown name."""
    if key not in PEERS:
        raise ValueError(f"unknown peer {key!r}: choose from {', '.join(PEERS)}")
    if endpoint is None:
        raise PeerUnavailable("the peers call an OpenAI-compatible endpoint: pass --base-url and --model")
    return PEERS[key](endpoint)
