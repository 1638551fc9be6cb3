"""Shared by ``dcr`` and ``factscore``: decide when the whole source does not fit the model, so the method
switches to retrieval (seed 003) instead of truncating.

The decision is made twice: before the call, by counting tokens when the backend knows its context window;
and after, when a backend without a known window answers with :class:`ContextOverflowError`.
"""

from __future__ import annotations

from halluscope.llm import LLM
from halluscope.llm.base import Message

MESSAGE_OVERHEAD_TOKENS = 8  # chat-template tokens per message (role markers), a safe over-estimate


def prompt_fits(llm: LLM, messages: list[Message], reply_tokens: int) -> bool:
    """Whether ``messages`` plus a reply of ``reply_tokens`` fit the model's context window. ``True`` when the
    window is unknown: the call is then tried and a :class:`ContextOverflowError` triggers the switch."""
    window = llm.context_window
    if window is None:
        return True
    used = sum(llm.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)
    return used + reply_tokens <= window


def reply_budget(llm: LLM, wanted: int) -> int:
    """The completion budget a call will use: ``wanted`` capped by the client's configured ``max_tokens``."""
    return min(wanted, llm.default_params.max_tokens)
