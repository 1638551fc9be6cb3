"""The one provider method every stage depends on: ``generate(messages, params) -> Completion``."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from halluscope.records import Usage
from halluscope.text.redact import redact_credentials

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}

StructuredOutput = Literal["schema", "json_object", "plain"]
"""How the *first* request for a structured reply asks the backend (the repair request always sends the
schema): ``schema`` = the reply's JSON schema (constrained decoding where the backend supports it),
``json_object`` = JSON mode only, ``plain`` = no response format (the prompt's format instructions alone).
Whatever was asked, the reply is validated against the schema. A backend may declare its preferred way as a
``structured_output`` attribute (optional; ``schema`` when absent)."""


class GenerateParams(BaseModel):
    """Sampling parameters. Part of the cache key, so two calls differing here never share a reply."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = 0.0
    max_tokens: int = 1024
    seed: int | None = 0
    stop: tuple[str, ...] | None = None
    json_mode: bool = False  # ask the backend for a JSON object when it supports that
    json_schema: str | None = None
    """The reply's JSON schema (as JSON text), for backends that can constrain decoding to it; implies
    ``json_mode``. Part of the cache key like every other parameter."""
    top_logprobs: int | None = Field(default=None, ge=1, le=20)
    """Ask for the log-probabilities of this many most likely tokens at each generated position (OpenAI's
    ``logprobs``/``top_logprobs``; llama.cpp's too). A backend that cannot return them leaves
    ``Completion.logprobs`` None. Left out of the cache key while None, so existing cache entries stay valid."""


class TokenLogprobs(BaseModel):
    """One generated token, its log-probability and the most likely candidates at its position."""

    token: str
    logprob: float
    top: dict[str, float] = Field(default_factory=dict)  # candidate token -> log-probability


class Completion(BaseModel):
    text: str
    model: str
    usage: Usage = Field(default_factory=Usage)
    cached: bool = False
    logprobs: list[TokenLogprobs] | None = None  # per generated token, when asked for and the backend gives them


def parse_logprobs(choice: object) -> list[TokenLogprobs] | None:
    """The OpenAI chat-completions ``choices[i].logprobs.content`` list as :class:`TokenLogprobs` (llama.cpp
    answers in the same shape); None when absent or malformed (never an error: logprobs are optional)."""
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return None
    out: list[TokenLogprobs] = []
    try:
        for entry in content:
            top = {str(t["token"]): float(t["logprob"]) for t in entry.get("top_logprobs") or []}
            out.append(TokenLogprobs(token=str(entry["token"]), logprob=float(entry["logprob"]), top=top))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return out


class LLMError(RuntimeError):
    """A model could not be reached or refused the request after bounded retries. Its message is masked of
    credentials when it is made (an endpoint URL's userinfo and key, a bearer token: :mod:`halluscope.text.redact`)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact_credentials(a) if isinstance(a, str) else a for a in args))


class EndpointUnreachable(LLMError):
    """The model's endpoint cannot be connected to (refused, or its host unknown): retrying within one check cannot
    help, so the check ends at the first such error, unscored, with this message (which names the URL)."""


class CallBudgetExceeded(LLMError):
    """One check asked for more LLM calls than its ``max_calls`` budget: the call is not made."""


class ReplyTooLargeError(LLMError):
    """A reply over the size cap: refused (while it is read, for an HTTP backend), never parsed, and never
    sent back to the model. ``size`` is its length (``unit``: "bytes" of the response body, at least that
    many when reading stopped early, or "characters" of the text); ``excerpt`` its first characters, if any."""

    def __init__(self, message: str, size: int, unit: str = "characters", excerpt: str = ""):
        super().__init__(message)
        self.size, self.unit, self.excerpt = size, unit, excerpt


class ContextOverflowError(LLMError):
    """The prompt does not fit the model's context window. Never silently truncated."""


@runtime_checkable
class ModelAPI(Protocol):
    """A backend. Implementations only talk to their model; caching, concurrency and accounting live
    in :class:`halluscope.llm.client.LLM`."""

    name: str
    max_concurrency: int | None  # None = no backend-imposed limit

    async def generate(self, messages: list[Message], params: GenerateParams) -> Completion: ...

    def count_tokens(self, text: str) -> int | None:
        """Tokens in ``text`` for this model, or None when unknown."""
        ...

    @property
    def context_window(self) -> int | None: ...
