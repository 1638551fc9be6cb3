"""Prompts are typed templates that users can override by string or by file.

Placeholders use ``$name`` (``string.Template``) so JSON examples need no escaping. Every value substituted
for a placeholder is untrusted text and is *fenced* (see :mod:`halluscope.text.fence`) unless the template
lists the placeholder in ``literal`` (numbers, headings the code itself writes). A template that declares
its ``reply`` schema gets that schema's format instructions at ``$format`` (or at the end of the user
message), so one declaration drives the instructions, the backend's JSON-schema mode and the parser.

Every template has a ``name`` and a ``version``; :attr:`PromptTemplate.fingerprint` hashes the text actually
used (overrides included), and :meth:`PromptTemplate.ref` (``name@version#fingerprint``) is what reports
and benchmark runs record, so a changed prompt is never mistaken for the old one.

**Source-once layout.** Every call about one source shares a byte-identical prefix -- the system message (with
the fence notice), the instructions, the reply format and the fenced source -- and the material that changes
from call to call (a claim, a sentence, an excerpt, the target) comes last, so a backend's prefix cache
(llama.cpp's KV cache, vLLM, OpenAI prompt caching) evaluates the shared part once. Two things make this hold:
templates are written in that order (instructions, ``$format``, the ``shared`` placeholders, then the rest), and
the fence key is derived from the ``shared`` values alone (or from ``about``), not from the whole call (see
:func:`halluscope.text.fence.source_fence_key`). ``tests/test_source_once.py`` checks both for every method.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from string import Template
from typing import Any

from pydantic import BaseModel, ConfigDict

from halluscope.llm.base import Message
from halluscope.llm.replies import Reply
from halluscope.text.fence import data_notice, fence, source_fence_key


class PromptTemplate(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    version: str = "1"
    system: str | None = None
    user: str
    examples: tuple[tuple[str, str], ...] = ()  # (user, assistant) few-shot turns, already rendered
    literal: tuple[str, ...] = ()
    """Placeholders whose values are written by halluscope itself (counts, headings): not fenced."""
    reply: type[Reply] | None = None
    """The reply schema: its format instructions are inserted at ``$format`` (or appended)."""
    shared: tuple[str, ...] = ("source",)
    """Placeholders whose values are the same for every call of this prompt about one source (the source; for a
    prompt without one, the text its calls are about). The fence key comes from these alone, and the template
    places them before every per-call placeholder, so those calls share a prefix."""

    def render(self, *, about: str | None = None, **values: object) -> list[Message]:
        """Messages for this prompt; a missing placeholder raises KeyError naming it.

        ``about``: the source these calls are about, when the prompt shows only parts of it (an excerpt and
        its context): the fence key is derived from it instead of the ``shared`` placeholders."""
        names = self.placeholders()
        missing = sorted(n for n in names if n not in values and n != "format")
        if missing:
            raise KeyError(f"prompt {self.name!r} needs a value for: {', '.join(missing)}")
        data = {n: str(values[n]) for n in names if n not in self.literal and n != "format"}
        shared = [about] if about is not None else [data[n] for n in self.shared if n in data]
        key = source_fence_key(shared, data) if data else ""
        subs: dict[str, object] = {n: values[n] for n in names if n in values}
        subs.update({n: fence(n, v, key) for n, v in data.items()})
        fmt = self.reply.format_instructions() if self.reply is not None else ""
        subs["format"] = fmt
        user = Template(self.user).substitute(subs)
        if fmt and "$format" not in self.user and "${format}" not in self.user:
            user = f"{user}\n\n{fmt}"
        system = Template(self.system).substitute(subs) if self.system else None
        if data:
            notice = data_notice(key)
            system = f"{system}\n\n{notice}" if system else notice
        messages: list[Message] = []
        if system:
            messages.append({"role": "system", "content": system})
        for example_user, assistant in self.examples:
            messages.append({"role": "user", "content": example_user})
            messages.append({"role": "assistant", "content": assistant})
        messages.append({"role": "user", "content": user})
        return messages

    def override(self, user: str | Path | None = None, *, system: str | Path | None = None) -> PromptTemplate:
        """A copy with the user (and/or system) template replaced by a string or a file's contents."""
        update: dict[str, object] = {"version": f"{self.version}+custom"}
        if user is not None:
            update["user"] = _read(user)
        if system is not None:
            update["system"] = _read(system)
        return self.model_copy(update=update)

    def placeholders(self) -> set[str]:
        names: set[str] = set()
        for text in (self.system or "", self.user):
            for m in Template.pattern.finditer(text):
                name = m.group("named") or m.group("braced")
                if name:
                    names.add(name)
        return names

    @property
    def fingerprint(self) -> str:
        """A hash of everything that shapes the messages sent: wording, examples, literals, reply schema."""
        payload: dict[str, Any] = {
            "system": self.system,
            "user": self.user,
            "examples": self.examples,
            "literal": self.literal,
            "shared": self.shared,
            "reply": self.reply.model_json_schema() if self.reply is not None else None,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()[:8]

    def ref(self) -> str:
        return f"{self.name}@{self.version}#{self.fingerprint}"


def _read(value: str | Path) -> str:
    if isinstance(value, Path) or (isinstance(value, str) and "\n" not in value and value.endswith(".txt")):
        path = Path(value)
        if not path.is_file():
            raise FileNotFoundError(f"prompt file not found: {path}")
        return path.read_text(encoding="utf-8")
    return value


def apply_overrides(template: PromptTemplate, prompts_dir: Path | None) -> PromptTemplate:
    """Use ``<prompts_dir>/<template.name>.txt`` as the user template when it exists."""
    if prompts_dir is None:
        return template
    path = Path(prompts_dir) / f"{template.name}.txt"
    return template.override(path) if path.is_file() else template
