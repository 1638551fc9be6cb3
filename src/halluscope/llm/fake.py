"""A scripted fake model for exact, offline unit tests (no network, no weights).

Three ways to script it, checked in this order for each request:
1. ``rules``: ``(regex, reply)`` pairs matched against the last user message (first match wins);
2. ``replies``: a sequence consumed in order;
3. ``responder``: a function of the messages.
``default`` answers anything left; with no default an unscripted request raises, so a test never
passes on a reply nobody wrote. ``logprobs`` (a function of the reply text) scripts the token log-probabilities
returned when a request asks for them (``GenerateParams.top_logprobs``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from halluscope.llm.base import Completion, GenerateParams, LLMError, Message, StructuredOutput, TokenLogprobs
from halluscope.records import Usage


class FakeModel:
    max_concurrency: int | None = None
    context_window: int | None = None

    def __init__(
        self,
        replies: Sequence[str | Exception] = (),
        *,
        rules: Sequence[tuple[str, str]] = (),
        responder: Callable[[list[Message]], str] | None = None,
        default: str | None = None,
        name: str = "fake",
        context_window: int | None = None,
        logprobs: Callable[[str], Sequence[TokenLogprobs] | None] | None = None,
        structured_output: StructuredOutput = "schema",
    ):
        self.name = name
        self.structured_output: StructuredOutput = structured_output  # see halluscope.llm.base.StructuredOutput
        self._replies = list(replies)
        self._rules = [(re.compile(p, re.S | re.I), r) for p, r in rules]
        self._responder = responder
        self._default = default
        self.requests: list[list[Message]] = []
        self.params: list[GenerateParams] = []  # the parameters of each request, in order
        self.context_window = context_window
        self._logprobs = logprobs

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def _reply_for(self, messages: list[Message]) -> str | Exception:
        last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        for pattern, reply in self._rules:
            if pattern.search(last_user):
                return reply
        if self._replies:
            return self._replies.pop(0)
        if self._responder is not None:
            return self._responder(messages)
        if self._default is not None:
            return self._default
        raise LLMError(f"FakeModel has no scripted reply for request #{len(self.requests)}")

    async def generate(self, messages: list[Message], params: GenerateParams) -> Completion:
        self.requests.append([dict(m) for m in messages])
        self.params.append(params)
        reply = self._reply_for(messages)
        if isinstance(reply, Exception):
            raise reply
        prompt_tokens = sum(self.count_tokens(m["content"]) for m in messages)
        usage = Usage(calls=1, prompt_tokens=prompt_tokens, completion_tokens=self.count_tokens(reply))
        logprobs = None
        if params.top_logprobs and self._logprobs is not None:
            scripted = self._logprobs(reply)
            logprobs = list(scripted) if scripted is not None else None
        return Completion(text=reply, model=self.name, usage=usage, logprobs=logprobs)
