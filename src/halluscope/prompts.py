"""Prompts are typed templates that users can override by string or by file.

Placeholders use ``$name`` (``string.Template``) so JSON examples need no escaping. Every template has a
``name`` and a ``version``; the version is recorded in benchmark results so a prompt change is visible.
"""

from __future__ import annotations

from pathlib import Path
from string import Template

from pydantic import BaseModel, ConfigDict

from halluscope.llm.base import Message


class PromptTemplate(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    version: str = "1"
    system: str | None = None
    user: str
    examples: tuple[tuple[str, str], ...] = ()  # (user, assistant) few-shot turns, already rendered

    def render(self, **values: object) -> list[Message]:
        """Messages for this prompt; a missing placeholder raises KeyError naming it."""
        messages: list[Message] = []
        if self.system:
            messages.append({"role": "system", "content": Template(self.system).substitute(values)})
        for user, assistant in self.examples:
            messages.append({"role": "user", "content": user})
            messages.append({"role": "assistant", "content": assistant})
        messages.append({"role": "user", "content": Template(self.user).substitute(values)})
        return messages

    def override(self, user: str | Path | None = None, *, system: str | Path | None = None) -> "PromptTemplate":
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
