"""The base of verifiers that judge claims with one prompt (:class:`LLMVerifier`), and the token arithmetic
that decides whether a prompt with the whole source fits the model's context window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from halluscope.llm import LLM
from halluscope.options import StageOptions
from halluscope.records import Claim
from halluscope.stages import PromptResolver, same_prompt

MESSAGE_OVERHEAD_TOKENS = 8  # chat-template tokens per message (role markers), a safe over-estimate


def messages_tokens(llm: Any, messages: Sequence[dict[str, str]]) -> int:
    return sum(llm.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def reply_budget(llm: Any, wanted: int) -> int:
    """The completion budget a call will use: ``wanted`` capped by the client's configured ``max_tokens``."""
    return min(wanted, int(llm.default_params.max_tokens))


class LLMVerifier:
    """Base for verifiers that judge claims against a context with one prompt: subclasses implement
    :meth:`messages` (for the token budget) and ``__call__``."""

    name: str
    reply_tokens: ClassVar[int] = 512
    Options: ClassVar[type[StageOptions]] = StageOptions

    def __init__(self, model: LLM, options: StageOptions | None = None, *, prompts: PromptResolver = same_prompt):
        if model is None:
            raise TypeError(f"the {type(self).__name__} verifier needs an LLM (model=...)")
        self.llm = model
        self.options: Any = options if options is not None else self.Options()  # the subclass's Options
        self.prompts = prompts

    def messages(self, claims: Sequence[Claim], context_text: str) -> list[dict[str, str]]:
        raise NotImplementedError

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        if not claims:
            return reply_budget(self.llm, self.reply_tokens)
        longest = max(claims, key=lambda c: len(c.text))
        return messages_tokens(self.llm, self.messages([longest], "")) + reply_budget(self.llm, self.reply_tokens)
