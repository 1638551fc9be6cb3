"""A scripted verdict-first judge for the citation and guard tests: a claim is supported exactly when every number
it states appears in the SOURCE of the prompt (and it states one). Answers "yes"/"no" with token probabilities
(yes: P = 0.9; no: P(yes) = 0.2), and logs every (claim, source) it was asked, in order."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from halluscope.llm.client import LLM
from halluscope.llm.fake import FakeModel, label_logprobs

_SOURCE = re.compile(r"<source_\w+>\n(.*?)\n</source_\w+>", re.S)
_CLAIM = re.compile(r"<claim_\w+>\n(.*?)\n</claim_\w+>", re.S)

CHUNKS = [
    "The Eiffel Tower was completed in 1889 for the World's Fair.",
    "The tower is 330 metres tall and has three levels for visitors.",
    "Gustave Eiffel's company also built the Garabit viaduct, finished in 1884.",
]


_MARKERS = re.compile(r"\[\^?\d+\]|\((?:Source|Sources) [\d, ]+\)")


def numbers(text: str) -> set[str]:
    """The numbers ``text`` states (citation markers aside: a check of the raw answer sees them too)."""
    return set(re.findall(r"\d+", _MARKERS.sub("", text)))


def supported(claim: str, source: str) -> bool:
    stated = numbers(claim)
    return bool(stated) and stated <= numbers(source)


class Oracle:
    """The judge; ``asked`` lists (claim, source) per score request; ``hook`` (if set) is called with the claim
    before the reply is made (a test can record events there)."""

    def __init__(self, fixes: Sequence[str] = (), hook: Callable[[str], None] | None = None):
        self.asked: list[tuple[str, str]] = []
        self.fixes = list(fixes)
        self.hook = hook

    def respond(self, messages: list[dict[str, str]]) -> str:
        user = messages[-1]["content"]
        source, claim = _SOURCE.search(user), _CLAIM.search(user)
        assert source is not None and claim is not None, user
        self.asked.append((claim.group(1), source.group(1)))
        if self.hook is not None:
            self.hook(claim.group(1))
        return "yes" if supported(claim.group(1), source.group(1)) else "no"

    def explain(self, messages: list[dict[str, str]]) -> str:
        import json

        fix = self.fixes.pop(0) if self.fixes else ""
        return json.dumps({"reason": "not in the source", "evidence": "", "contradicted": False, "fix": fix})

    def llm(self) -> Any:
        def reply_logprobs(reply: str) -> Any:
            return label_logprobs({"yes": 0.9, "no": 0.1} if reply == "yes" else {"no": 0.8, "yes": 0.2})(reply)

        fake = FakeModel(responder=self.respond, by_reply={"ExplainReply": self.explain}, logprobs=reply_logprobs)
        return LLM(fake, cache=None)
