"""A scripted fake model for exact, offline unit tests (no network, no weights).

Four ways to script it, checked in this order for each request:
1. ``rules``: ``(regex, reply)`` pairs matched against the last user message (first match wins);
2. ``by_reply``: replies keyed by the *reply type* the request asks for -- the name of the
   :class:`~halluscope.llm.replies.Reply` model whose JSON schema it carries (``"FactCheckReply"``,
   ``"DceReply"``, ...; a Reply class works as a key too), or ``"text"`` for a request without a schema. A
   value is one reply (answering every such request), a list consumed in order (then the next way below
   answers), or a function of the messages. This keys a script by stage and order rather than by prompt
   wording, so rewording a prompt does not break it; ``halluscope stages`` / each template's ``reply`` names the
   types. The same script as a JSON file: ``--model fake:script.json`` (:meth:`FakeModel.from_script`);
3. ``replies``: a sequence consumed in order;
4. ``responder``: a function of the messages.
``default`` answers anything left; with no default an unscripted request raises, so a test never
passes on a reply nobody wrote. ``logprobs`` (a function of the reply text) scripts the token log-probabilities
returned when a request asks for them (``GenerateParams.top_logprobs``); :func:`label_logprobs` builds one that
gives chosen words (``true``, ``PASS``, ``yes``) exact candidate probabilities, and a script file's
``"logprobs": {"true": 0.8, "false": 0.2}`` does the same.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from halluscope.llm.base import Completion, GenerateParams, LLMError, Message, StructuredOutput, TokenLogprobs
from halluscope.records import Usage

TEXT_REPLY = "text"
"""The ``by_reply`` key of a request that asks for no JSON schema (free text: G-Eval's paper form, localize's
chain of thought and filter)."""

ScriptedReply = str | Exception | Callable[[list[Message]], str]


def reply_type(params: GenerateParams) -> str:
    """The reply type a request asks for: its JSON schema's title (the Reply model's name), else ``"text"``."""
    if not params.json_schema:
        return TEXT_REPLY
    try:
        title = json.loads(params.json_schema).get("title")
    except (ValueError, AttributeError):
        return TEXT_REPLY
    return title if isinstance(title, str) and title else TEXT_REPLY


def _type_name(key: Any) -> str:
    if isinstance(key, str):
        return key
    schema = getattr(key, "json_schema", None)  # a Reply class: the title its schema carries
    if callable(schema):
        return str(schema().get("title", key.__name__))
    raise TypeError(f"a by_reply key is a reply type name or a Reply class, not {key!r}")


_TOKEN = re.compile(r"\s*(?:\w+|[^\w\s])")


def fake_tokens(text: str) -> list[str]:
    """The fake model's tokens of ``text``: each word or punctuation mark with the whitespace before it
    (their concatenation is ``text``)."""
    tokens = _TOKEN.findall(text)
    rest = text[sum(len(t) for t in tokens) :]
    return tokens + ([rest] if rest else [])


def label_logprobs(
    probabilities: Mapping[str, float] | Sequence[Mapping[str, float]],
) -> Callable[[str], list[TokenLogprobs]]:
    """A ``logprobs`` script: the reply split into :func:`fake_tokens`; each token that is (case-insensitively,
    whitespace aside) one of the words of ``probabilities`` gets every word of it as a candidate, with those
    probabilities (the chosen token its own); every other token is certain. A list of mappings gives the label
    tokens their mappings in order (the last one repeats), e.g. a different probability per batch entry."""
    tables = [dict(probabilities)] if isinstance(probabilities, Mapping) else [dict(p) for p in probabilities]

    def script(reply: str) -> list[TokenLogprobs]:
        out: list[TokenLogprobs] = []
        n = 0
        previous_was_label = False
        for token in fake_tokens(reply):
            table = tables[min(n, len(tables) - 1)]
            words = {w.lower(): w for w in table}
            word = token.strip().lower()
            continues = previous_was_label and token == token.lstrip()  # "1" right after "-": one label, "-1"
            if word in words and not continues:
                chosen = words[word]
                # the chosen candidate spelled as the token itself (with its whitespace), like a real backend
                top = {(token if cand == chosen else cand): math.log(p) if p > 0 else -1e9 for cand, p in table.items()}
                out.append(TokenLogprobs(token=token, logprob=top[token], top=top))
                n += 1
                previous_was_label = True
            else:
                out.append(TokenLogprobs(token=token, logprob=0.0, top={token: 0.0}))
                previous_was_label = False
        return out

    return script


class FakeModel:
    max_concurrency: int | None = None
    context_window: int | None = None

    def __init__(
        self,
        replies: Sequence[str | Exception] = (),
        *,
        rules: Sequence[tuple[str, str]] = (),
        responder: Callable[[list[Message]], str] | None = None,
        by_reply: Mapping[Any, ScriptedReply | Sequence[ScriptedReply]] | None = None,
        default: str | None = None,
        name: str = "fake",
        context_window: int | None = None,
        logprobs: Callable[[str], Sequence[TokenLogprobs] | None] | None = None,
        structured_output: StructuredOutput = "schema",
    ):
        self.name = name
        self.cache_id: str | None = None  # set by from_script: the script's digest, so an edited script is not cached
        self.structured_output: StructuredOutput = structured_output  # see halluscope.llm.base.StructuredOutput
        self._replies = list(replies)
        self._rules = [(re.compile(p, re.S | re.I), r) for p, r in rules]
        self._responder = responder
        self._by_reply: dict[str, ScriptedReply | list[ScriptedReply]] = {
            _type_name(k): (list(v) if isinstance(v, Sequence) and not isinstance(v, str) else v)
            for k, v in (by_reply or {}).items()
        }
        self._default = default
        self.requests: list[list[Message]] = []
        self.params: list[GenerateParams] = []  # the parameters of each request, in order
        self.reply_types: list[str] = []  # the reply type (see by_reply) of each request, in order
        self.context_window = context_window
        self._logprobs = logprobs

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    @classmethod
    def from_script(cls, path: str | Path) -> FakeModel:
        """A fake scripted by a JSON file: an object mapping reply type (see ``by_reply``) to one reply or a list
        of replies in order, plus optional ``"default"`` (answers anything left; without it an unscripted
        request fails) and ``"logprobs"`` (label word -> probability, or a list of such: see
        :func:`label_logprobs`). A reply that is not a string (a JSON object) is sent as its JSON text. E.g.
        ``{"FactsReply": {"facts": [...]}, "FactCheckReply": [{"supported": true}, {"supported": false}]}``."""
        text = Path(path).read_text()
        script = json.loads(text)
        if not isinstance(script, dict):
            raise ValueError(f"{path}: a fake script is a JSON object mapping reply type -> reply or list of replies")

        def as_text(value: Any) -> str:
            return value if isinstance(value, str) else json.dumps(value)

        default = script.pop("default", None)
        probabilities = script.pop("logprobs", None)
        by_reply = {k: [as_text(r) for r in v] if isinstance(v, list) else as_text(v) for k, v in script.items()}
        fake = cls(
            by_reply=by_reply,
            default=None if default is None else as_text(default),
            name=f"fake:{path}",
            logprobs=label_logprobs(probabilities) if probabilities else None,
        )
        fake.cache_id = "fake:" + hashlib.sha256(text.encode()).hexdigest()[:16]  # an edited script is not cached
        return fake

    def _scripted_by_type(self, messages: list[Message], kind: str) -> str | Exception | None:
        scripted = self._by_reply.get(kind)
        if isinstance(scripted, list):
            if not scripted:
                return None
            scripted = scripted.pop(0)
        if scripted is None or isinstance(scripted, (str, Exception)):
            return scripted
        return scripted(messages)

    def _reply_for(self, messages: list[Message], params: GenerateParams | None = None) -> str | Exception:
        last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        for pattern, reply in self._rules:
            if pattern.search(last_user):
                return reply
        kind = reply_type(params or GenerateParams())
        if self._by_reply:
            by_type = self._scripted_by_type(messages, kind)
            if by_type is not None:
                return by_type
        if self._replies:
            return self._replies.pop(0)
        if self._responder is not None:
            return self._responder(messages)
        if self._default is not None:
            return self._default
        raise LLMError(f"FakeModel has no scripted reply for request #{len(self.requests)} (reply type {kind})")

    async def generate(self, messages: list[Message], params: GenerateParams) -> Completion:
        self.requests.append([dict(m) for m in messages])
        self.params.append(params)
        self.reply_types.append(reply_type(params))
        reply = self._reply_for(messages, params)
        if isinstance(reply, Exception):
            raise reply
        prompt_tokens = sum(self.count_tokens(m["content"]) for m in messages)
        usage = Usage(calls=1, prompt_tokens=prompt_tokens, completion_tokens=self.count_tokens(reply))
        logprobs = None
        if params.top_logprobs and self._logprobs is not None:
            scripted = self._logprobs(reply)
            logprobs = list(scripted) if scripted is not None else None
        return Completion(text=reply, model=self.name, usage=usage, logprobs=logprobs)
